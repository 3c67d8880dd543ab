"""The sizing harness and projection (:mod:`skype.sizing`): the per-partition measurement routes
and hosts exactly what the runtime's router places, counts deterministically and, at P = 1, counts
the centralized engine's work; the model's fits and arithmetic are checked against hand-computed
figures.  No JVM; no timing is asserted."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skype.errors import InputError
from skype.simulate import load_inputs
from skype.sizing.model import (AtPartitions, FixedCost, Linear, MethodProfile, check_runs, fit_profile, per_message,
                                project, size)
from skype.sizing.partitions import measure_partitions

WINDOW, BATCH = 400, 100


def _inputs(num_subs: int = 300, num_messages: int = 1500, seed: int = 2):
    return load_inputs({"dataset": "tweets", "num_subs": num_subs, "num_messages": num_messages, "window": WINDOW,
                        "seed": seed})


DETERMINISTIC = ("replicas", "active_subscriptions", "window_share", "routed_messages", "work", "steady_batches",
                 "steady_messages", "communication_per_message", "replication_ratio", "report_bytes")


@pytest.mark.parametrize("method", ["location", "prefix", "agrid"])
def test_counts_are_deterministic_and_cover_the_placements(method):
    from skype.dskype.codec import OP_SUB, Commands
    from skype.dskype.plan import RunSettings, build_distribution_for
    from skype.dskype.routing import Router

    inputs = _inputs()
    first = measure_partitions(inputs, method, 3, window=WINDOW, batch_size=BATCH, sample_size=500)
    again = measure_partitions(inputs, method, 3, window=WINDOW, batch_size=BATCH, sample_size=500)
    assert {k: getattr(first, k) for k in DETERMINISTIC} == {k: getattr(again, k) for k in DETERMINISTIC}
    # every replica the router places is hosted where it was placed
    settings_ = RunSettings.from_options({"method": method, "partitions": 3, "batch_size": BATCH, "window": WINDOW,
                                          "sample_size": 500}, inputs.bounds)
    dist = build_distribution_for(settings_, method, inputs)
    subs = inputs.subscriptions
    n = len(subs)
    cmds = Commands(np.arange(n), np.zeros(n, np.int64), np.full(n, OP_SUB, np.int8), subs, np.ones(n, np.int32))
    _, parts, _ = Router(dist, [0, 1, 2]).placements(cmds)
    assert first.replicas == np.bincount(parts, minlength=3).tolist()
    assert first.steady_batches == len(range(-(-WINDOW // BATCH) + 1, -(-inputs.num_messages // BATCH)))
    assert first.steady_messages == first.steady_batches * BATCH
    assert all(c >= 0 for c in first.apply_cpu_s)
    if method in ("location", "agrid"):  # one replica each; every message reaches every partition
        assert sum(first.replicas) == n and first.replication_ratio == 1.0
        assert first.routed_messages == [first.steady_messages] * 3 and first.window_share == [WINDOW] * 3
        assert first.merge_cpu_s == [0.0] * 3
    else:  # replicated: the share of the window a partition holds is what was routed to it
        assert sum(first.replicas) >= n and max(first.window_share) <= WINDOW
        assert first.communication_per_message < 3


def test_a_single_partition_counts_the_centralized_engines_work():
    from skype.dskype.work import COUNTERS, counter_delta, engine_counters
    from skype.engine import Engine

    inputs = _inputs()
    costs = measure_partitions(inputs, "location", 1, window=WINDOW, batch_size=BATCH, sample_size=500)
    central = Engine(window=WINDOW, bounds=inputs.bounds, vocabulary=inputs.vocabulary)
    central.subscribe_batch(inputs.subscriptions)
    summed = dict.fromkeys(COUNTERS, 0)
    for b, chunk in enumerate(inputs.messages().batches(BATCH)):
        before = engine_counters(central)
        central.publish_batch(chunk)
        if b >= -(-WINDOW // BATCH) + 1:
            delta = counter_delta(before, engine_counters(central))
            for name in COUNTERS:
                summed[name] += delta[name]
    assert {name: costs.work[name][0] for name in COUNTERS} == summed
    assert costs.active_subscriptions == [len(inputs.subscriptions)] and costs.window_share == [WINDOW]
    memory = costs.engine_memory_bytes[0]
    assert memory == {k: int(v) for k, v in central.stats()["memory_bytes"].items()}


def test_a_workload_with_commands_among_the_messages_is_refused():
    from skype.workload import Inputs

    base = _inputs(num_subs=50, num_messages=300)
    mixed = Inputs(base.vocabulary, base.subscriptions.slice(0, 40),
                   [("msgs", base.messages()), ("sub", base.subscriptions.slice(40, 50))], base.bounds, "mixed")
    with pytest.raises(InputError, match="E023"):
        measure_partitions(mixed, "location", 2, window=100, batch_size=50)


# --------------------------------------------------------------------------- the model


def test_linear_fit_recovers_a_line_and_a_single_point_goes_through_the_origin():
    assert Linear.fit([10, 20, 40], [1.5, 2.5, 4.5]) == Linear(0.5, 0.1)
    assert Linear.fit([5, 5], [2.0, 4.0]) == Linear(0.0, 0.6)
    assert Linear.fit([], []) == Linear(0.0, 0.0)


def _synthetic_runs(method="m", *, a=2e-6, b=3e-10, merge=0.0, per_rep=900.0, per_win=250.0, route=1e-7):
    """Runs as the harness reports them, made from known coefficients: the busiest partition costs
    (a + b N / P * 1.2) s per message, the others (a + b N / P * 0.8 ... ) so that the sum is P a + b N."""
    runs = []
    for n in (1000, 2000, 4000):
        for P in (1, 2, 4):
            msgs = 1000
            share = [b * n / P] * P
            if P > 1:
                share[0] *= 1.2
                share[1] -= 0.2 * b * n / P
            apply_cpu = [(a + s) * msgs for s in share]
            replicas = [n // P] * P
            replicas[0] += n - sum(replicas)
            window_share = [500] * P
            runs.append({
                "method": method, "partitions": P, "subscriptions": n, "window": 500, "batch_size": 100,
                "steady_messages": msgs, "apply_cpu_s": apply_cpu, "merge_cpu_s": [merge * msgs] * P,
                "route_s": route * msgs, "replication_ratio": 1.0, "replicas": replicas, "window_share": window_share,
                "engine_memory_bytes": [{"window": 100 * 500, "message_index": 150 * 500, "buffers": 7}] * P,
                "rss_growth_bytes": int(5_000_000 + per_rep * n + per_win * 500 * P),
            })
    return runs


def test_fit_profile_recovers_the_coefficients():
    prof = fit_profile(_synthetic_runs(), host_base_bytes=123.0)
    assert prof.sizes == (1000, 2000, 4000) and [a.partitions for a in prof.at] == [1, 2, 4]
    for at in prof.at:
        scale = 1.2 if at.partitions > 1 else 1.0
        assert at.busy.intercept == pytest.approx(2e-6) and at.busy.slope == pytest.approx(3e-10 * scale / at.partitions)
        assert at.total.intercept == pytest.approx(2e-6 * at.partitions) and at.total.slope == pytest.approx(3e-10)
        assert at.route(1000) == pytest.approx(1e-7)
    assert prof.bytes_per_window_message == pytest.approx(250.0)
    assert prof.bytes_per_replica == pytest.approx(900.0) and prof.rss_intercept_bytes == pytest.approx(5_000_000, rel=1e-6)
    assert prof.partition_base_bytes == 123.0 and prof.memory_basis == "end"
    peaked = _synthetic_runs()
    for r in peaked:  # the peak: 600 more bytes per replica during registration
        r["rss_peak_growth_bytes"] = r["rss_growth_bytes"] + 600 * sum(r["replicas"])
    prof = fit_profile(peaked)
    assert prof.memory_basis == "peak" and prof.bytes_per_replica == pytest.approx(1500.0)
    with pytest.raises(ValueError):
        fit_profile(_synthetic_runs("a") + _synthetic_runs("b"))


def _profile(a=1e-5, b=1e-9, P0=2, merge=(0.0, 0.0), route=0.0, replication=1.0):
    at = AtPartitions(P0, Linear(a, b), Linear(P0 * a, P0 * b), Linear(merge[0], merge[1]),
                      Linear(P0 * merge[0], P0 * merge[1]), Linear(route, 0.0), replication)
    return MethodProfile("m", 1000, 500, (1000,), (at,), 1000.0, 200.0, 50e6)


def test_projection_by_hand():
    prof = _profile(a=1e-5, b=1e-9, P0=2, route=2e-6)
    fixed = FixedCost(0.2, 0.1)
    # P = 2 on 2 cores: busy = 1e-5 + 1e-9 * 1e5 = 1.1e-4; total = 2.2e-4 -> / 2 = 1.1e-4
    p = project(prof, fixed, 100_000, 2, 2)
    assert p.fixed_s == pytest.approx(0.2 + 0.1 * 2 / 2)
    assert p.batch_s == pytest.approx(0.3 + 500 * (2e-6 + 1.1e-4))
    assert p.throughput_msgs_per_s == pytest.approx(500 / p.batch_s)
    assert p.partition_bytes == pytest.approx(50e6 + 1000.0 * 100_000 / 2 + 200.0 * 1000)
    # P = 8 on 2 cores: the subscription part divides by 4 on the busiest, the message part multiplies in the sum
    cost = per_message(prof, 100_000, 8)
    assert cost["busy"] == pytest.approx(1e-5 + 1e-4 / 4) and cost["total"] == pytest.approx(8e-5 + 2e-4)
    p8 = project(prof, fixed, 100_000, 8, 2)
    assert p8.batch_s == pytest.approx(0.2 + 0.1 * 4 + 500 * (2e-6 + (8e-5 + 2e-4) / 2))
    # on 8 cores the slowest task bounds the stage
    assert project(prof, fixed, 100_000, 8, 8).batch_s == pytest.approx(0.2 + 0.1 + 500 * (2e-6 + 1e-5 + 2.5e-5))


@settings(max_examples=40, deadline=None)
@given(n=st.floats(min_value=1e5, max_value=1e9), cores=st.sampled_from([2, 4, 8]),
       gib=st.sampled_from([8.0, 16.0, 64.0]), target=st.one_of(st.none(), st.floats(min_value=10, max_value=1e5)))
def test_sizing_picks_the_least_executors(n, cores, gib, target):
    prof = _profile(a=2e-6, b=1e-9, P0=4, merge=(1e-7, 1e-11))
    fixed = FixedCost(0.3, 0.02)
    budget = (gib - 2) * (1 << 30)
    try:
        s = size(prof, fixed, n, cores_per_executor=cores, executor_bytes=gib * (1 << 30), target_msgs_per_s=target,
                 max_executors=100_000)
    except ValueError:
        return
    assert s.partitions == s.executors * cores and s.executor_bytes <= budget
    if s.executors > 1:  # one executor fewer does not hold the subscriptions
        less = project(prof, fixed, n, (s.executors - 1) * cores, (s.executors - 1) * cores)
        assert cores * less.partition_bytes > budget
    if target is not None and s.executors_for_target is not None:
        assert s.executors_for_target >= s.executors and s.throughput_at_target >= target
        if s.executors_for_target > s.executors:
            e = s.executors_for_target - 1
            assert project(prof, fixed, n, e * cores, e * cores).throughput_msgs_per_s < target
    elif target is not None:
        assert s.notes and math.isfinite(s.throughput_msgs_per_s)


def test_check_runs_compares_projected_with_measured():
    prof = _profile(a=1e-4, b=0.0, P0=1)
    fixed = FixedCost(0.5, 0.0)
    rows = check_runs({"m": prof}, fixed, [{"method": "m", "partitions": 1, "throughput_msgs_per_s": 500.0},
                                           {"method": "m", "partitions": 1, "throughput_msgs_per_s": 1000.0},
                                           {"method": "other", "partitions": 1, "throughput_msgs_per_s": 1.0}],
                      1000, cores=1)
    # batch = 0.5 + 500 * 1e-4 = 0.55 s -> 909 msg/s
    assert [r["within_25"] for r in rows] == [False, True]
    assert rows[0]["projected"] == pytest.approx(500 / 0.55) and rows[0]["ratio"] == pytest.approx(500 / 0.55 / 500)


def test_the_event_cost_is_fitted_on_one_run_and_spread_over_the_tasks():
    from skype.sizing.model import event_cost

    at = AtPartitions(1, Linear(1e-4, 0.0), Linear(1e-4, 0.0), Linear(0.0, 0.0), Linear(0.0, 0.0), Linear(0.0, 0.0),
                      1.0, Linear(0.0, 0.5))  # reports: 0.5 bytes per message per subscription
    prof = MethodProfile("m", 1000, 500, (1000,), (at,), 0.0, 0.0, 0.0)
    fixed = FixedCost(0.5, 0.0)
    # at N = 2000 a batch moves 500 * 1000 bytes of reports; the run took 0.1 s more than 0.55 s
    fitted = event_cost(prof, fixed, 2000, 0.65, partitions=1, cores=2)
    assert fitted.per_report_byte == pytest.approx(0.1 / 500_000) and (fitted.f0, fitted.f_task) == (0.5, 0.0)
    assert project(prof, fitted, 2000, 1, 2).batch_s == pytest.approx(0.65)
    # P = 4 on 2 cores: the same bytes, written by two tasks at a time
    p4 = project(prof, fitted, 2000, 4, 2)
    expected = 0.5 + 500 * (max(1e-4, 4e-4 / 2) + fitted.per_report_byte * 1000 / 2)
    assert p4.batch_s == pytest.approx(expected)
    # a partition holds one batch's reports: 500 messages x 1000 bytes over 4 partitions
    assert p4.partition_bytes == pytest.approx(500 * 1000 / 4)
    # a run faster than the projection gives no negative cost
    assert event_cost(prof, fixed, 2000, 0.3).per_report_byte == 0.0
