"""Live rebalancing with statistics from the partitions' metrics rows (issue 25, deliverable 2:
``skype.dskype.loadstats``), JVM-free (the job's own code, ``spark_fixtures.LocalPipeline``).

* The driver's copy advanced from the reports equals the copy advanced by the replay of the
  staged stream after every batch: message count, term counts, cell counts, the recent sample,
  replicas and bytes per unit, the summaries' entries; the messages per partition equal an
  independent count over the records each partition owns at the batch's end.
* A run whose rebalancer decides from the reports stays exact against the centralized engine
  after every batch through moves, and a batch decided again by a new driver (its state lost,
  the reports already taken out of the rows) takes the same decision.
"""

from __future__ import annotations


import numpy as np
import pytest

pytest.importorskip("pyspark")

from spark_fixtures import LocalPipeline, centralized_by_batch, first_difference  # noqa: E402

from skype.simulate import load_inputs  # noqa: E402
from skype.run import build_parser  # noqa: E402

pytestmark = pytest.mark.spark

DRIFT = ["--num-subs", "300", "--num-messages", "1200", "--drift", "hotspot", "--drift-start", "0", "--window", "400"]
BATCH = 400


def _pipeline(tmp_path, method, policy, extra=(), batch=BATCH, partitions=3):
    from skype.dskype.plan import RunSettings

    args = build_parser().parse_args(["distributed", *extra, "--sample-size", "300", "--method", method,
                                      "--partitions", str(partitions), "--batch-size", str(batch),
                                      "--rebalance", policy])
    inputs = load_inputs(vars(args))
    settings = RunSettings.from_options(vars(args), inputs.bounds)
    settings.distribution.rebalance_stats = "reports"
    return LocalPipeline(tmp_path / "run", settings, inputs), inputs, settings


def _padded(a, n):
    return np.r_[np.asarray(a, np.float64), np.zeros(n - len(a))]


