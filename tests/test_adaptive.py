"""Adaptive partitioning: the unit methods (agrid, kdt, qt, aqwa) under moves, their rebalancing
policies, the drift workloads and partition-sim over time.

The routing-correctness tests every method must pass live in test_partitioning.py (they are
parametrized over ``METHODS``, which includes the adaptive methods).  Here: the cases only the
adaptive methods have (a unit moves; a policy's plan is applied; adversarial layouts of cells),
with the same brute-force oracle of "can score at or above the threshold".
"""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from skype import InputError
from skype.data import make_workload
from skype.data.drift import DRIFT_KINDS, with_term, drift_steps, make_drift
from skype.model import MessageBatch
from skype.partitioning import ADAPTIVE_METHODS, build_distribution, estimate_thresholds
from skype.partitioning.measure import load_imbalance, partition_loads
from skype.partitioning.rebalance import COMPATIBLE, POLICIES, apply_plan, decide, snapshot, tornado
from skype.partitioning.rebalance.base import LoadModel
from skype.partitioning.restructure import CUTTABLE, cut_options, cut_unit
from skype.partitioning.registry import concat_subscriptions
from skype.partitioning.timeline import run_timeline
from test_partitioning import _batch_msgs, _batch_subs, assert_meet, dense, score_matrix

GRID = (32, 16)  # cells of 11.25 degrees: small tables, several cells per hot spot
PAIRS = [(m, p) for p in POLICIES if p != "never" for m in COMPATIBLE[p]]
NO_BUDGET = {"ps2stream": {"max_fraction": 1.0}, "sstd": {"max_fraction": 1.0}}  # a constructed skew, not a run


class Skew:
    """A workload, then a burst of subscriptions packed around one place: a constructed hot spot."""

    def __init__(self) -> None:
        w = make_workload("tweets", num_subs=400, num_messages=1500, seed=7, k=5)
        self.w = w
        self.sample, self.stream = w.messages.slice(0, 800), w.messages.slice(800, 1500)
        self.theta = estimate_thresholds(w.subscriptions, self.sample, w.vocabulary, 300, engine="reference")
        rng = np.random.default_rng(1)
        burst = w.subscriptions.take(rng.integers(0, len(w.subscriptions), 600))
        burst.ids = np.arange(10_000, 10_600, dtype=np.int64)
        burst.x = np.clip(2.3 + rng.normal(0, 12, 600), -180, 180)
        burst.y = np.clip(48.8 + rng.normal(0, 8, 600), -90, 90)
        # one of four rare terms first: a textual hot spot too (QT-tree leaves split by text)
        burst.terms = with_term(burst.terms, np.arange(600), rng.integers(0, 4, 600), 1.0)
        self.burst = burst
        self.all_subs = concat_subscriptions([w.subscriptions, burst])
        self.all_theta = np.r_[self.theta, np.zeros(600)]
        self.scores = score_matrix(self.all_subs, self.stream)

    def build(self, method: str, num_partitions: int = 8):
        dist = build_distribution(method, num_partitions, self.w.subscriptions, self.sample, self.w.vocabulary,
                                  self.theta, grid=GRID)
        dist.route_subscriptions(self.burst, np.zeros(len(self.burst)))
        return dist


@pytest.fixture(scope="module")
def skew():
    return Skew()


def measured(dist, subs, theta, stream) -> tuple[float, object, object]:
    r_subs = dist.route_subscriptions(subs, theta)
    r_msgs = dist.route_messages(stream)
    _, _, load = partition_loads(r_subs, r_msgs, dist.num_partitions)
    return load_imbalance(load), r_subs, r_msgs


# --------------------------------------------------------------------------- policies


