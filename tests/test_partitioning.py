"""The distribution layer (skype.partitioning): routing correctness by brute force, lazy reallocation,
per-method balance, determinism and edge cases.

The oracle of "can score at or above the threshold" is a dense brute-force score matrix of every
(subscription, message) pair, computed by the core's scoring kernel (bit-identical to
``skype.reference.score``, see test_scoring.py), or by ``skype.reference.score`` itself when the
kernel is not importable.  Meeting is checked with dense partition matrices, independently of
the Routing helpers.
"""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import given, strategies as st

from conftest import brute_force_topk
from skype import InputError
from skype.data import make_workload
from skype.partitioning import (
    EPS, METHODS, Routing, build_distribution, estimate_thresholds, kscore_thresholds,
    loose_prefix_lengths, suffix_sums,
)
from skype.partitioning.thresholds import resolve_engine, warmup_window
from skype.model import DEFAULT_BOUNDS, MessageBatch, SubscriptionBatch, TermMatrix
from skype.reference import score

MAX_DIST = DEFAULT_BOUNDS.max_dist
HYBRIDS = ("spatial-first", "keyword-first")
THRESHOLDED = ("prefix",) + HYBRIDS


# --------------------------------------------------------------------------- oracles


def score_matrix(subs: SubscriptionBatch, msgs: MessageBatch) -> np.ndarray:
    """ST of every (subscription, message) pair; -inf where they share no term."""
    ps, pm = np.meshgrid(np.arange(len(subs)), np.arange(len(msgs)), indexing="ij")
    ps, pm = ps.ravel().astype(np.int64), pm.ravel().astype(np.int64)
    try:
        from skype._core import scoring

        st_, mt = subs.terms, msgs.terms
        flat = scoring.score_pairs(
            subs.alpha, subs.x, subs.y, st_.indptr, st_.ids.astype(np.uint32), st_.weights,
            msgs.x, msgs.y, mt.indptr, mt.ids.astype(np.uint32), mt.weights, ps, pm, MAX_DIST)
    except ImportError:  # the core is being rebuilt: the reference's scalar score
        s_rows = [list(zip(*map(np.ndarray.tolist, subs.terms.row(i)))) for i in range(len(subs))]
        m_rows = [dict(zip(*map(np.ndarray.tolist, msgs.terms.row(j)))) for j in range(len(msgs))]
        flat = np.array([
            -math.inf if (v := score(s_rows[i], subs.alpha[i], subs.x[i], subs.y[i], m_rows[j], msgs.x[j],
                                     msgs.y[j], MAX_DIST)) is None else v for i, j in zip(ps, pm)])
    return flat.reshape(len(subs), len(msgs))


def dense(routing: Routing, num_partitions: int) -> np.ndarray:
    out = np.zeros((routing.rows, num_partitions), dtype=bool)
    rows, parts = routing.pairs()
    out[rows, parts] = True
    return out


def assert_meet(sub_routing: Routing, msg_routing: Routing, scores: np.ndarray, thresholds, num_partitions: int,
                context: str = "") -> int:
    """Every pair with score >= theta shares a partition; returns how many pairs were checked."""
    theta = np.zeros(scores.shape[0]) if thresholds is None else np.asarray(thresholds)
    need = scores >= theta[:, None]
    meet = (dense(sub_routing, num_partitions).astype(np.int32) @ dense(msg_routing, num_partitions).T.astype(np.int32)) > 0
    missed = np.argwhere(need & ~meet)
    assert len(missed) == 0, f"{context}: {len(missed)} pairs above threshold never meet, e.g. (sub row, msg row) {missed[:5].tolist()}"
    return int(need.sum())


def check_routing_shape(r: Routing, rows: int, num_partitions: int) -> None:
    assert r.rows == rows and r.indptr[0] == 0 and (np.diff(r.indptr) >= 0).all()
    assert r.partitions.dtype == np.int32
    if len(r.partitions):
        assert r.partitions.min() >= 0 and r.partitions.max() < num_partitions
    for i in range(rows):
        row = r.row(i)
        assert (np.diff(row) > 0).all(), "partitions of a row must be strictly ascending"