@pytest.mark.parametrize("method,workload,batch", [
    ("agrid", DRIFT, BATCH),
    ("qt", ["--num-subs", "600", "--num-messages", "2000", "--drift", "inject", "--drift-start", "0",
            "--window", "500"], 250),
    ("kdt", "events", 200),
])
def test_reported_statistics_equal_the_replay(method, workload, batch, tmp_path):
    """No moves (the copies only observe): after every batch the copy advanced from the reports
    holds exactly the replay copy's statistics, and each partition's message count is the
    batch's messages sharing a term with the live records it owns (version 0).  Workloads: a
    moving hot spot with departures, SSTD's injected subscriptions, and an events file with
    unsubscribes, a re-subscribe with other terms, a replacement at one position and commands
    after the last message."""
    from spark_fixtures import events_workload

    from skype.dskype import loadstats
    from skype.dskype.handover import UnitLocator
    from skype.dskype.rebalancing import Rebalancer

    if workload == "events":
        workload = ["--events", str(events_workload(tmp_path / "events.jsonl")), "--window", "500"]
    pipe, inputs, settings = _pipeline(tmp_path, method, "tornado" if method == "agrid" else "sstd", workload, batch)
    base = pipe.plan.pipelines[0].distribution
    directory = tmp_path / "tables"
    replay = Rebalancer(directory / "replay", base, "never", inputs, 0, source="replay")
    reports = Rebalancer(directory / "reports", base, "never", None, 0, source="reports")
    from skype.dskype.rebalancing import attach

    attach(pipe.plan, "never", inputs)  # version 0, for the partitions
    r_state, p_state = replay._fresh(), reports._fresh()
    locator = UnitLocator.of(base)
    messages = inputs.messages()
    lo = 0
    b = 0
    checked_commands = 0
    while not pipe.done():
        pipe.step()
        stages = pipe.metrics[-1]
        upto = max(m["upto"] for m in stages if m["stage"] == "partition")
        r_state["cursor"] = replay._advance(r_state["dist"], r_state["cursor"], upto)
        parts = {int(m["partition"]): m[loadstats.STATS_KEY] for m in stages if m["stage"] == "partition"}
        stats = loadstats.fold_reports(parts, base.num_partitions)
        checked_commands += len(stats.commands)
        loadstats.advance(p_state["dist"], stats)
        r, p = r_state["dist"], p_state["dist"]
        # the messages per partition: an independent count over the owned live records
        live = r.table.records.take(np.flatnonzero(r.table.alive))
        owners = locator.home_partitions(live)
        batch_msgs = messages.slice(lo, upto)
        rows = np.repeat(np.arange(len(batch_msgs)), batch_msgs.terms.lengths())
        for q in range(base.num_partitions):
            terms = np.unique(live.take(np.flatnonzero(owners == q)).terms.ids)
            want = len(np.unique(rows[np.isin(batch_msgs.terms.ids, terms)]))
            assert stats.part_msgs[q] == want, (b, q)
        lo = upto
        for dist in (r, p):
            dist.fold_statistics(0.5)
        assert p.msgs_old == r.msgs_old and p.messages_seen == r.messages_seen
        width = max(len(p.term_msgs_old), len(r.term_msgs_old))
        assert np.array_equal(_padded(p.term_msgs_old, width), _padded(r.term_msgs_old, width))
        assert np.array_equal(p.cell_msgs_old, r.cell_msgs_old)
        for x, y in zip(p.recent_messages(), r.recent_messages()):
            assert np.array_equal(x, y), b
        assert np.array_equal(p.unit_subs, r.unit_subs) and np.array_equal(p.unit_bytes, r.unit_bytes)
        assert np.array_equal(p.unit_trend, r.unit_trend)
        assert np.array_equal(p.unit_terms(), r.unit_terms()) and np.array_equal(p.holders, r.holders)
        assert sorted(p.table.records.ids[p.table.alive]) == sorted(r.table.records.ids[r.table.alive])
        b += 1
    assert b >= 3 and checked_commands > 0 and r_state["dist"].msgs_old > 0
    # the replay's own count routes by the placements' summaries (replicas): it differs
    assert not np.array_equal(r_state["dist"].part_msgs_old, p_state["dist"].part_msgs_old)


@pytest.mark.parametrize("method,policy", [("agrid", "tornado"), ("kdt", "ps2stream")])
def test_reported_statistics_rebalance_exactly_and_a_rerun_decides_the_same(method, policy, tmp_path):
    """The rebalancer decides from the reports after every batch: units move, the job stays
    exact after every batch; a new driver deciding a batch again, with its state lost and the
    reports already out of the rows, takes the recorded decision (from ``stats-<b>.pkl``)."""
    from skype.dskype.rebalancing import attach, rebalance_dir

    pipe, inputs, settings = _pipeline(tmp_path, method, policy, DRIFT)
    rebalancer = attach(pipe.plan, policy, inputs)[0]
    assert rebalancer.source == "reports" and rebalancer.inputs is None
    want = centralized_by_batch(inputs, settings.window.centralized(), BATCH)
    decisions, redone = [], None
    for b in range(len(want)):
        got = pipe.step()
        assert got == want[b], f"{method}/{policy} batch {b}: {first_difference(got, want[b])}"
        rows = pipe.metrics[-1]
        reported = sum("load_stats" in m for m in rows)
        decisions.append(rebalancer.after_batch(b, rows))
        assert reported == 3 and all("load_stats" not in m for m in rows)  # taken out of the metrics file
        # hand-over files stay until the batch that put their version in force is committed
        for path in rebalancer.directory.glob("handover-*.pkl"):
            version = int(path.name.split("-")[1])
            decided = next(d["batch"] for d in decisions if d.get("version") == version)
            assert decided + 2 >= b, f"batch {b}: {path.name} kept after its switch was committed"
        if redone is None and decisions[-1].get("version") is not None:
            # a lost commit after the decision: a new driver, the batch's state gone, its rows
            # without the reports (taken by the first attempt): the statistics file decides
            (rebalancer.directory / f"state-{b:08d}.pkl").unlink()
            rebalancer = attach(pipe.plan, policy, inputs)[0]
            redone = rebalancer.after_batch(b, rows)
            assert redone["plan"] == decisions[-1]["plan"] and redone["version"] == decisions[-1]["version"]
    assert pipe.final_results() == want[-1]
    assert redone is not None
    # a batch not decided yet whose rows lack a partition's report: refused, not folded partially
    from skype.errors import OperationalError

    with pytest.raises(OperationalError) as err:
        rebalancer._batch_stats(len(want), {1: "x", 2: "x"}, 3)
    assert err.value.code == "E067" and "[0]" in str(err.value)
    directory = rebalance_dir(pipe.plan.run_dir, method)
    versions = sorted(p.name for p in directory.glob("version-*.pkl"))
    handed = sum(m.get("handover_in", 0) for ms in pipe.metrics for m in ms if m["stage"] == "partition")
    assert len(versions) > 1 and handed > 0
    switched = {d["version"] for d in decisions if d.get("version") is not None and d["batch"] + 2 < len(want)}
    assert switched
    rebalancer.after_batch(len(want), [])  # one more (idle) batch: every earlier batch is committed
    assert not any(any(directory.glob(f"handover-{v:06d}-*.pkl")) for v in switched)