@pytest.mark.parametrize("method,policy", PAIRS, ids=[f"{m}-{p}" for m, p in PAIRS])
def test_adaptive_policy_moves_keep_routing_correct_and_reduce_imbalance(skew, method, policy):
    dist = skew.build(method)
    before, _, _ = measured(dist, skew.all_subs, skew.all_theta, skew.stream)
    owner, version = dist.owner.copy(), dist.version
    plan = decide(policy, dist, **NO_BUDGET.get(policy, {}))
    assert np.array_equal(dist.owner, owner) and dist.version == version, "a decision changes nothing"
    assert before > 1.5 and not plan.empty, f"{method}+{policy}: no plan for imbalance {before:.2f}"
    assert plan.imbalance_after < plan.imbalance_before
    assert (plan.sources != plan.destinations).all() and plan.subscriptions > 0 and plan.bytes > 0
    moved, nbytes = apply_plan(dist, plan)
    assert (moved, nbytes) == (plan.subscriptions, plan.bytes)
    assert dist.version > version
    after, r_subs, r_msgs = measured(dist, skew.all_subs, skew.all_theta, skew.stream)
    assert after < before, f"{method}+{policy}: imbalance {before:.2f} -> {after:.2f}"
    assert_meet(r_subs, r_msgs, skew.scores, skew.all_theta, dist.num_partitions, f"{method}+{policy}")


def test_adaptive_policies_refuse_methods_they_do_not_fit(skew):
    with pytest.raises(InputError) as err:
        decide("tornado", skew.build("qt"))
    assert err.value.code == "E023"
    with pytest.raises(InputError) as err:
        decide("sstd", build_distribution("prefix", 4, skew.w.subscriptions, skew.sample, skew.w.vocabulary))
    assert err.value.code == "E023"
    with pytest.raises(InputError) as err:
        decide("nope", skew.build("agrid"))
    assert err.value.code == "E022"


def test_adaptive_moves_are_checked(skew):
    dist = skew.build("agrid")
    with pytest.raises(InputError) as err:
        dist.move_units(np.array([3, 3]), np.array([1, 2]))
    assert err.value.code == "E061"
    with pytest.raises(InputError) as err:
        dist.move_units(np.array([3]), np.array([99]))
    assert err.value.code == "E061"
    assert dist.move_units(np.array([3]), dist.owner[[3]]) == (0, 0)  # no change, no move


@pytest.mark.parametrize("method", ADAPTIVE_METHODS)
def test_adaptive_moving_every_unit_keeps_meeting(skew, method):
    """Any move, not just a policy's: shuffle every unit's owner, then route again."""
    dist = skew.build(method)
    rng = np.random.default_rng(4)
    if method == "aqwa":  # its units follow the tree: rotate the leaves' partitions
        dest = (dist.owner + 3) % dist.num_partitions
    else:
        dest = rng.integers(0, dist.num_partitions, dist.num_units)
    dist.move_units(np.arange(dist.num_units), dest)
    _, r_subs, r_msgs = measured(dist, skew.all_subs, skew.all_theta, skew.stream)
    assert_meet(r_subs, r_msgs, skew.scores, skew.all_theta, dist.num_partitions, method)
    clone = pickle.loads(pickle.dumps(dist))
    assert np.array_equal(clone.route_messages(skew.stream).partitions, r_msgs.partitions)


@pytest.mark.parametrize("method", ADAPTIVE_METHODS)
def test_adaptive_build_refined_with_sstd_is_no_worse_on_its_sample_and_keeps_meeting(skew, method):
    """``refine="sstd"``: SSTD's load adjustment runs on the sample after the method's own build;
    the layout kept measures no more imbalance on the sample than the build's, and every pair
    that can score at or above its threshold still meets.  A policy that does not fit the method
    is refused (E023)."""
    def sample_imbalance(dist):
        dist.reset_statistics()
        dist.route_messages(skew.sample)
        loads = dist.partition_cost()
        dist.reset_statistics()
        return float(loads.max() / loads.mean())

    args = (method, 8, skew.all_subs, skew.sample, skew.w.vocabulary, skew.all_theta)
    plain = build_distribution(*args, grid=GRID)
    refined = build_distribution(*args, grid=GRID, refine="sstd")
    assert sample_imbalance(refined) <= sample_imbalance(plain) + 1e-9
    if method in ("agrid", "kdt", "aqwa"):  # the skew leaves them something to move (qt: its leaves do not)
        assert sample_imbalance(refined) < sample_imbalance(plain) - 0.05
    _, r_subs, r_msgs = measured(refined, skew.all_subs, skew.all_theta, skew.stream)
    assert_meet(r_subs, r_msgs, skew.scores, skew.all_theta, refined.num_partitions, f"{method} refined")
    if method != "agrid":
        with pytest.raises(InputError) as err:
            build_distribution(*args, grid=GRID, refine="tornado")
        assert err.value.code == "E023"