# --------------------------------------------------------------------------- fixtures


class Case:
    """A workload split into build sample (its tail is the warm-up window) and a later stream."""

    def __init__(self, dataset: str, seed: int) -> None:
        w = make_workload(dataset, num_subs=250, num_messages=1600, seed=seed, k=5)
        self.w = w
        self.subs = w.subscriptions
        self.sample = w.messages.slice(0, 900)
        self.window = warmup_window(self.sample, 400)
        self.stream = w.messages.slice(900, 1600)
        self.theta = estimate_thresholds(self.subs, self.sample, w.vocabulary, 400, engine="reference")
        self.probe = MessageBatch.concat([self.window, self.stream])  # messages the pair test covers
        self.scores = score_matrix(self.subs, self.probe)

    def build(self, method: str, num_partitions: int, thresholds="engine", **params):
        theta = self.theta if isinstance(thresholds, str) else thresholds
        return build_distribution(method, num_partitions, self.subs, self.sample, self.w.vocabulary, theta, **params)


@pytest.fixture(scope="module", params=[("tweets", 3), ("geonames", 5)], ids=["tweets", "geonames"])
def case(request):
    return Case(*request.param)


@pytest.fixture(scope="module")
def tweets_case():
    return Case("tweets", 3)


@pytest.fixture(scope="module")
def tweets_topk(tweets_case):
    return brute_force_topk(tweets_case.subs, tweets_case.window, MAX_DIST)


def test_dist_case_thresholds_are_realistic(case):
    assert (case.theta > 0).mean() > 0.2  # a warm window: many subscriptions have k results
    assert (case.scores >= case.theta[:, None]).sum() > 100


# --------------------------------------------------------------------------- routing correctness


@pytest.mark.parametrize("num_partitions", [5, 16])
@pytest.mark.parametrize("method", METHODS)
def test_dist_pairs_above_threshold_meet(case, method, num_partitions):
    dist = case.build(method, num_partitions)
    subs = dist.route_subscriptions(case.subs, case.theta)
    msgs = dist.route_messages(case.probe)
    check_routing_shape(subs, len(case.subs), num_partitions)
    check_routing_shape(msgs, len(case.probe), num_partitions)
    assert (subs.counts() >= 1).all(), "every subscription has a home partition"
    assert assert_meet(subs, msgs, case.scores, case.theta, num_partitions, method) > 0


@pytest.mark.parametrize("method", METHODS)
def test_dist_pairs_meet_under_random_high_thresholds(case, method):
    """Real thresholds on these workloads rarely shorten a loose prefix (message weights are far
    below 1); random thresholds up to 1 prune hard and stress Lemma 7 and the summaries."""
    rng = np.random.default_rng(7)
    theta = rng.uniform(0.0, 1.0, len(case.subs)) * (rng.random(len(case.subs)) < 0.8)
    dist = case.build(method, 8, theta)
    subs = dist.route_subscriptions(case.subs, theta)
    msgs = dist.route_messages(case.probe)
    assert_meet(subs, msgs, case.scores, theta, 8, method)
    if method in THRESHOLDED:  # pruning really happened
        full = loose_prefix_lengths(case.subs.terms, case.subs.alpha, None)
        assert (loose_prefix_lengths(case.subs.terms, case.subs.alpha, theta) < full).any()


@pytest.mark.parametrize("method", METHODS)
def test_dist_replicas_together_see_the_whole_topk(tweets_case, tweets_topk, method):
    """Thresholds = kScore over the window; every message of the exact top-k (brute force over the
    window) reaches at least one replica, so merging the replicas' top-k lists is exact."""
    c = tweets_case
    theta = kscore_thresholds(c.subs, c.window, MAX_DIST)
    dist = c.build(method, 12, theta)
    subs = dense(dist.route_subscriptions(c.subs, theta), 12)
    msgs = dense(dist.route_messages(c.window), 12)
    row_of_msg = {int(m): j for j, m in enumerate(c.window.ids)}
    checked = 0
    for i, sid in enumerate(c.subs.ids):
        seen = np.flatnonzero((msgs & subs[i]).any(axis=1))  # window rows reaching some replica
        for mid, _ in tweets_topk[int(sid)]:
            assert row_of_msg[mid] in set(seen.tolist()), f"{method}: sub {sid} misses top-k message {mid}"
            checked += 1
    assert checked > 500


