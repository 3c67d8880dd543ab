"""Live rebalancing (issue 13, deliverable 5; issue 25, deliverable 2): adaptive methods on the
streaming job, each command sent to its record's owner only, the records and pending commands of
the units that move transferred through named hand-over files (written by the batch that
announces a version, read at the start of the next), exact after every batch.

JVM-free (the job's own code, ``spark_fixtures.LocalPipeline``): forced moves with subscribes,
unsubscribes and a re-subscribe mid-stream, a lost cache and a lost commit in the middle of a
hand-over; each policy decided batch by batch by the driver's rebalancer (``never`` keeps the
build's tables); a driver restart between a decision and its hand-over.  On Spark (the shared
session, one drift run stopped and resumed): Tornado's policy on agrid and PS2Stream's on kdt
really move units, exact after every batch, through a restart between the decision of a move and
its hand-over."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("pyspark")

from spark_fixtures import (  # noqa: E402
    LocalPipeline, centralized_by_batch, events_workload, first_difference, fold_events_by_batch, results_of, rotate_owners,
)

from skype.simulate import load_inputs  # noqa: E402
from skype.run import build_parser, main  # noqa: E402

pytestmark = pytest.mark.spark

BATCH = 400
DRIFT = ["--num-subs", "300", "--num-messages", "1200", "--drift", "hotspot", "--drift-start", "0",
         "--window", "400"]
DRIFT_BATCH = 400


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    return events_workload(tmp_path_factory.mktemp("spark-rebalance") / "events.jsonl")


def _settings(method, inputs, window_args, partitions=3, batch=BATCH):
    from skype.dskype.plan import RunSettings

    args = build_parser().parse_args(["distributed", "--method", method, "--partitions", str(partitions),
                                      "--batch-size", str(batch), *window_args])
    return RunSettings.from_options(vars(args), inputs.bounds)


HANDOVER_BATCH = 200


@pytest.mark.parametrize("method,window_kind,compact", [("agrid", "count", False), ("kdt", "count", True),
                                                        ("agrid", "time", False)])
def test_spark_handover_exact_through_forced_moves_cache_loss_and_lost_commit(method, window_kind, compact, workload,
                                                                             tmp_path, monkeypatch):
    """Every unit changes owner twice mid-stream, between batches that subscribe, unsubscribe and
    re-subscribe.  A version written before batch b is announced by b (each old owner writes what
    it loses) and comes into force at b+1's start (each new owner reads it).  The cache is lost
    right after the second version is written, and a partition's commit is lost in the batch that
    announces it and in the batch that applies it.  The delivered top-k equals the centralized
    engine's after every batch (count and time windows); after every batch each partition hosts
    exactly the live subscriptions the table in force gives it, and a partition rebuilt from its
    durable state alone hosts the same.  With ``compact`` the logs are compacted without a floor (a
    switch's entry counts: the snapshot after a switch records the version in force)."""
    if compact:
        from skype.dskype import durable

        monkeypatch.setattr(durable, "MIN_SNAPSHOT_BYTES", 0)
    from skype.spark.hosts import InProcessHosts
    from skype.dskype.rebalancing import attach, rebalance_dir

    window_args = ["--window", "500"]
    if window_kind == "time":
        t = load_inputs(vars(build_parser().parse_args(["simulate", "--events", str(workload)]))).messages().t
        window_args = ["--window-seconds", str(float(t[300] - t[0]))]
    inputs = load_inputs(vars(build_parser().parse_args(["simulate", "--events", str(workload), *window_args])))
    settings = _settings(method, inputs, window_args, batch=HANDOVER_BATCH)
    want = centralized_by_batch(inputs, settings.window.centralized(), HANDOVER_BATCH)
    pipe = LocalPipeline(tmp_path / "run", settings, inputs)
    attach(pipe.plan, "never", inputs)
    directory = rebalance_dir(pipe.plan.run_dir, method)
    retried: list[int] = []

    def lose_commit(key, rows):
        if pipe.batch in (5, 6) and len(retried) < pipe.batch - 4:
            saved = pipe.snapshot_state(key)
            pipe.partitions.test(key, rows)  # the host applies the batch and its hand-over ...
            pipe.restore_state(key, saved)  # ... but the state store never commits it
            retried.append(key)

    in_force = 0
    for b in range(len(want)):
        if b == 2:
            rotate_owners(directory, 1, pipe.position, 1)
        if b == 5:
            rotate_owners(directory, 2, pipe.position, 2)
            InProcessHosts.clear()
        got = pipe.step(before_partition=lose_commit)
        assert got == want[b], f"{method} batch {b}: {first_difference(got, want[b])}"
        in_force = {3: 1, 6: 2}.get(b, in_force)
        check_ownership(pipe, directory, set(want[b]), in_force)
    assert len(want) == 8 and sum(len(v) for v in want[-1].values()) > 100
    assert pipe.final_results() == want[-1]
    parts = [m for ms in pipe.metrics for m in ms if m["stage"] == "partition"]
    handed = {b: sum(m["handover_in"] for m in pipe.metrics[b] if m["stage"] == "partition") for b in range(8)}
    assert handed[3] > 50 and handed[6] > 50 and sum(handed.values()) == handed[3] + handed[6]
    assert sum(m["handover_in"] for m in parts) == sum(m["handover_out"] for m in parts)
    assert sum(m["handover_written"] for m in pipe.metrics[2] if m["stage"] == "partition") == handed[3]
    assert max(m["hosted"] for m in parts) < len(want[-1])  # one owner each, not every partition
    assert any(m["snapshot"] for m in parts) == compact
    if compact:  # the switches' own entries are compacted too: the snapshot records the version in force
        assert any(m["snapshot"] for b in range(3, 8) for m in pipe.metrics[b] if m["stage"] == "partition")


def test_spark_handover_a_stamp_that_jumps_versions_puts_the_newest_in_force(workload, tmp_path):
    """Two versions written between two batch plannings: the batch announces the newest, the old
    owners write their files for it only, and the next batch puts it in force (the first is never
    in force); exact after every batch, hosted == owned."""
    from skype.dskype.handover import handover_path
    from skype.dskype.rebalancing import attach, rebalance_dir

    inputs = load_inputs(vars(build_parser().parse_args(["simulate", "--events", str(workload), "--window", "500"])))
    settings = _settings("kdt", inputs, ["--window", "500"], batch=HANDOVER_BATCH)
    want = centralized_by_batch(inputs, settings.window.centralized(), HANDOVER_BATCH)
    pipe = LocalPipeline(tmp_path / "run", settings, inputs)
    attach(pipe.plan, "never", inputs)
    directory = rebalance_dir(pipe.plan.run_dir, "kdt")
    for b in range(len(want)):
        if b == 2:
            rotate_owners(directory, 1, pipe.position, 1)
            rotate_owners(directory, 2, pipe.position, 2)
        got = pipe.step()
        assert got == want[b], f"batch {b}: {first_difference(got, want[b])}"
        check_ownership(pipe, directory, set(want[b]), 2 if b >= 3 else 0)
    assert not handover_path(directory, 1, 0).exists() and handover_path(directory, 2, 0).exists()
    assert sum(m["handover_in"] for m in pipe.metrics[3] if m["stage"] == "partition") > 50


def check_ownership(pipe, directory, live: set[int], version: int) -> None:
    """Each partition's engine hosts exactly the live subscriptions that table ``version`` places on
    it, its pending commands are its own, and its durable state, rebuilt alone, hosts the same
    (a ledger of every record, in memory or in the log, fails this)."""
    from skype.spark.hosts import InProcessHosts
    from skype.dskype.handover import VersionLog, owner_routed
    from skype.dskype.partition import PartitionCore
    from skype.dskype.durable import join_pieces
    from skype.dskype.durable import Meta

    locator = VersionLog(str(directory)).upto(version)[version].locator
    seen: set[int] = set()
    logged = 0
    from skype.spark.runtime import partition_configs

    for key, config in sorted(partition_configs(pipe.plan).items()):
        core = next(o for (stage, k), o in _hosted_objects(InProcessHosts).items() if stage == "partition" and k == key)
        hosted = sorted(core.hosted.rows)
        assert core.handover.applied == version
        if hosted:
            owners = locator.home_partitions(core.hosted.batch(hosted))
            assert (owners == config.partition).all(), f"partition {config.partition} hosts a record it does not own"
        rows = owner_routed(core.pending)
        if rows.any():
            assert (locator.home_partitions(core.pending.subs.take(np.flatnonzero(rows))) == config.partition).all()
        seen |= set(hosted)
        meta = Meta.from_blob(pipe.partitions.peekValueState("meta", key)[0])
        log = {int(k[0]): bytes(v[0]) for k, v in pipe.partitions.peekMapState("log", key).items()}
        rebuilt = PartitionCore.rebuild(config, meta.hwm_seq, meta.hwm_t, join_pieces(meta.log_ids, log), [])
        assert sorted(rebuilt.hosted.rows) == hosted and rebuilt.handover.applied == version
        assert len(rebuilt.pending) == len(core.pending)
        logged += sum(_logged_subscribes(entry) for entry in join_pieces(meta.log_ids, log))
    assert seen == live, "every live subscription is hosted, once"
    # each subscribe is logged where it is owned, and once more by each new owner (a ledger logs P copies)
    received = sum(m["handover_in"] + m["handover_pending_in"] for ms in pipe.metrics for m in ms
                   if m["stage"] == "partition")
    subscribes = int((pipe.commands.column("kind").to_numpy() == 1).sum())
    assert logged <= subscribes + received, (logged, subscribes, received)


def _logged_subscribes(entry: bytes) -> int:
    from skype.dskype import codec
    from skype.dskype.codec import OP_SUB

    cols = codec.unpack(entry)
    if "switch" in cols:
        return len(cols["rec_ids"]) + int((cols["pen_op"] == OP_SUB).sum())
    return int((cols["op"] == OP_SUB).sum()) if "op" in cols else 0


def _hosted_objects(hosts) -> dict:
    """(stage, key) -> the live core of each object an in-process host keeps."""
    return {ident: entry[2] for ident, entry in hosts._registry.objects.items()}


def _distributed(spark, run_dir, *extra):
    from skype.spark.job import run_options

    args = build_parser().parse_args(["distributed", *DRIFT, "--sample-size", "300", "--batch-size", str(DRIFT_BATCH),
                                      "--checkpoint", str(run_dir), "--results-out", str(run_dir / "results.jsonl"),
                                      "--metrics-out", str(run_dir / "metrics.json"), *map(str, extra)])
    run_options(vars(args), spark)
    return json.loads((run_dir / "metrics.json").read_text())


def _events(run_dir, method):
    """The event files, read without a Spark job."""
    import pyarrow.parquet as pq

    return [row for p in sorted((run_dir / "events" / method).glob("batch-*.parquet"))
            for row in pq.read_table(p).to_pylist()]


@pytest.fixture(scope="module")
def drift_reference(tmp_path_factory):
    """The centralized engine on the drift workload: after every batch, and its final results."""
    path = tmp_path_factory.mktemp("drift-central") / "central.jsonl"
    assert main(["simulate", *DRIFT, "--results-out", str(path)]) == 0
    inputs = load_inputs(vars(build_parser().parse_args(["simulate", *DRIFT])))
    return centralized_by_batch(inputs, {"window": 400}, DRIFT_BATCH), results_of(path)


def _check_exact(run_dir, method, metrics, reference):
    want, want_final = reference
    got_final = results_of(run_dir / (f"results.{method}.jsonl" if "runs" in metrics else "results.jsonl"))
    assert got_final == want_final, f"{method}: {first_difference(got_final, want_final)}"
    got = fold_events_by_batch(_events(run_dir, method), len(want))
    for b, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"{method} batch {b}: {first_difference(g, w)}"


def test_spark_live_rebalancing_moves_and_stays_exact_through_a_restart(spark, tmp_path, drift_reference):
    """On Spark, agrid with Tornado's policy and kdt with PS2Stream's side by side (``--rebalance
    paper``) on a moving hot spot, stopped right after the batch whose decisions wrote new table
    versions (their hand-overs not yet applied) and resumed from the run directory: both policies
    moved units, the partitions handed subscriptions over two batches after each decision, and
    each method's events folded after every batch and its final results equal the centralized
    engine's.  (The restart costs no measurable time: the resumed query runs the batches the
    first one did not.)"""
    run_dir = tmp_path / "run"
    args = ("--method", "agrid,kdt", "--rebalance", "paper", "--partitions", 3)
    first = _distributed(spark, run_dir, *args, "--stop-after-batches", 1)
    assert all(run["stopped_early"] for run in first["runs"])
    stopped_after = first["runs"][0]["batches"] - 1
    for method in ("agrid", "kdt"):
        decisions = sorted((run_dir / "rebalance" / method).glob("decision-*.json"))
        last = json.loads(decisions[-1].read_text())
        assert last["batch"] == stopped_after and last["version"] is not None  # decided, applied after the restart
    report = _distributed(spark, run_dir, *args)
    for run in report["runs"]:
        assert run["resumed"] and not run["stopped_early"]
        assert run["rebalance_policy"] == {"agrid": "tornado", "kdt": "ps2stream"}[run["method"]]
        assert run["moves"] >= 1 and run["subscriptions_moved"] > 0 and run["state_bytes_moved"] > 0
        assert any(m["decided_after_batch"] == stopped_after for m in run["rebalance_moves"])
        for move in run["rebalance_moves"]:  # announced by the next batch, applied by the one after
            if move["decided_after_batch"] + 2 >= len(drift_reference[0]):  # decided too late for the stream
                assert move["applied_in_batch"] is None
                continue
            assert move["applied_in_batch"] == move["decided_after_batch"] + 2
            assert move["subscriptions_handed_over"] > 0 and move["latency_spike"] is not None
        assert any(m["applied_in_batch"] is not None for m in run["rebalance_moves"])
        _check_exact(run_dir, run["method"], report, drift_reference)


def test_spark_pipeline_driver_restart_between_decision_and_handover(tmp_path, drift_reference):
    """The driver stops right after the batch whose decision wrote a new table version: a new
    driver (a rebalancer with nothing in memory) re-runs that batch's sink and keeps its decision,
    every engine is lost, and the batch that announces the version (the old owners write what
    they lose) and the one that applies it (the new owners read it) each lose a partition's
    commit once.  Exact after every batch, and the hand-over happened after the restart."""
    from skype.dskype.plan import RunSettings
    from skype.spark.hosts import InProcessHosts
    from skype.dskype.rebalancing import attach, rebalance_dir

    args = build_parser().parse_args(["distributed", *DRIFT, "--sample-size", "300", "--method", "agrid",
                                      "--partitions", "3", "--batch-size", str(DRIFT_BATCH), "--rebalance", "tornado"])
    inputs = load_inputs(vars(args))
    pipe = LocalPipeline(tmp_path / "run", RunSettings.from_options(vars(args), inputs.bounds), inputs)
    first_driver = attach(pipe.plan, "tornado", inputs)[0]
    want, want_final = drift_reference
    assert pipe.step() == want[0]
    decided = first_driver.after_batch(0, pipe.metrics[-1])
    assert decided["version"] == 1 and decided["effective"] == DRIFT_BATCH
    InProcessHosts.clear()  # the restart: new engine hosts, a new driver
    rebalancer = attach(pipe.plan, "tornado", inputs)[0]
    assert rebalancer.after_batch(0, pipe.metrics[-1]) == decided  # Spark re-runs the uncommitted sink
    retried: list[int] = []

    def lose_commit(key, rows):  # once in the batch that announces the version, once in the one that applies it
        if pipe.batch in (1, 2) and len(retried) < pipe.batch:
            saved = pipe.snapshot_state(key)
            pipe.partitions.test(key, rows)
            pipe.restore_state(key, saved)
            retried.append(key)

    for b in range(1, len(want)):
        got = pipe.step(before_partition=lose_commit)
        assert got == want[b], f"batch {b}: {first_difference(got, want[b])}"
        rebalancer.after_batch(b, pipe.metrics[-1])
    assert pipe.final_results() == want_final and len(retried) == 2
    assert sum(m["handover_written"] for m in pipe.metrics[1] if m["stage"] == "partition") > 0
    assert sum(m["handover_in"] for m in pipe.metrics[2] if m["stage"] == "partition") > 0
    versions = sorted(p.name for p in rebalance_dir(pipe.plan.run_dir, "agrid").glob("version-*.pkl"))
    assert versions[:2] == ["version-000000.pkl", "version-000001.pkl"]


@pytest.mark.parametrize("method,policy", [("agrid", "tornado"), ("kdt", "ps2stream"), ("qt", "ps2stream"), ("agrid", "never")])
def test_spark_pipeline_with_policy_exact_after_every_batch(method, policy, tmp_path, drift_reference):
    """The job's own code (no JVM) with the driver's rebalancer deciding after every batch, as
    the sink does: PS2Stream's policy on kdt and qt, exact after
    every batch; ``never`` keeps the build's tables (version 0 only) and hands nothing over."""
    from skype.dskype.rebalancing import attach, rebalance_dir

    args = build_parser().parse_args(["distributed", *DRIFT, "--sample-size", "300", "--method", method,
                                      "--partitions", "3", "--batch-size", str(DRIFT_BATCH), "--rebalance", policy])
    inputs = load_inputs(vars(args))
    from skype.dskype.plan import RunSettings

    settings = RunSettings.from_options(vars(args), inputs.bounds)
    pipe = LocalPipeline(tmp_path / "run", settings, inputs)
    rebalancer = attach(pipe.plan, policy, inputs)[0]
    want, want_final = drift_reference
    for b in range(len(want)):
        got = pipe.step()
        assert got == want[b], f"{method}/{policy} batch {b}: {first_difference(got, want[b])}"
        rebalancer.after_batch(b, pipe.metrics[-1])
    assert pipe.final_results() == want_final
    handed = sum(m.get("handover_in", 0) for ms in pipe.metrics for m in ms if m["stage"] == "partition")
    versions = sorted(p.name for p in rebalance_dir(pipe.plan.run_dir, method).glob("version-*.pkl"))
    if policy == "never":
        assert versions == ["version-000000.pkl"] and handed == 0
    else:
        assert len(versions) > 1 and handed > 0


@pytest.mark.parametrize("method,policy", [("qt", "sstd"), ("aqwa", "aqwa")])
def test_spark_pipeline_sstd_and_aqwa_policies_exact_on_injected_drift(method, policy, tmp_path):
    """SSTD's PM/FM/FG on qt and AQWA's split + merge on aqwa (a new tree in each version),
    decided by the driver's rebalancer after every batch of SSTD's injected objects and queries
    (subscriptions arriving mid-stream): units move and the job stays exact after every batch."""
    from skype.dskype.plan import RunSettings
    from skype.dskype.rebalancing import attach

    args = build_parser().parse_args(["distributed", "--num-subs", "600", "--num-messages", "2000", "--drift", "inject",
                                      "--drift-start", "0", "--window", "500", "--sample-size", "500", "--method",
                                      method, "--partitions", "4", "--batch-size", "250", "--rebalance", policy])
    inputs = load_inputs(vars(args))
    settings = RunSettings.from_options(vars(args), inputs.bounds)
    want = centralized_by_batch(inputs, settings.window.centralized(), 250)
    pipe = LocalPipeline(tmp_path / "run", settings, inputs)
    rebalancer = attach(pipe.plan, policy, inputs)[0]
    for b in range(len(want)):
        got = pipe.step()
        assert got == want[b], f"{method}/{policy} batch {b}: {first_difference(got, want[b])}"
        rebalancer.after_batch(b, pipe.metrics[-1])
    assert rebalancer.state["versions"] > 1
    assert sum(m.get("handover_in", 0) for ms in pipe.metrics for m in ms if m["stage"] == "partition") > 0


@pytest.mark.parametrize("extra,message", [
    (["--method", "location", "--rebalance", "tornado"], "'location' has none"),
    (["--method", "agrid", "--source", "kafka", "--kafka-bootstrap", "b:9092", "--messages-topic", "m",
      "--commands-topic", "c"], "needs the stream-files source"),
])
def test_spark_distributed_refuses_rebalancing_it_cannot_run(extra, message, tmp_path):
    """A policy on a static method and an adaptive method on a source that does not carry the
    table versions (Kafka) fail with E063 before any session starts."""
    from skype.spark.job import run_options
    from skype.errors import InputError

    args = build_parser().parse_args(["distributed", "--num-subs", "20", "--num-messages", "20", "--checkpoint",
                                      str(tmp_path / "run"), *extra])
    with pytest.raises(InputError, match="E063") as err:
        run_options(vars(args), spark=object())
    assert message in str(err.value)


def test_measured_loads_replace_the_model_in_the_policies_plans():
    """``with_partition_loads``: the planned loads become the measured ones (the model's shape kept
    inside each partition); a partition measured hot though the model calls it balanced is the one
    the policies unload; bad loads are refused (E023)."""
    from skype.data import make_workload
    from skype.errors import InputError
    from skype.partitioning import build_distribution
    from skype.partitioning.rebalance import decide, snapshot
    from skype.partitioning.rebalance.base import LoadModel
    from skype.partitioning.rebalance.measured import with_partition_loads

    w = make_workload("tweets", num_subs=600, num_messages=1200, seed=3)
    dist = build_distribution("agrid", 4, w.subscriptions, w.messages, w.vocabulary, grid=(16, 8))
    dist.route_messages(w.messages)
    dist.fold_statistics(0.0)
    snap = snapshot(dist)
    model = LoadModel(snap)
    hot = int(np.argmin(model.loads))  # the model's lightest partition, measured as the heaviest
    loads = np.ones(4)
    loads[hot] = 5.0
    measured = LoadModel(with_partition_loads(snap, loads))
    assert np.allclose(measured.loads, loads) and measured.imbalance() == pytest.approx(2.5)
    assert np.array_equal(snapshot(dist)["partition_messages"], snap["partition_messages"])  # a copy
    for policy in ("tornado", "ps2stream"):
        plan = decide(policy, dist, partition_loads=loads)
        assert not plan.empty and hot in set(plan.sources.tolist()), (policy, plan.operations)
        assert plan.imbalance_after < plan.imbalance_before == pytest.approx(2.5)
    assert decide("tornado", dist, partition_loads=np.ones(4)).empty  # measured balanced: no move
    for bad in ([1.0, 2.0], [1.0, -1.0, 1.0, 1.0], [np.nan, 1.0, 1.0, 1.0]):
        with pytest.raises(InputError) as err:
            with_partition_loads(snap, bad)
        assert err.value.code == "E023"


def test_spark_pipeline_measured_loads_exact_and_a_restart_keeps_the_decision(tmp_path, drift_reference):
    """``--rebalance-load measured``: Tornado plans with the partitions' engine seconds (here made
    skewed: partition 0 measured five times the others), moves, and stays exact after every batch;
    a driver that re-runs a decided batch's sink with other timings takes the recorded loads and
    the same decision."""
    import copy

    from skype.dskype.plan import RunSettings
    from skype.dskype.rebalancing import attach

    args = build_parser().parse_args(["distributed", *DRIFT, "--sample-size", "300", "--method", "agrid",
                                      "--partitions", "3", "--batch-size", str(DRIFT_BATCH), "--rebalance", "tornado",
                                      "--rebalance-load", "measured"])
    inputs = load_inputs(vars(args))
    settings = RunSettings.from_options(vars(args), inputs.bounds)
    assert settings.distribution.rebalance_load == "measured"
    pipe = LocalPipeline(tmp_path / "run", settings, inputs)
    rebalancer = attach(pipe.plan, "tornado", inputs, settings.distribution.rebalance_load)[0]

    def skewed(stages, hot):
        out = copy.deepcopy(stages)
        for m in out:
            if m["stage"] == "partition":
                m["engine_s"], m["report_s"] = (5.0 if m["partition"] == hot else 1.0), 0.0
        return out

    want, want_final = drift_reference
    decisions = []
    for b in range(len(want)):
        got = pipe.step()
        assert got == want[b], f"batch {b}: {first_difference(got, want[b])}"
        decisions.append(rebalancer.after_batch(b, skewed(pipe.metrics[-1], hot=0)))
    assert pipe.final_results() == want_final
    assert decisions[0]["measured_loads"] == [5.0, 1.0, 1.0] and decisions[0]["version"] == 1
    assert sum(m.get("handover_in", 0) for ms in pipe.metrics for m in ms if m["stage"] == "partition") > 0
    again = attach(pipe.plan, "tornado", inputs, "measured")[0]  # a new driver, other timings
    (again.directory / f"state-{0:08d}.pkl").unlink(missing_ok=True)
    redo = again.after_batch(0, skewed(pipe.metrics[0], hot=2))
    assert redo["measured_loads"] == decisions[0]["measured_loads"] and redo["plan"] == decisions[0]["plan"]