# --------------------------------------------------------------------------- runtime cuts of a hot unit


def placement_keys(dist) -> np.ndarray:
    """(slot, unit, term) of every placement, as sorted keys (an order-free comparison)."""
    return np.sort((dist.pl_slot * np.int64(dist.num_units) + dist.pl_unit) * np.int64(1 << 32) + dist.pl_term + 1)


def fresh_placements(dist) -> np.ndarray:
    """The placements the current tables give the registered subscriptions from scratch."""
    slots = np.flatnonzero(dist.table.alive)
    rows, units, terms = dist._placements(dist.table.records.take(slots), dist.table.assigned[slots])
    return np.sort((slots[rows] * np.int64(dist.num_units) + units) * np.int64(1 << 32) + terms + 1)


def check_cut(dist, unit: int, option: tuple, stream) -> int:
    """Cut, then check: routing and summaries unchanged, placements those of the rule, the
    predicted piece sizes exact, every count consistent."""
    kind, at, a, b, bytes_a, bytes_b = option
    holders, routed = dist.holders.copy(), dist.route_messages(stream)
    parts_before = dist._partitions_of_slots(np.flatnonzero(dist.table.alive), int(dist.table.alive.sum()))
    version = dist.version
    new = cut_unit(dist, unit, kind, at)
    assert dist.version == version + 1
    assert np.array_equal(dist.holders, holders), "a cut changes no summary"
    assert np.array_equal(dist.route_messages(stream).partitions, routed.partitions)
    parts_after = dist._partitions_of_slots(np.flatnonzero(dist.table.alive), int(dist.table.alive.sum()))
    assert np.array_equal(dense(parts_after, dist.num_partitions), dense(parts_before, dist.num_partitions))
    assert np.array_equal(placement_keys(dist), fresh_placements(dist)), "placements follow the rule"
    assert (dist.unit_subs[unit], dist.unit_subs[new]) == (a, b)
    assert (dist.unit_bytes[unit], dist.unit_bytes[new]) == (bytes_a, bytes_b)
    distinct = np.unique(dist.pl_slot * np.int64(dist.num_units) + dist.pl_unit) % dist.num_units
    assert np.array_equal(np.bincount(distinct, minlength=dist.num_units), dist.unit_subs)
    assert len(dist.owner) == dist.num_units == len(dist.unit_region) and dist.owner[new] == dist.owner[unit]
    return new


@pytest.mark.parametrize("method", CUTTABLE)
def test_cut_units_then_move_the_pieces_keeps_meeting(skew, method):
    """Random and adversarial cuts (the heaviest unit, a piece cut again, text and space), each
    checked against the placement rule, then random moves of every unit: the brute-force oracle."""
    dist = skew.build(method)
    dist.route_subscriptions(skew.all_subs, skew.all_theta)
    rng = np.random.default_rng(5)
    kinds: set[str] = set()
    for step in range(8):
        snap = snapshot(dist)
        unit = int(np.argmax(dist.unit_subs)) if step % 2 == 0 else int(rng.integers(0, dist.num_units))
        options = cut_options(snap, unit)
        if not options:
            continue
        option = options[int(rng.integers(0, len(options)))]
        kinds.add(option[0])
        check_cut(dist, unit, option, skew.stream)
    assert (kinds == {"text", "space"}) if method == "kdt" else ("text" in kinds)
    dist.move_units(np.arange(dist.num_units), rng.integers(0, dist.num_partitions, dist.num_units))
    _, r_subs, r_msgs = measured(dist, skew.all_subs, skew.all_theta, skew.stream)
    assert_meet(r_subs, r_msgs, skew.scores, skew.all_theta, dist.num_partitions, method + " after cuts")
    from skype.dskype.handover import UnitLocator  # the Spark runtime's view of the same tables

    home = UnitLocator.of(dist).home_partitions(skew.all_subs)
    assert dense(r_subs, dist.num_partitions)[np.arange(len(home)), home].all(), "home replica is a replica"


