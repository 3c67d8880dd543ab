"""The streaming job on Spark (local[2], one shared session): every method exact against the
centralized engine after every micro-batch, count and time windows, subscribes and unsubscribes
mid-stream; a run stopped mid-stream and resumed from its checkpoint; the grouping-key hash."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pyspark")

from spark_fixtures import (  # noqa: E402
    METHODS, centralized_by_batch, events_workload, first_difference, fold_events_by_batch, oracle_by_batch,
    oracle_check, results_of,
)

from skype.simulate import load_inputs  # noqa: E402
from skype.run import build_parser, main  # noqa: E402

pytestmark = pytest.mark.spark

BATCH = 550


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    return events_workload(tmp_path_factory.mktemp("spark-jobs") / "events.jsonl")


def _window_args(workload, kind: str) -> list[str]:
    if kind == "count":
        return ["--window", "500"]
    inputs = load_inputs(vars(build_parser().parse_args(["simulate", "--events", str(workload)])))
    t = inputs.messages().t
    return ["--window-seconds", str(float(t[300] - t[0]))]


def _distributed(spark, workload, run_dir, window_args, *extra):
    from skype.spark.job import run_options

    args = build_parser().parse_args(["distributed", "--events", str(workload), *window_args,
                                      "--batch-size", str(BATCH), "--checkpoint", str(run_dir),
                                      "--results-out", str(run_dir / "results.jsonl"),
                                      "--metrics-out", str(run_dir / "metrics.json"), *map(str, extra)])
    run_options(vars(args), spark)
    return json.loads((run_dir / "metrics.json").read_text())


def _centralized(workload, window_args, path):
    assert main(["simulate", "--events", str(workload), *window_args, "--results-out", str(path)]) == 0
    return results_of(path)


def _events(spark, run_dir, method):
    files = sorted(str(p) for p in (run_dir / "events" / method).glob("batch-*.parquet"))
    return [r.asDict(recursive=True) for r in spark.read.parquet(*files).collect()]


def test_spark_grouping_keys_match_spark_hash(spark):
    from skype.dskype.keys import spark_hash_long

    values = [0, 1, -1, 2, 7, 123456789012, -(2**63), 2**63 - 1]
    row = spark.sql("SELECT " + ", ".join(f"hash(CAST({v} AS BIGINT))" for v in values)).collect()[0]
    assert list(row) == [spark_hash_long(v) for v in values]


@pytest.mark.parametrize("window_kind", ["count", "time"])
def test_spark_job_every_method_exact_after_every_batch(spark, workload, tmp_path, window_kind):
    """One run evaluates all six methods side by side (one pipeline each) over a stream with
    subscribes, unsubscribes and a re-subscribe mid-stream; each method's events, folded batch by
    batch, equal the centralized engine's results after the same prefix, and its final results
    file, written from the stateful stages' own top-k, equals ``simulate --results-out``."""
    window_args = _window_args(workload, window_kind)
    run_dir = tmp_path / "run"
    report = _distributed(spark, workload, run_dir, window_args, "--method", "all", "--partitions", 2)
    want_final = _centralized(workload, window_args, tmp_path / "central.jsonl")
    inputs = load_inputs(vars(build_parser().parse_args(["simulate", "--events", str(workload), *window_args])))
    window = {"window": 500} if window_kind == "count" else {"window_seconds": float(window_args[1])}
    want = centralized_by_batch(inputs, window, BATCH)
    assert sum(len(v) for v in want[-1].values()) > 100
    for metrics in report["runs"]:
        method = metrics["method"]
        got_final = results_of(run_dir / f"results.{method}.jsonl")
        assert got_final == want_final, f"{method}: {first_difference(got_final, want_final)}"
        assert metrics["results_from"] == "stages"  # the stateful stages wrote them, no driver fold
        got = fold_events_by_batch(_events(spark, run_dir, method), metrics["batches"])
        assert len(got) == len(want) == metrics["batches"]
        for b, (g, w) in enumerate(zip(got, want)):
            assert g == w, f"{method} batch {b}: {first_difference(g, w)}"
        assert metrics["messages"] == inputs.num_messages
        assert metrics["communication_per_message"] >= 1.0 and metrics["replication_ratio"] >= 1.0
    assert sorted(m["method"] for m in report["runs"]) == sorted(METHODS)
    # and every method's final results against the independent oracle (tests/oracle.py)
    *_, (oracle, live) = oracle_by_batch(inputs, window, BATCH)
    for method in METHODS:
        oracle_check(oracle, results_of(run_dir / f"results.{method}.jsonl"), live, f"{method} final")


def test_spark_job_resumes_from_checkpoint_with_equal_results(spark, workload, tmp_path):
    """Stopped after two batches (the third interrupted mid-flight), then restarted from the
    same run directory: the events of every batch and the final results equal an uninterrupted
    run's, and the restarted partitions rebuild their engines from the state store."""
    from skype.errors import InputError

    window_args = ["--window", "500"]
    run_dir = tmp_path / "run"
    first = _distributed(spark, workload, run_dir, window_args, "--method", "keyword", "--partitions", 3,
                         "--stop-after-batches", 2)
    inputs = load_inputs(vars(build_parser().parse_args(["simulate", "--events", str(workload), *window_args])))
    want = centralized_by_batch(inputs, {"window": 500}, BATCH)
    assert first["stopped_early"] and first["batches"] < len(want)
    with pytest.raises(InputError, match="E028"):  # a run directory keeps its settings
        _distributed(spark, workload, run_dir, window_args, "--method", "prefix", "--partitions", 3)
    second = _distributed(spark, workload, run_dir, window_args, "--method", "keyword", "--partitions", 3)
    assert second["resumed"] and not second["stopped_early"]
    assert second["cache_rebuilds"] >= 3  # new engine hosts: every partition rebuilt from durable state
    want_final = _centralized(workload, window_args, tmp_path / "central.jsonl")
    got_final = results_of(run_dir / "results.jsonl")
    assert got_final == want_final, first_difference(got_final, want_final)
    got = fold_events_by_batch(_events(spark, run_dir, "keyword"), len(want))
    for b, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"batch {b}: {first_difference(g, w)}"