# --------------------------------------------------------------------------- property test

_coords_x = st.one_of(st.sampled_from([-10.0, 0.0, 25.5]), st.floats(-180, 180))
_coords_y = st.one_of(st.sampled_from([-5.0, 0.0, 40.0]), st.floats(-90, 90))


def _vectors(max_term: int):
    return st.dictionaries(st.integers(0, max_term), st.floats(0.05, 1.0), min_size=1, max_size=4)


def _matrix(vectors: list[dict]) -> TermMatrix:
    rows = []
    for v in vectors:
        ids = np.array(sorted(v), dtype=np.int64)
        w = np.array([v[t] for t in ids])
        rows.append((ids, w / math.sqrt(float(w @ w))))
    return TermMatrix.from_rows(rows)


@st.composite
def random_workloads(draw):
    vocab = draw(st.integers(1, 8))  # build-time term ids 0..vocab-1; later ones are unseen
    n_build, n_late, n_msgs = draw(st.integers(1, 10)), draw(st.integers(0, 4)), draw(st.integers(1, 14))
    alphas = st.one_of(st.just(0.0), st.just(1.0), st.floats(0.0, 1.0))
    thetas = st.one_of(st.just(0.0), st.floats(0.0, 1.05))

    def subs(n, max_term, first_id):
        vecs = [draw(_vectors(max_term)) for _ in range(n)]
        return SubscriptionBatch(np.arange(first_id, first_id + n), [draw(_coords_x) for _ in range(n)],
                                 [draw(_coords_y) for _ in range(n)], np.ones(n, np.int64),
                                 [draw(alphas) for _ in range(n)], _matrix(vecs))

    build_subs = subs(n_build, vocab - 1, 0)
    late_subs = subs(n_late, vocab + 2, 100)
    vecs = [draw(_vectors(vocab + 2)) for _ in range(n_msgs)]
    msgs = MessageBatch(np.arange(n_msgs), [draw(_coords_x) for _ in range(n_msgs)],
                        [draw(_coords_y) for _ in range(n_msgs)], np.arange(n_msgs, dtype=float), _matrix(vecs))
    known = np.array([max(v) < vocab for v in vecs])
    theta_build = np.array([draw(thetas) for _ in range(n_build)])
    theta_late = np.array([draw(thetas) for _ in range(n_late)])
    return vocab, build_subs, late_subs, msgs, msgs.take(np.flatnonzero(known)), theta_build, theta_late


@given(data=random_workloads(), method=st.sampled_from(METHODS), num_partitions=st.integers(1, 9))
def test_dist_property_pairs_meet_on_random_workloads(data, method, num_partitions):
    _, build_subs, late_subs, msgs, sample, theta_b, theta_l = data
    dist = build_distribution(method, num_partitions, build_subs, sample, None, theta_b)
    r_build = dist.route_subscriptions(build_subs, theta_b)
    r_late = dist.route_subscriptions(late_subs, theta_l)  # registered at runtime, unseen terms
    r_msgs = dist.route_messages(msgs)
    check_routing_shape(r_msgs, len(msgs), num_partitions)
    for subs, routing, theta in ((build_subs, r_build, theta_b), (late_subs, r_late, theta_l)):
        if len(subs):
            check_routing_shape(routing, len(subs), num_partitions)
            assert (routing.counts() >= 1).all()
            assert_meet(routing, r_msgs, score_matrix(subs, msgs), theta, num_partitions, method)
    # determinism: a fresh build from the same inputs routes the same way
    again = build_distribution(method, num_partitions, build_subs, sample, None, theta_b)
    again.route_subscriptions(late_subs, theta_l)
    assert np.array_equal(again.route_messages(msgs).partitions, r_msgs.partitions)