def test_cuts_are_checked(skew):
    with pytest.raises(InputError) as err:
        cut_unit(skew.build("agrid"), 0, "text", 5)
    assert err.value.code == "E066"
    dist = skew.build("kdt")
    unit = int(np.argmax(dist.unit_subs))
    for kind, at in (("text", 0), ("space", (0, 10_000)), ("diagonal", 1)):
        with pytest.raises(InputError) as err:
            cut_unit(dist, unit, kind, at)
        assert err.value.code == "E066"
    text = next(o for o in cut_options(snapshot(dist), unit) if o[0] == "text")
    cut_unit(dist, unit, "text", text[1])
    with pytest.raises(InputError) as err:  # a region split by text is not cut by space
        cut_unit(dist, unit, "space", (0, 1))
    assert err.value.code == "E066"


def test_forecast_plans_on_the_trend_and_counts_moves_on_the_present(skew):
    dist = skew.build("agrid")
    dist.remove_subscriptions(skew.burst.ids)
    dist.route_messages(skew.stream)
    dist.fold_statistics(0.0)
    dist.route_subscriptions(skew.burst, np.zeros(len(skew.burst)))  # an interval of arrivals
    dist.route_messages(skew.stream)
    dist.fold_statistics(0.0)
    snap = snapshot(dist)
    assert snap["unit_trend"].sum() == len(skew.burst) and (snap["unit_trend"] >= 0).all()
    model = LoadModel(snap, horizon=1.0)
    assert np.array_equal(model.subs, dist.unit_subs + snap["unit_trend"])
    assert np.array_equal(LoadModel(snap).subs, dist.unit_subs)
    plan = decide("ps2stream", dist, horizon=1.0, max_fraction=1.0)
    assert plan.subscriptions == int(dist.unit_subs[plan.units].sum())
    dist.fold_statistics(0.0)
    assert snapshot(dist)["unit_trend"].sum() == 0, "no arrival in the last interval: no trend"


@pytest.mark.parametrize("method", ["agrid", "kdt"])
def test_measured_rates_are_exact_on_the_sample(skew, method):
    """The rates model of measured=True against the distribution itself: after random moves (and a
    cut), each partition covers exactly the sample messages the moved distribution routes to it."""
    dist = skew.build(method)
    dist.route_messages(skew.stream)  # 700 messages: the whole stream is the sample
    snap = snapshot(dist)
    model = LoadModel(snap, measured=True)
    assert model.union is not None and model.union.sample == len(skew.stream)
    routed = dist.route_messages(skew.stream).partition_sizes(dist.num_partitions)
    assert np.array_equal((model.union.C > 0).sum(axis=1), routed)
    rng = np.random.default_rng(8)
    units = rng.choice(np.flatnonzero(dist.unit_subs > 0), 12, replace=False)
    dest = rng.integers(0, dist.num_partitions, len(units))
    for u, q in zip(units, dest):
        model.move(np.array([u]), int(q))
    plan = model.plan("test", 1.0, 0.0)
    apply_plan(dist, plan)
    routed = dist.route_messages(skew.stream).partition_sizes(dist.num_partitions)
    assert np.array_equal((model.union.C > 0).sum(axis=1), routed)
    assert np.allclose(model.rate[routed > 0] * model.union.base[routed > 0],
                       model.union.measured[routed > 0] * routed[routed > 0])