def test_spark_kafka_records_become_stream_events(spark):
    """Kafka's row layout (value bytes, offset) -> stream events: seq / cseq from the offset."""
    from skype.spark.sources import kafka_to_events

    messages = spark.createDataFrame(
        [(json.dumps({"id": 7, "x": 1.0, "y": 2.0, "t": 3.5, "term_ids": [1, 4], "weights": [0.6, 0.8]}).encode(), 41)],
        "value binary, offset long")
    row = kafka_to_events(messages, "messages").collect()[0]
    assert (row.kind, row.seq, row.at, row.id, row.t, row.term_ids, row.weights) == (0, 41, None, 7, 3.5, [1, 4], [0.6, 0.8])
    commands = spark.createDataFrame(
        [(json.dumps({"op": "sub", "at": 5, "id": 3, "x": 0.0, "y": 0.0, "k": 2, "alpha": 0.5, "term_ids": [1],
                      "weights": [1.0]}).encode(), 0),
         (json.dumps({"op": "unsub", "id": 3}).encode(), 1)], "value binary, offset long")
    rows = kafka_to_events(commands, "commands").orderBy("seq").collect()
    assert [(r.kind, r.seq, r.at, r.id, r.k) for r in rows] == [(1, 0, 5, 3, 2), (2, 1, None, 3, None)]


@pytest.mark.spark_lane  # a second driver JVM: the Spark lane (the default run resumes from a checkpoint above)
def test_spark_job_survives_a_driver_sigkill_and_ends_exact(spark, workload, tmp_path):
    """The driver (its Python process, its JVM, the local executors and engine hosts: one process
    group) is SIGKILLed mid-stream, after its first batch committed; the run restarted from the
    same directory (larger batches, so fewer of them) ends with results equal to the centralized
    engine's."""
    import os
    import signal
    import subprocess
    import sys
    import time

    run_dir = tmp_path / "run"
    args = ["--events", str(workload), "--window", "500", "--method", "keyword", "--partitions", "2"]
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    proc = subprocess.Popen([sys.executable, "-m", "skype.run", "distributed", *args, "--batch-size", "150",
                             "--master", "local[2]", "--checkpoint", str(run_dir)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    try:
        while not (run_dir / "metrics" / "batch-00000000.json").exists():
            assert proc.poll() is None, "the first run ended before it could be killed"
            assert time.monotonic() < deadline, "the first run made no progress"
            time.sleep(0.2)
        assert proc.poll() is None  # mid-stream: 11 batches in all
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    killed_at = len(list((run_dir / "metrics").glob("batch-*.json")))
    from skype.spark.job import run_options

    run_options(vars(build_parser().parse_args(
        ["distributed", *args, "--batch-size", str(BATCH), "--checkpoint", str(run_dir),
         "--results-out", str(run_dir / "results.jsonl"), "--metrics-out", str(run_dir / "metrics.json")])), spark)
    second = json.loads((run_dir / "metrics.json").read_text())
    assert second["resumed"] and second["cache_rebuilds"] >= 2 and killed_at < 11
    want_final = _centralized(workload, ["--window", "500"], tmp_path / "central.jsonl")
    got_final = results_of(run_dir / "results.jsonl")
    assert got_final == want_final, first_difference(got_final, want_final)


def test_spark_job_kafka_sink_sends_exact_events_once_per_batch(spark, workload, tmp_path, monkeypatch):
    """``--sink kafka``: the records Spark's Kafka writer is handed (captured here: no broker in
    CI), folded batch by batch, equal the centralized engine after every batch; the final results
    come from the stages; the stateful stage runs once per batch (the output is persisted between
    the write and the metrics collect, so every steady batch finds its engine cached)."""
    from skype.spark import sink

    sent: list[tuple[str, str, bytes, bytes]] = []

    def capture(records, bootstrap, topic):
        sent.extend((bootstrap, topic, bytes(r.key), bytes(r.value)) for r in records.collect())

    monkeypatch.setattr(sink, "write_kafka", capture)
    run_dir = tmp_path / "run"
    metrics = _distributed(spark, workload, run_dir, ["--window", "500"], "--method", "location", "--partitions", 2,
                           "--sink", "kafka", "--kafka-bootstrap", "broker:9092", "--events-topic", "skype-events")
    inputs = load_inputs(vars(build_parser().parse_args(["simulate", "--events", str(workload), "--window", "500"])))
    want = centralized_by_batch(inputs, {"window": 500}, BATCH)
    assert {(b, t) for b, t, _, _ in sent} == {("broker:9092", "skype-events")}
    events = [json.loads(value) for _, _, _, value in sent]
    assert all(key == f"location:{e['sub']}".encode() for (_, _, key, _), e in zip(sent, events))
    assert len(events) == metrics["result_events"] > 0
    got = fold_events_by_batch(events, metrics["batches"])
    for b, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"batch {b}: {first_difference(g, w)}"
    want_final = _centralized(workload, ["--window", "500"], tmp_path / "central.jsonl")
    assert results_of(run_dir / "results.jsonl") == want_final and metrics["results_from"] == "stages"
    assert metrics["cache_hit_rate_steady"] == 1.0
    assert not (run_dir / "events" / "location").exists() or not any((run_dir / "events" / "location").iterdir())