# --------------------------------------------------------------------------- lazy reallocation


@pytest.mark.parametrize("method", THRESHOLDED)
def test_dist_lazy_reallocation_adds_exactly_the_new_partitions(tweets_case, method):
    c = tweets_case
    rng = np.random.default_rng(11)
    high = rng.uniform(0.5, 1.0, len(c.subs))
    low = high * rng.uniform(0.0, 1.0, len(c.subs))
    dist = c.build(method, 8, high)
    before = dist.route_subscriptions(c.subs, high)
    old_msgs = dist.route_messages(c.probe)  # routed while the summaries were small
    fresh = pickle.loads(pickle.dumps(dist))  # the same tables, routed afresh at the low thresholds
    grown = dist.update_thresholds(c.subs.ids, low)
    new_terms = dist.pop_new_live_terms()
    check_routing_shape(grown, len(c.subs), 8)
    assert grown.counts().sum() > 0
    assert not (dense(grown, 8) & dense(before, 8)).any(), "only NEW partitions are returned"
    after = before.union(grown)
    assert np.array_equal(dense(after, 8), dense(fresh.route_subscriptions(c.subs, low), 8))
    # messages routed after the update meet every pair above the lower thresholds
    assert_meet(after, dist.route_messages(c.probe), c.scores, low, 8, method)
    # messages routed before it, plus the re-routed ones holding a newly live term, do too
    has_new = np.isin(c.probe.terms.ids, new_terms)
    rows_new = np.unique(np.repeat(np.arange(len(c.probe)), c.probe.terms.lengths())[has_new])
    rerouted = dist.route_messages(c.probe.take(rows_new))
    r_rows, r_parts = rerouted.pairs()
    backfilled = old_msgs.union(Routing.from_pairs(rows_new[r_rows], r_parts, len(c.probe)))
    assert_meet(after, backfilled, c.scores, low, 8, method + " with backfill")
    # a threshold rising again moves nothing (lazy)
    assert dist.update_thresholds(c.subs.ids, high).counts().sum() == 0
    # no thresholds (None) means no pruning: the same as every threshold falling to 0
    zero = pickle.loads(pickle.dumps(dist)).update_thresholds(c.subs.ids, np.zeros(len(c.subs)))
    assert np.array_equal(dense(dist.update_thresholds(c.subs.ids, None), 8), dense(zero, 8))
    assert zero.counts().sum() > 0


def test_dist_update_thresholds_edge_cases(tweets_case):
    c = tweets_case
    for method in METHODS:
        dist = c.build(method, 4)
        r = dist.update_thresholds(np.array([10**9, 10**9 + 1]), np.array([0.0, 0.0]))
        assert r.rows == 2 and r.counts().sum() == 0, "unknown ids get empty rows"
        assert dist.update_thresholds(np.zeros(0, np.int64), np.zeros(0)).rows == 0
    prefix = c.build("prefix", 4)
    with pytest.raises(InputError) as err:
        prefix.update_thresholds(c.subs.ids[:3], np.zeros(2))
    assert err.value.code == "E026"
    with pytest.raises(InputError) as err:
        prefix.update_thresholds(np.array([1, 1]), np.zeros(2))
    assert err.value.code == "E007"


def test_dist_removed_subscriptions_leave_the_summary():
    subs = SubscriptionBatch([1, 2], [0, 0], [0, 0], [1, 1], [0.5, 0.5], _matrix([{0: 1.0}, {1: 1.0, 2: 1.0}]))
    msgs = MessageBatch([0, 1], [0, 0], [0, 0], [0, 1], _matrix([{0: 1.0}, {2: 1.0}]))
    dist = build_distribution("prefix", 3, subs, msgs, None)
    assert dist.route_messages(msgs).counts().tolist() == [1, 1]
    dist.remove_subscriptions(np.array([2]))
    assert dist.route_messages(msgs).counts().tolist() == [1, 0]
    dist.route_subscriptions(subs.take(np.array([1])))  # back again
    assert dist.route_messages(msgs).counts().tolist() == [1, 1]
    assert dist.pop_new_live_terms().tolist() == [1, 2]
    assert dist.pop_new_live_terms().tolist() == []
    dist.route_subscriptions(subs)  # routing registered ids again replaces them: nothing new
    assert dist.pop_new_live_terms().tolist() == []
    with pytest.raises(InputError) as err:
        dist.route_subscriptions(subs.take(np.array([0, 0])))
    assert err.value.code == "E007"