def test_tornado_bands_follow_any_shape():
    """Corner shifts: the bands of an L-shaped X toward each neighbour are X's cells only, nested,
    the first one touching the neighbour; a neighbour at X's corner only is found too."""
    owner = np.array([[0, 0, 1, 1, 1, 1],
                      [0, 2, 2, 2, 1, 1],
                      [3, 2, 2, 2, 2, 4],
                      [3, 3, 3, 5, 5, 4]])
    ny, nx = owner.shape
    bands = tornado._bands(owner.ravel(), nx, ny, 2, (1, 1, 5, 3))
    assert set(bands) == {0, 1, 3, 4, 5}
    x_cells = set(np.flatnonzero(owner.ravel() == 2).tolist())
    for b, layers in bands.items():
        assert all(set(layer.tolist()) <= x_cells for layer in layers)
        assert all(set(a.tolist()) < set(c.tolist()) for a, c in zip(layers, layers[1:])), "bands nest"
        first = layers[0]
        near = tornado._grow(owner == b).ravel()[first]
        assert near.all(), f"the first band touches partition {b}"


@pytest.mark.parametrize("rates", [False, True], ids=["fixed-rates", "measured-rates"])
def test_tornado_corner_shifts_move_load_and_keep_meeting(skew, rates):
    dist = skew.build("agrid")
    dist.route_messages(skew.stream)
    plain = decide("tornado", dist, corner=False, measured=rates)
    plan = decide("tornado", dist, measured=rates)
    assert plan.imbalance_after <= plain.imbalance_after and plan.imbalance_after < plan.imbalance_before
    assert any("corner shift" in op for op in plan.operations)
    assert apply_plan(dist, plan) == (plan.subscriptions, plan.bytes)
    _, r_subs, r_msgs = measured(dist, skew.all_subs, skew.all_theta, skew.stream)
    assert_meet(r_subs, r_msgs, skew.scores, skew.all_theta, dist.num_partitions, "agrid after corner shifts")


# --------------------------------------------------------------------------- adversarial layouts


@pytest.mark.parametrize("method", ADAPTIVE_METHODS)
def test_adaptive_all_points_at_one_spot_and_empty_cells(method):
    """Every subscription and message at one point: one cell holds everything, every other cell
    is empty; P exceeds what space can split.  Routing stays correct."""
    rng = np.random.default_rng(2)
    subs = _batch_subs([{int(t): 1.0} for t in rng.integers(0, 20, 300)], np.full(300, 2.35), np.full(300, 48.86))
    msgs = _batch_msgs([{int(t): 1.0} for t in rng.integers(0, 20, 200)], np.full(200, 2.35), np.full(200, 48.86))
    dist = build_distribution(method, 8, subs, msgs, None, grid=GRID)
    r_subs, r_msgs = dist.route_subscriptions(subs), dist.route_messages(msgs)
    assert (r_subs.counts() >= 1).all()
    assert_meet(r_subs, r_msgs, score_matrix(subs, msgs), None, 8, method)


@pytest.mark.parametrize("method", ADAPTIVE_METHODS)
def test_adaptive_two_far_clusters_and_a_hot_term(method):
    """Subscriptions in two far clusters, one term in every record; messages in a third place."""
    rng = np.random.default_rng(3)
    x = np.r_[rng.normal(-100, 1, 150), rng.normal(120, 1, 150)]
    y = np.r_[rng.normal(40, 1, 150), rng.normal(-30, 1, 150)]
    subs = _batch_subs([{0: 1.0, int(t): 0.5} for t in rng.integers(1, 40, 300)], x, y)
    msgs = _batch_msgs([{0: 1.0, int(t): 0.4} for t in rng.integers(1, 40, 150)], np.full(150, 10.0), np.zeros(150))
    dist = build_distribution(method, 6, subs, msgs, None, grid=GRID)
    r_subs, r_msgs = dist.route_subscriptions(subs), dist.route_messages(msgs)
    assert (r_msgs.counts() >= 1).all(), "the hot term is live everywhere it is held"
    assert_meet(r_subs, r_msgs, score_matrix(subs, msgs), None, 6, method)


