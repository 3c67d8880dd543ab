"""The cone bound of a single-term posting and the prototype scans built on it (bench/scan_cone.py,
issue 35): every variant must find exactly the subscriptions a brute force finds (ST >= theta), on
random and adversarial inputs: alpha at 0 and 1, thresholds on the cone's edge (a tie: theta set to
the score itself), theta 0 (a complete buffer) and above 1, many-term subscriptions (the pair
index), co-located subscriptions and tiny leaves.  ConeModel.message asserts the equality itself."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

_spec = importlib.util.spec_from_file_location(
    "scan_cone", Path(__file__).resolve().parents[1] / "bench" / "scan_cone.py")
assert _spec is not None and _spec.loader is not None
scan_cone = importlib.util.module_from_spec(_spec)
sys.modules["scan_cone"] = scan_cone
_spec.loader.exec_module(scan_cone)

MAX_DIST = math.hypot(360.0, 180.0)
VOCAB = 12


def score(alpha, sx, sy, sterms, sw, mterms, mw, x, y) -> float:
    """ST(s, m) as the engine computes it (scoring.pxd score_pair), or -inf when nothing is shared."""
    tsim, shared = 0.0, False
    wm = dict(zip(mterms, mw))
    for t, w in zip(sterms, sw):
        if t in wm:
            tsim += w * wm[t]
            shared = True
    if not shared:
        return -math.inf
    dx, dy = x - sx, y - sy
    return alpha * (1.0 - math.sqrt(dx * dx + dy * dy) / MAX_DIST) + (1.0 - alpha) * tsim


def unit(rng, n):
    w = rng.random(n) + 0.05
    return w / np.linalg.norm(w)


def workload(seed: int, n_subs: int, max_terms: int, clustered: bool):
    rng = np.random.default_rng(seed)
    terms, weights, indptr = [], [], [0]
    for _ in range(n_subs):
        n = int(rng.integers(1, max_terms + 1))
        t = np.sort(rng.choice(VOCAB, n, replace=False))
        terms.append(t)
        weights.append(unit(rng, n))
        indptr.append(indptr[-1] + n)
    alpha = rng.choice([0.0, 1.0, 0.5, rng.random()], n_subs) * 1.0
    alpha = np.where(rng.random(n_subs) < 0.5, rng.random(n_subs), alpha)
    if clustered:   # many at one point: ties of location, boxes of zero size
        sx = np.round(rng.uniform(-2, 2, n_subs))
        sy = np.round(rng.uniform(-2, 2, n_subs))
    else:
        sx, sy = rng.uniform(-180, 180, n_subs), rng.uniform(-90, 90, n_subs)
    msgs = []
    for _ in range(6):
        n = int(rng.integers(1, 6))
        mt = np.sort(rng.choice(VOCAB, n, replace=False))
        msgs.append((mt, unit(rng, n), float(rng.choice(sx) if clustered else rng.uniform(-180, 180)),
                     float(rng.choice(sy) if clustered else rng.uniform(-90, 90))))
    return rng, np.array(indptr), np.concatenate(terms), np.concatenate(weights), sx, sy, alpha, msgs


def thresholds(rng, indptr, terms, weights, sx, sy, alpha, msg):
    """A mix of thresholds: on the edge for the first message (theta = the score: a tie), 0, above
    1, and random in the range scores take."""
    mt, mw, x, y = msg
    theta = rng.uniform(-0.2, 1.0, len(alpha))
    for s in range(len(alpha)):
        a, b = indptr[s], indptr[s + 1]
        sc = score(alpha[s], sx[s], sy[s], terms[a:b].tolist(), weights[a:b].tolist(), mt.tolist(), mw.tolist(), x, y)
        r = rng.random()
        if r < 0.4 and sc > -math.inf:
            theta[s] = sc
        elif r < 0.5:
            theta[s] = 0.0
        elif r < 0.55:
            theta[s] = 1.5
    return theta


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_subs=st.integers(1, 120), max_terms=st.sampled_from([1, 3, 6]),
       clustered=st.booleans(), leaf=st.sampled_from([1, 2, 8]), block=st.sampled_from([1, 4, 16]))
def test_every_variant_finds_exactly_the_qualifying_subscriptions(seed, n_subs, max_terms, clustered, leaf, block):
    rng, indptr, terms, weights, sx, sy, alpha, msgs = workload(seed, n_subs, max_terms, clustered)
    theta = thresholds(rng, indptr, terms, weights, sx, sy, alpha, msgs[0])
    model = scan_cone.ConeModel(indptr, terms, weights, sx, sy, alpha, theta, MAX_DIST, leaf=leaf, block=block)
    for mt, mw, x, y in msgs:
        r = model.message(mt, mw, x, y)            # asserts C and A against the brute force
        truth = {s for s in range(n_subs)
                 if score(alpha[s], sx[s], sy[s], terms[indptr[s]:indptr[s + 1]].tolist(),
                          weights[indptr[s]:indptr[s + 1]].tolist(), mt.tolist(), mw.tolist(), x, y) >= theta[s]}
        assert r["qualify"] == len(truth)
        assert r["C_postings"] <= r["all"]


@settings(max_examples=500, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 12))
def test_a_rejected_node_holds_no_qualifying_single_term_posting(seed, n):
    """node_may_hold() is False only if no member qualifies: members drawn around a message, with
    thresholds on and near the edge."""
    rng = np.random.default_rng(seed)
    x, y, wm = rng.uniform(-180, 180), rng.uniform(-90, 90), float(rng.uniform(0.01, 1.0))
    px = x + rng.normal(0, 30, n)
    py = y + rng.normal(0, 15, n)
    alpha = rng.choice([0.0, 1e-9, 0.3, 0.9, 1 - 1e-9], n) * np.where(rng.random(n) < 0.5, 1.0, rng.random(n))
    w = rng.uniform(0.01, 1.0, n)
    exact = alpha * (1.0 - np.hypot(px - x, py - y) / MAX_DIST) + (1.0 - alpha) * w * wm
    theta = exact + rng.choice([0.0, 0.0, -1e-12, 1e-12, 0.01, -0.01], n)
    rho, lam = scan_cone.cone_params(alpha, w, theta)
    held = scan_cone.node_may_hold(px.min(), py.min(), px.max(), py.max(), rho.min(), lam.max(), x, y, wm, MAX_DIST)
    if not held:
        assert not (exact >= theta).any()
    for i in range(n):       # one member alone: the rule is the cone itself, so it keeps every qualifier
        if exact[i] >= theta[i]:
            assert scan_cone.node_may_hold(px[i], py[i], px[i], py[i], rho[i], lam[i], x, y, wm, MAX_DIST)


def test_the_cone_prunes():
    """Not vacuous: far, high-alpha, high-threshold postings are skipped unread."""
    rng = np.random.default_rng(1)
    n = 4000
    indptr = np.arange(n + 1)
    terms = np.zeros(n, np.int64)
    weights = np.full(n, 1.0)
    sx, sy = rng.uniform(-180, 180, n), rng.uniform(-90, 90, n)
    alpha = rng.uniform(0.6, 0.95, n)
    theta = np.full(n, 0.97)
    model = scan_cone.ConeModel(indptr, terms, weights, sx, sy, alpha, theta, MAX_DIST, leaf=8)
    r = model.message(np.array([0]), np.array([0.2]), 0.0, 0.0)
    assert r["C_postings"] < r["all"] / 10


def _engine_state(workload: str, buffer: str, many_terms: bool):
    """An engine after a stretch of messages (thresholds set by the buffer kind), and the rest."""
    import adversarial
    from test_engine import BOUNDS, WORKLOADS

    from skype.engine import Engine
    from skype.model import SubscriptionBatch

    vocab, subs, msgs = adversarial.dense_workload(**WORKLOADS[workload])
    if many_terms:   # up to 6 terms: the flat lists' path, and pairs among many
        rng = np.random.default_rng(5)
        subs = SubscriptionBatch(subs.ids, subs.x, subs.y, subs.k, subs.alpha,
                                 adversarial._terms(rng, len(subs.ids), 20, 6, 1.0, None))
    eng = Engine(bounds=BOUNDS, vocabulary=vocab, window=60, buffer=buffer, kmax=4)
    eng.subscribe_batch(subs)
    return eng, msgs


def _arrays(m):
    return (np.ascontiguousarray(m.terms.indptr, np.int64), np.ascontiguousarray(m.terms.ids, np.uint32),
            np.ascontiguousarray(m.terms.weights, np.float64), np.ascontiguousarray(m.x), np.ascontiguousarray(m.y))


@pytest.mark.parametrize("buffer", ["cskyband", "kmax", "exact"])
@pytest.mark.parametrize("workload,many_terms", [("grid", False), ("crowded", False), ("hot-term", False),
                                                 ("continuous", False), ("continuous", True)])
def test_cone_trees_verify_exactly_the_block_index_candidates(workload, many_terms, buffer):
    """skype._core.coneindex (built statically from the table) against the block index on the same engine state, rebuilt as the
    thresholds move: the same candidates (both verify exactly), message by message."""
    from skype._core.coneindex import ConeIndex

    eng, msgs = _engine_state(workload, buffer, many_terms)
    total = 0
    for start in range(0, 500, 100):
        eng.publish_batch(msgs.slice(start, start + 100))
        for leaf in (1, 8):
            cone = ConeIndex(eng._table, eng.bounds.max_dist, leaf=leaf)
            cone.build_from_table()
            part = _arrays(msgs.slice(start + 100, start + 140))
            _, want = eng._index.disseminate_only(*part)
            _, got = cone.disseminate_only(*part)
            assert got == want
            total += len(want)
    assert total > 0


@pytest.mark.parametrize("buffer", ["cskyband", "exact"])
@pytest.mark.parametrize("workload", ["grid", "continuous"])
def test_cone_trees_keep_ties_on_the_edge(workload, buffer):
    """Messages equal to those in the window can score exactly a subscription's threshold (the
    k-th score of an exact buffer is such a score): ST = theta on the cone's edge, through the f32
    copies and their slack, must still be found."""
    from skype._core.coneindex import ConeIndex

    eng, msgs = _engine_state(workload, buffer, False)
    eng.publish_batch(msgs.slice(0, 300))
    cone = ConeIndex(eng._table, eng.bounds.max_dist, leaf=4)
    cone.build_from_table()
    part = _arrays(msgs.slice(240, 300))          # the window's own messages again
    _, want = eng._index.disseminate_only(*part)
    _, got = cone.disseminate_only(*part)
    assert got == want and len(want) > 0
