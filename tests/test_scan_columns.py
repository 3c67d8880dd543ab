"""The block index's compact hot columns and their scan kernels (issue 23, deliverable 5).

The column test is a filter in front of the exact per-posting test: it must keep every posting
that test keeps (conservative 16-bit codes, ties at the threshold, alpha 0 and 1, zero weights,
removed postings), the AVX2 and the portable kernel must keep the same postings, and an engine
with the column test must give the reference's answers and the same candidates as one without."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skype._core import blockindex
from skype.engine import BUFFERS
from skype.errors import InputError
from test_engine import run_core

KERNELS = blockindex.available_scan_kernels()
MAX_DIST = math.hypot(360.0, 180.0)
FLT_EPS = float(np.finfo(np.float32).eps)
SLACK = 2.0 * 180.0 * FLT_EPS / MAX_DIST + 1e-7 + 1e-9  # blocklayout's slack for these bounds


def f32(v: float) -> float:
    return float(np.float32(v))


def exact_keeps(x, y, w, rest, alpha, theta, mx_, my_, wm, mx) -> list[int]:
    """The exact test's first stage (blocks.pxd below(), in double over the f32 copies): the
    postings it does not rule out."""
    keep = []
    for i in range(len(x)):
        if theta[i] == math.inf:
            continue
        dx, dy = float(x[i]) - mx_, float(y[i]) - my_
        d2 = dx * dx + dy * dy
        tt = min(1.0, w[i] * wm + rest[i] * mx)
        r = alpha[i] + (1.0 - alpha[i]) * tt - (theta[i] - SLACK)
        if not (r < 0.0 or alpha[i] * alpha[i] * d2 > r * r * MAX_DIST * MAX_DIST):
            keep.append(i)
    return keep


def run_kernels(x, y, w, rest, alpha, theta, mx_, my_, wm, mx) -> list[int]:
    args = (np.asarray(x, np.float32), np.asarray(y, np.float32), np.asarray(w, float), np.asarray(rest, float),
            np.asarray(alpha, float), np.asarray(theta, float), mx_, my_, wm, mx, SLACK, MAX_DIST)
    outs = [blockindex.column_filter(k, *args) for k in KERNELS]
    assert all(o == outs[0] for o in outs), f"kernels disagree: {dict(zip(KERNELS, outs))}"
    return outs[0]


unit = st.floats(0.0, 1.0)
posting = st.tuples(
    st.floats(-180.0, 180.0), st.floats(-90.0, 90.0),       # x, y
    st.one_of(unit, st.sampled_from([0.0, 1.0])),             # w
    st.one_of(st.floats(0.0, 3.0), st.sampled_from([0.0, 20.0])),  # rest (saturating above 16)
    st.one_of(unit, st.sampled_from([0.0, 1.0, 0.5])),        # alpha
    st.one_of(unit, st.sampled_from([0.0, -0.0, math.inf, 1.0])),  # theta (inf: removed)
)


@settings(max_examples=300, deadline=None)
@given(st.lists(posting, min_size=0, max_size=40), st.floats(-180.0, 180.0), st.floats(-90.0, 90.0),
       st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_the_column_filter_keeps_every_posting_the_exact_test_keeps(ps, mx_, my_, wm, mx):
    x = [f32(p[0]) for p in ps]
    y = [f32(p[1]) for p in ps]
    w, rest, alpha, theta = ([f32(p[i]) for p in ps] for i in (2, 3, 4, 5))
    kept = run_kernels(x, y, w, rest, alpha, theta, mx_, my_, wm, mx)
    assert kept == sorted(kept)
    missing = set(exact_keeps(x, y, w, rest, alpha, theta, mx_, my_, wm, mx)) - set(kept)
    assert not missing, f"the column filter dropped postings the exact test keeps: {sorted(missing)}"
    assert not {i for i in kept if theta[i] == math.inf}, "a removed posting survived"


def tie_postings(alpha: float, n: int = 37):
    """Postings whose bound is exactly their threshold (rounded down to f32, as stored)."""
    rng = np.random.default_rng(int(alpha * 1000) + n)
    x = rng.uniform(-180, 180, n).astype(np.float32)
    y = rng.uniform(-90, 90, n).astype(np.float32)
    w = rng.uniform(0, 1, n).astype(np.float32).astype(float)
    rest = rng.uniform(0, 1, n).astype(np.float32).astype(float)
    w[::5] = 0.0  # zero weights
    rest[::3] = 0.0
    wm, mx = 0.75, 0.5
    d = np.hypot(x.astype(float) - 10.0, y.astype(float) - 20.0)
    tt = np.minimum(1.0, w * wm + rest * mx)
    bound = alpha * (1.0 - d / MAX_DIST) + (1.0 - alpha) * tt
    theta = np.array([float(np.nextafter(np.float32(b), np.float32(-np.inf))) if np.float32(b) > b else f32(b)
                      for b in bound])
    return x, y, w, rest, np.full(n, alpha), theta, 10.0, 20.0, wm, mx


@pytest.mark.parametrize("alpha", [0.0, 1.0, 0.5, 0.3333333333333333, 1e-9, 1.0 - 1e-9])
def test_ties_at_the_threshold_are_kept(alpha):
    args = tie_postings(alpha)
    kept = run_kernels(*args)
    want = exact_keeps(*args)
    assert len(want) == len(args[0]), "the construction should put every posting on its threshold"
    assert set(want) <= set(kept)


def test_codes_round_conservatively():
    c = blockindex.column_codes
    for theta in [0.0, -0.0, -1.0, 1e-12, 1.5e-5, 0.1, 1 / 3, 0.5, 0.999999, 1.0, 1.5]:
        code, dec = c(theta, 0.5, 0.5, 0.5)["theta"]
        assert dec <= theta + 1e-7 * abs(theta), (theta, dec)
        assert theta <= 0.0 or 1.0 < theta or theta - dec <= 2.0 / 65533, (theta, dec)
        if theta <= 0.0:
            assert code == 0 and dec == -math.inf
    assert c(math.inf, 0.5, 0.5, 0.5)["theta"] == (65535, math.inf)
    for w in [0.0, 1e-9, 0.1, 1 / 3, 0.999999, 1.0, f32(1.0 + 1e-7)]:
        code, dec = c(0.5, w, 0.5, 0.5)["w"]
        assert dec >= w * (1 - 1e-7) and dec - w <= 2.0 / 32767.5, (w, dec)
    for rest in [0.0, 1e-9, 0.7, 2.0, 15.99, 16.0, 17.0, 1e9]:
        code, dec = c(0.5, 0.5, rest, 0.5)["rest"]
        assert dec >= rest * (1 - 1e-7), (rest, dec)
    assert c(0.5, 0.5, 1e9, 0.5)["rest"] == (65535, math.inf)  # the kernels take the text part as 1
    for alpha in [0.0, 1e-9, 0.25, 0.5, 1 / 3, 0.999999, 1.0]:
        code, dec = c(0.5, 0.5, 0.5, alpha)["alpha"]
        assert abs(dec - alpha) <= 0.5 / 65535 + 1e-7, (alpha, dec)
    assert c(0.5, 0.5, 0.5, 0.0)["alpha"] == (0, 0.0) and c(0.5, 0.5, 0.5, 1.0)["alpha"] == (65535, 1.0)


def test_kernel_choice_and_its_errors():
    assert blockindex.scan_kernel_name() in KERNELS
    blockindex.set_scan_kernel("portable")
    assert blockindex.scan_kernel_name() == "portable"
    blockindex.set_scan_kernel("auto")
    assert blockindex.scan_kernel_name() == KERNELS[-1]
    with pytest.raises(InputError) as err:
        blockindex.set_scan_kernel("avx9")
    assert err.value.code == "E055"


@pytest.fixture(params=KERNELS)
def kernel(request):
    blockindex.set_scan_kernel(request.param)
    yield request.param
    blockindex.set_scan_kernel("auto")


@pytest.mark.parametrize("buffer", BUFFERS)
@pytest.mark.parametrize("workload", ["hot-term", "continuous"])
def test_engine_with_the_column_test_equals_the_reference(kernel, buffer, workload):
    """Each kernel, each buffer: the reference's answers (run_core checks them and the
    invariants, which compare the columns with the postings), the candidates of the plain scan,
    and the column test did prune where thresholds rise."""
    on = run_core(workload, "count", index="blocks", buffer=buffer, block_size=8, column_test=True)
    off = run_core(workload, "count", index="blocks", buffer=buffer, block_size=8)
    a, b = on.stats()["dissemination"], off.stats()["dissemination"]
    for key in ("candidates", "admitted", "entries_visited", "revisits_skipped"):
        assert a[key] == b[key], key
    assert a["column_kept"] <= a["entries_visited"]
    if buffer == "cskyband":  # thresholds above 0 (kmax's stay 0 on these small streams)
        assert a["column_kept"] < a["entries_visited"], "the column test never pruned"
    assert b["column_kept"] == 0


@pytest.mark.parametrize("columns", [False, True])
def test_the_scan_prefetch_changes_no_answer(columns):
    blockindex.set_scan_prefetch(True)
    try:
        on = run_core("hot-term", "time", index="blocks", buffer="cskyband", block_size=8, column_test=columns)
    finally:
        blockindex.set_scan_prefetch(False)
    off = run_core("hot-term", "time", index="blocks", buffer="cskyband", block_size=8, column_test=columns)
    assert on.stats()["dissemination"] == off.stats()["dissemination"]


def test_scan_only_finds_what_disseminate_scans_and_needs_the_columns():
    eng = run_core("hot-term", "count", index="blocks", buffer="cskyband", block_size=8, column_test=True)
    plain = run_core("hot-term", "count", index="blocks", buffer="cskyband", block_size=8)
    x = np.array([0.0, 10.0, -20.0])
    y = np.array([0.0, 5.0, 30.0])
    terms = np.array([0, 1, 2, 1, 3], np.uint32)
    weights = np.array([0.6, 0.8, 1.0, 0.6, 0.8])
    indptr = np.array([0, 2, 3, 5], np.int64)
    found = {c: eng._index.scan_only(indptr, terms, weights, x, y, c)[1] for c in (False, True)}
    assert found[False] == found[True]
    with pytest.raises(InputError) as err:
        plain._index.scan_only(indptr, terms, weights, x, y, True)
    assert err.value.code == "E056"


@pytest.mark.parametrize("window", ["count", "time"])
def test_micro_batches_with_the_column_test_equal_the_reference(kernel, window):
    """disseminate_batch scans term-major through the same band scan: the columns there too."""
    on = run_core("hot-term", window, index="blocks", buffer="cskyband", block_size=5, column_test=True, micro_batch=7)
    off = run_core("hot-term", window, index="blocks", buffer="cskyband", block_size=5, micro_batch=7)
    assert on.stats()["dissemination"]["candidates"] == off.stats()["dissemination"]["candidates"]
    assert 0 < on.stats()["dissemination"]["column_kept"] < on.stats()["dissemination"]["entries_visited"]