@pytest.mark.parametrize("method", ADAPTIVE_METHODS)
def test_adaptive_lazy_reallocation_and_backfill(skew, method):
    """theta falls: only new partitions come back, the summaries grow, and old routing plus the
    backfill of the newly live terms covers every pair above the lower thresholds."""
    c = skew
    rng = np.random.default_rng(11)
    subs = c.w.subscriptions
    high = rng.uniform(0.5, 1.0, len(subs))
    low = high * rng.uniform(0.0, 1.0, len(subs))
    dist = build_distribution(method, 8, subs, c.sample, c.w.vocabulary, high, grid=GRID)
    before = dist.route_subscriptions(subs, high)
    old_msgs = dist.route_messages(c.stream)
    dist.pop_new_live_terms()
    grown = dist.update_thresholds(subs.ids, low)
    assert not (dense(grown, 8) & dense(before, 8)).any(), "only NEW partitions are returned"
    new_terms = dist.pop_new_live_terms()
    assert len(new_terms) > 0
    after = before.union(grown)
    scores = c.scores[: len(subs)]
    assert_meet(after, dist.route_messages(c.stream), scores, low, 8, method)
    has_new = np.isin(c.stream.terms.ids, new_terms)
    rows_new = np.unique(np.repeat(np.arange(len(c.stream)), c.stream.terms.lengths())[has_new])
    r_rows, r_parts = dist.route_messages(c.stream.take(rows_new)).pairs()
    from skype.partitioning import Routing

    backfilled = old_msgs.union(Routing.from_pairs(rows_new[r_rows], r_parts, len(c.stream)))
    assert_meet(after, backfilled, scores, low, 8, method + " with backfill")
    assert dist.update_thresholds(subs.ids, high).counts().sum() == 0


def test_adaptive_removing_subscriptions_empties_their_units(skew):
    dist = skew.build("qt")
    total = int(dist.unit_subs.sum())
    dist.remove_subscriptions(skew.burst.ids)
    assert int(dist.unit_subs.sum()) == total - len(skew.burst)
    dist.remove_subscriptions(skew.w.subscriptions.ids)
    assert int(dist.unit_subs.sum()) == 0 and len(dist.live_terms()) == 0
    assert dist.route_messages(skew.stream).counts().sum() == 0, "no summary left: no message goes anywhere"


# --------------------------------------------------------------------------- drift workloads


@pytest.fixture(scope="module")
def base_workload():
    return make_workload("tweets", num_subs=200, num_messages=4000, seed=2)


@pytest.mark.parametrize("kind", DRIFT_KINDS)
def test_drift_is_seeded_and_leaves_the_sample_alone(base_workload, kind):
    w = base_workload
    a, b = make_drift(kind, w, start=1000, seed=5), make_drift(kind, w, start=1000, seed=5)
    assert np.array_equal(a.messages.x, b.messages.x) and np.array_equal(a.arrivals.ids, b.arrivals.ids)
    assert np.array_equal(a.messages.terms.ids, b.messages.terms.ids)
    head = w.messages.slice(0, 1000)
    assert np.array_equal(a.messages.x[:1000], head.x) and np.array_equal(a.messages.y[:1000], head.y)
    assert np.array_equal(a.messages.t, w.messages.t), "timestamps and order are kept"
    if kind != "none":
        changed = (a.messages.x != w.messages.x) | (a.messages.y != w.messages.y)
        changed |= np.diff(a.messages.terms.indptr) != np.diff(w.messages.terms.indptr)
        assert changed.any() or len(a.arrivals), kind
        assert len(a.arrivals) > 0 and (a.arrive_at >= 1000).all()
        assert len(np.unique(a.arrivals.ids)) == len(a.arrivals) and a.arrivals.ids.min() > w.subscriptions.ids.max()
        stays = a.leave_at < 0
        assert (a.leave_at[~stays] > a.arrive_at[~stays]).all()
    steps = a.steps(chunk=700)
    msgs = MessageBatch.concat([p for op, p in steps if op == "msgs"])
    assert np.array_equal(msgs.ids, w.messages.ids)
    subs_in = [p for op, p in steps if op == "sub"]
    assert sum(len(p) for p in subs_in) == len(a.arrivals)
    assert sum(1 for op, _ in steps if op == "unsub") == int((a.leave_at >= 0).sum())
    registered: set[int] = set()
    for op, p in steps:  # an id leaves only after it arrived
        if op == "sub":
            registered |= set(p.ids.tolist())
        elif op == "unsub":
            assert p in registered