def test_spark_rebalancing_over_stream_directories_from_reports(spark, tmp_path):
    """On Spark, agrid with Tornado's policy over stream directories the driver did not stage
    (``--messages-dir``/``--commands-dir``: an open stream, E063 before), stopped after a batch
    and resumed from the run directory: the statistics come from the partitions' reports, units
    move, and the events folded after every batch and the final results equal the centralized
    engine's."""
    import json

    from spark_fixtures import fold_events_by_batch, results_of
    from test_spark_rebalance import DRIFT_BATCH, _distributed, _events

    from skype.dskype.staging import stage_inputs
    from skype.run import main

    central = tmp_path / "central.jsonl"
    assert main(["simulate", *DRIFT, "--results-out", str(central)]) == 0
    inputs = load_inputs(vars(build_parser().parse_args(["simulate", *DRIFT])))
    want = centralized_by_batch(inputs, {"window": 400}, DRIFT_BATCH)
    streams = tmp_path / "in"
    stage_inputs(inputs, streams / "messages", streams / "commands", file_records=DRIFT_BATCH)
    run_dir = tmp_path / "run"
    args = ("--method", "agrid", "--rebalance", "tornado", "--partitions", 3,
            "--messages-dir", streams / "messages", "--commands-dir", streams / "commands")
    first = _distributed(spark, run_dir, *args, "--stop-after-batches", 1)  # stopped, then resumed
    assert first["stopped_early"] and sorted((run_dir / "rebalance" / "agrid").glob("state-*.pkl"))
    metrics = _distributed(spark, run_dir, *args)
    assert metrics["resumed"] and not metrics["stopped_early"]
    assert metrics["moves"] >= 1 and metrics["subscriptions_moved"] > 0
    assert any(m["applied_in_batch"] is not None for m in metrics["rebalance_moves"])
    assert sorted(p.name for p in (run_dir / "rebalance" / "agrid").glob("stats-*.pkl"))  # from the reports
    got = fold_events_by_batch(_events(run_dir, "agrid"), len(want))
    for b, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"batch {b}: {first_difference(g, w)}"
    assert results_of(run_dir / "results.jsonl") == results_of(central)
    record = json.loads(sorted((run_dir / "metrics").glob("batch-*.json"))[0].read_text())
    parts = [m for m in record["stages"] if m["stage"] == "partition"]
    assert all("load_stats" not in m and m["load_stats_bytes"] > 0 for m in parts)
