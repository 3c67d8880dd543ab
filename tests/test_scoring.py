import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from skype.model import DEFAULT_BOUNDS, Bounds
from skype.reference import score
from skype._core import scoring


def test_maxdist_is_the_diagonal_of_the_bounds():
    assert DEFAULT_BOUNDS.max_dist == pytest.approx(math.hypot(360, 180))
    assert Bounds(0, 0, 3, 4).max_dist == 5.0


def test_score_formula_by_hand():
    # alpha 0.25, distance 5 in a 30x40 space (MaxDist 50): SSim = 0.9; TSim = 0.6*0.8 = 0.48
    s = score([(1, 0.6), (2, 0.8)], 0.25, 0.0, 0.0, {1: 0.8, 3: 0.6}, 3.0, 4.0, 50.0)
    assert s == pytest.approx(0.25 * 0.9 + 0.75 * 0.48)
    assert score([(1, 1.0)], 0.5, 0, 0, {2: 1.0}, 0, 0, 50.0) is None  # no shared term: no score


def _csr(rows):
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(r) for r in rows])
    ids = np.array([t for r in rows for t, _ in r], dtype=np.uint32)
    ws = np.array([w for r in rows for _, w in r], dtype=np.float64)
    return indptr, ids, ws


vectors = st.dictionaries(st.integers(0, 12), st.floats(0.01, 1.0), min_size=1, max_size=5).map(
    lambda d: sorted((t, w / math.sqrt(sum(v * v for v in d.values()))) for t, w in d.items())
)


@given(
    subs=st.lists(st.tuples(vectors, st.floats(0, 1), st.floats(-180, 180), st.floats(-90, 90)), min_size=1, max_size=6),
    msgs=st.lists(st.tuples(vectors, st.floats(-180, 180), st.floats(-90, 90)), min_size=1, max_size=6),
)
def test_core_kernel_equals_python_score_bit_for_bit(subs, msgs):
    s_ptr, s_ids, s_w = _csr([s[0] for s in subs])
    m_ptr, m_ids, m_w = _csr([m[0] for m in msgs])
    ps, pm = np.meshgrid(np.arange(len(subs)), np.arange(len(msgs)), indexing="ij")
    got = scoring.score_pairs(
        np.array([s[1] for s in subs]), np.array([s[2] for s in subs]), np.array([s[3] for s in subs]),
        s_ptr, s_ids, s_w, np.array([m[1] for m in msgs]), np.array([m[2] for m in msgs]),
        m_ptr, m_ids, m_w, ps.ravel().astype(np.int64), pm.ravel().astype(np.int64), DEFAULT_BOUNDS.max_dist,
    )
    for n, (i, j) in enumerate(zip(ps.ravel(), pm.ravel())):
        want = score(subs[i][0], subs[i][1], subs[i][2], subs[i][3], dict(msgs[j][0]), msgs[j][1], msgs[j][2],
                     DEFAULT_BOUNDS.max_dist)
        if want is None:
            assert got[n] == -math.inf
        else:
            assert got[n] == want  # exact: same operations in the same order