def test_drift_hotspot_takes_a_rising_share(base_workload):
    d = make_drift("hotspot", base_workload, start=0, seed=1, share=0.8)
    moved = (d.messages.x != base_workload.messages.x)
    first, last = moved[:1000].mean(), moved[-1000:].mean()
    assert last > 0.5 > first


def test_drift_rejects_bad_parameters(base_workload):
    with pytest.raises(InputError) as err:
        make_drift("hotspot", base_workload, share=1.5)
    assert err.value.code == "E062"
    with pytest.raises(InputError) as err:
        make_drift("flip", base_workload, radius=2.0)
    assert err.value.code == "E062"
    with pytest.raises(InputError) as err:
        make_drift("storm", base_workload)
    assert err.value.code == "E022"


def test_drift_steps_move_events_to_the_chunk_start():
    msgs = _batch_msgs([{0: 1.0}] * 10)
    subs = _batch_subs([{0: 1.0}] * 2, first_id=50)
    steps = drift_steps(msgs, subs, np.array([3, 7]), np.array([8, -1]), chunk=5)
    assert [(op, len(p) if op != "unsub" else p) for op, p in steps] == [
        ("sub", 1), ("msgs", 5), ("sub", 1), ("unsub", 50), ("msgs", 5)]


# --------------------------------------------------------------------------- over time


@pytest.fixture(scope="module")
def drift_run():
    w = make_workload("tweets", num_subs=600, num_messages=9000, seed=3)
    d = make_drift("hotspot", w, start=3000, seed=3, sub_share=1.0)
    sample = d.messages.slice(0, 3000)
    theta = estimate_thresholds(w.subscriptions, sample, w.vocabulary, 500, engine="kscore")
    steps = [s for s in d.steps(1000) if not (s[0] == "msgs" and s[1].ids[0] < 3000)]
    return w, sample, theta, steps


def test_timeline_reports_every_interval_and_rebalancing_beats_never(drift_run):
    w, sample, theta, steps = drift_run
    runs = {}
    for policy in ("never", "ps2stream"):
        dist = build_distribution("agrid", 8, w.subscriptions, sample, w.vocabulary, theta, grid=GRID)
        runs[policy] = run_timeline(dist, policy, w.subscriptions, theta, steps, interval=1500)
    never, ps2 = runs["never"], runs["ps2stream"]
    assert len(never["intervals"]) == 4 and [r["messages"] for r in never["intervals"]] == [1500] * 4
    assert never["subscriptions_moved"] == 0 and ps2["subscriptions_moved"] > 0
    assert all(len(r["load_per_partition"]) == 8 for r in ps2["intervals"])
    assert ps2["imbalance_last"] < never["imbalance_last"]
    assert ps2["stream_hours"] > 0 and ps2["moved_fraction_per_hour"] > 0


def test_partition_sim_cli_over_time(tmp_path):
    from skype.run import main

    out, png = tmp_path / "t.json", tmp_path / "t.png"
    rc = main(["partition-sim", "--dataset", "tweets", "--num-subs", "300", "--num-messages", "5000",
               "--sample-size", "2000", "--window", "500", "--thresholds", "kscore", "--partitions", "4",
               "--drift", "hotspot", "--rebalance", "paper,never", "--method", "agrid", "--interval", "1000",
               "--metrics-out", str(out), "--plot-out", str(png), "--no-progress"])
    assert rc == 0
    data = json.loads(out.read_text())
    assert {(r["method"], r["policy"]) for r in data["runs"]} == {("agrid", "tornado"), ("agrid", "never")}
    assert data["workload"]["arrivals"] > 0 and len(data["runs"][0]["intervals"]) == 3
    assert png.stat().st_size > 1000


def test_partition_sim_help_lists_the_policies(capsys):
    from skype.run import main

    with pytest.raises(SystemExit):
        main(["partition-sim", "--help"])
    text = capsys.readouterr().out
    for policy in (*POLICIES, "paper"):
        assert policy in text