# --------------------------------------------------------------------------- loose prefix


def test_dist_loose_prefix_is_def_12_with_its_edge_cases():
    tm = _matrix([{0: 0.8, 3: 0.5, 7: 0.3}] * 6)
    wt = suffix_sums(tm)[:3]
    alpha = np.array([0.0, 0.4, 0.4, 1.0, 0.2, 0.3])
    theta = np.array([0.0, 0.4 + 0.6 * wt[1], 0.99, 0.95, 5.0, 0.3])
    got = loose_prefix_lengths(tm, alpha, theta).tolist()
    # Def. 12 for alpha < 1: wtsum(s, i) >= (theta - alpha) / (1 - alpha)
    for row in (0, 1, 2, 4, 5):
        t_lp = (theta[row] - alpha[row]) / (1 - alpha[row])
        assert got[row] == max(1, int((wt >= t_lp - EPS).sum())), row
    assert got[0] == 3  # theta 0: all terms
    assert got[1] == 2  # exactly at wtsum(s, 2): kept (>=)
    assert got[3] == 3  # alpha 1: every term can reach SSim = 1
    assert got[4] == 1  # nothing can reach theta: the first term stays as the home replica
    assert got[5] == 3  # theta_T^lp <= 0
    assert loose_prefix_lengths(tm, alpha, None).tolist() == [3] * 6


def test_dist_loose_prefix_never_drops_a_qualifying_term(tweets_case):
    """Lemma 7 directly: the first common term of every pair above threshold is in the prefix."""
    c = tweets_case
    rng = np.random.default_rng(3)
    theta = rng.uniform(0.0, 1.0, len(c.subs))
    lp = loose_prefix_lengths(c.subs.terms, c.subs.alpha, theta)
    for i, j in np.argwhere(c.scores >= theta[:, None]):
        s_ids = c.subs.terms.row(i)[0]
        first = np.flatnonzero(np.isin(s_ids, c.probe.terms.row(j)[0]))[0]
        assert first < lp[i]


# --------------------------------------------------------------------------- determinism


@pytest.mark.parametrize("method", METHODS)
def test_dist_routing_is_a_pure_deterministic_function_of_the_record(tweets_case, method):
    c = tweets_case
    a, b = c.build(method, 7), c.build(method, 7)
    perm = np.random.default_rng(0).permutation(len(c.subs))
    ra = a.route_subscriptions(c.subs, c.theta)
    rp = b.route_subscriptions(c.subs.take(perm), c.theta[perm])
    assert all(np.array_equal(ra.row(int(perm[i])), rp.row(i)) for i in range(len(perm)))
    ma = a.route_messages(c.probe)
    one = b.route_messages(c.probe.slice(17, 18))
    assert np.array_equal(one.row(0), ma.row(17))
    clone = pickle.loads(pickle.dumps(a))
    assert np.array_equal(clone.route_messages(c.probe).partitions, ma.partitions)
    assert np.array_equal(clone.route_subscriptions(c.subs, c.theta).partitions, ra.partitions)
    assert (clone.name, clone.num_partitions) == (method, 7)


# --------------------------------------------------------------------------- edge cases


def _batch_subs(vectors, x=None, y=None, alpha=0.5, first_id=0):
    n = len(vectors)
    return SubscriptionBatch(np.arange(first_id, first_id + n), np.zeros(n) if x is None else x,
                             np.zeros(n) if y is None else y, np.full(n, 3), np.full(n, alpha), _matrix(vectors))


def _batch_msgs(vectors, x=None, y=None):
    n = len(vectors)
    return MessageBatch(np.arange(n), np.zeros(n) if x is None else x, np.zeros(n) if y is None else y,
                        np.arange(n, dtype=float), _matrix(vectors))


@pytest.mark.parametrize("method", METHODS)
def test_dist_single_hot_term(method):
    """Term 0 is in every subscription and every message: it cannot be split, but routing stays
    correct and every other term is spread over the remaining partitions."""
    rng = np.random.default_rng(5)
    subs = _batch_subs([{0: 1.0, int(t): 0.5} for t in rng.integers(1, 60, 300)],
                       rng.uniform(-50, 50, 300), rng.uniform(-50, 50, 300))
    msgs = _batch_msgs([{0: 1.0, **{int(t): 0.4 for t in rng.integers(1, 60, 3)}} for _ in range(200)],
                       rng.uniform(-50, 50, 200), rng.uniform(-50, 50, 200))
    dist = build_distribution(method, 8, subs, msgs, None)
    r_subs, r_msgs = dist.route_subscriptions(subs), dist.route_messages(msgs)
    assert_meet(r_subs, r_msgs, score_matrix(subs, msgs), None, 8, method)
    if method in ("keyword", "prefix"):
        hot = dist.term_partitions(np.array([0]))[0]
        assert (dense(r_msgs, 8)[:, hot]).all() and (dense(r_subs, 8)[:, hot]).all()


@pytest.mark.parametrize("method", ["location", "spatial-first", "keyword-first"])
def test_dist_all_subscriptions_at_one_point(method):
    rng = np.random.default_rng(2)
    subs = _batch_subs([{int(t): 1.0} for t in rng.integers(0, 20, 800)], np.full(800, 2.35), np.full(800, 48.86))
    msgs = _batch_msgs([{int(t): 1.0} for t in rng.integers(0, 20, 300)], np.full(300, 2.35), np.full(300, 48.86))
    dist = build_distribution(method, 8, subs, msgs, None)
    r = dist.route_subscriptions(subs)
    if method == "location":
        assert (r.counts() == 1).all()
        sizes = r.partition_sizes(8)
        assert sizes.min() > 0 and sizes.max() / sizes.mean() < 1.3, sizes  # spread by the id hash
    assert_meet(r, dist.route_messages(msgs), score_matrix(subs, msgs), None, 8, method)


@pytest.mark.parametrize("method", METHODS)
def test_dist_more_partitions_than_terms(method):
    subs = _batch_subs([{0: 1.0}, {1: 1.0, 2: 0.5}, {2: 1.0}, {0: 0.3, 2: 1.0}] * 5, np.arange(20.0), np.zeros(20))
    msgs = _batch_msgs([{0: 1.0}, {1: 1.0}, {2: 1.0, 0: 1.0}, {3: 1.0}, {9: 1.0}])  # 3 and 9 unseen
    sample = msgs.take(np.array([0, 1, 2]))
    dist = build_distribution(method, 16, subs, sample, None)
    r_subs, r_msgs = dist.route_subscriptions(subs), dist.route_messages(msgs)
    check_routing_shape(r_msgs, 5, 16)
    assert_meet(r_subs, r_msgs, score_matrix(subs, msgs), None, 16, method)
    if method in ("keyword", "prefix"):
        # 3 build-time terms, 16 ranges: at least 13 are empty (the balanced cut may put two cheap
        # terms in one range when that does not raise the largest one)
        assert dist.describe()["empty_ranges"] >= 13
        # unseen term t >= V0 = 3 belongs to partition (t - V0) mod P
        assert dist.term_partitions(np.array([3, 9, 3 + 16])).tolist() == [0, 6, 0]
        # keyword sends them to their partitions; prefix's summaries drop them: nobody holds 3 or 9
        assert r_msgs.counts()[3:].tolist() == ([0, 0] if method == "prefix" else [1, 1])
        late = _batch_subs([{9: 1.0}], first_id=99)  # a runtime subscription on an unseen term
        assert dist.route_subscriptions(late).row(0).tolist() == [6]
        assert dist.route_messages(msgs).row(4).tolist() == [6]


@pytest.mark.parametrize("method", METHODS)
def test_dist_one_partition_and_empty_batches(tweets_case, method):
    c = tweets_case
    dist = c.build(method, 1)
    assert set(dist.route_subscriptions(c.subs, c.theta).partitions.tolist()) == {0}
    r = dist.route_messages(c.probe)
    assert set(r.partitions.tolist()) <= {0}
    assert dist.route_messages(c.probe.slice(0, 0)).rows == 0
    assert dist.route_subscriptions(c.subs.take(np.zeros(0, np.int64)), np.zeros(0)).rows == 0


def test_dist_builds_without_a_sample(tweets_case):
    for method in METHODS:
        dist = build_distribution(method, 6, tweets_case.subs, None, None)
        r = dist.route_subscriptions(tweets_case.subs)
        assert (r.counts() >= 1).all()


# --------------------------------------------------------------------------- API and errors


def test_dist_rejects_bad_arguments(tweets_case):
    c = tweets_case
    cases = [
        (dict(method="nope"), "E022"),
        (dict(num_partitions=0), "E023"),
        (dict(num_partitions=2.5), "E023"),
        (dict(thresholds=np.zeros(3)), "E026"),
        (dict(thresholds=np.full(len(c.subs), np.nan)), "E023"),
        (dict(method="spatial-first", num_partitions=12, n1=5), "E023"),
        (dict(method="hashing", n1=2), "E023"),
    ]
    for kwargs, code in cases:
        args = dict(method="prefix", num_partitions=4, thresholds=None) | kwargs
        method, parts, theta = args.pop("method"), args.pop("num_partitions"), args.pop("thresholds")
        with pytest.raises(InputError) as err:
            build_distribution(method, parts, c.subs, c.sample, c.w.vocabulary, theta, **args)
        assert err.value.code == code, kwargs


def test_dist_hybrids_take_n1(tweets_case):
    d = tweets_case.build("keyword-first", 12, n1=3)
    assert (d.n1, d.n2, d.num_partitions) == (3, 4, 12)
    d = tweets_case.build("spatial-first", 7)
    assert (d.n1, d.n2) == (1, 7)


def test_dist_routing_helpers():
    r = Routing.from_pairs(np.array([2, 0, 0, 2, 2]), np.array([1, 4, 4, 0, 3]), 4)
    assert r.indptr.tolist() == [0, 1, 1, 4, 4] and r.partitions.tolist() == [4, 0, 1, 3]
    t = r.by_partition(5)
    assert [t.row(p).tolist() for p in range(5)] == [[2], [2], [], [2], [0]]
    u = r.union(Routing.one_each(np.array([4, 2, 1, 0])))
    assert [u.row(i).tolist() for i in range(4)] == [[4], [2], [0, 1, 3], [0]]
    other = Routing.from_pairs(np.array([0, 1]), np.array([3, 4]), 2)
    got = r.meets(other, np.array([0, 0, 2, 2, 3, 1]), np.array([0, 1, 0, 1, 1, 1]))
    want = (dense(r, 5)[[0, 0, 2, 2, 3, 1]] & dense(other, 5)[[0, 1, 0, 1, 1, 1]]).any(axis=1)
    assert got.tolist() == want.tolist()
    assert Routing.broadcast(2, 3).partitions.tolist() == [0, 1, 2, 0, 1, 2]


# --------------------------------------------------------------------------- thresholds


def test_dist_kscore_thresholds_equal_the_reference_engine(case):
    got = kscore_thresholds(case.subs, case.window, MAX_DIST, max_pairs=2000)  # many chunks
    assert np.array_equal(got, case.theta)  # bit for bit
    assert np.array_equal(estimate_thresholds(case.subs, case.sample, None, 400, engine="kscore"), case.theta)


def test_dist_estimate_thresholds_engines(tweets_case):
    c = tweets_case
    assert resolve_engine("auto") in ("core", "reference")
    assert not estimate_thresholds(c.subs, c.sample, None, 100, engine="none").any()
    with pytest.raises(InputError):
        estimate_thresholds(c.subs, c.sample, None, 100, engine="magic")
