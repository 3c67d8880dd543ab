"""Commands capped per micro-batch (``--commands-per-batch``, :func:`skype.spark.sources.plan_batch`):
the batch plan's invariants (Hypothesis, no JVM), a run whose tiny cap spreads the commands over
many batches staying exact against the centralized engine and the independent oracle, and the
memory errors of the catalogue (E130, E131)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("pyspark")

from spark_fixtures import (  # noqa: E402
    centralized_at, events_workload, first_difference, fold_events_by_batch, oracle_by_batch, oracle_check, results_of,
)

from skype.simulate import load_inputs  # noqa: E402
from skype.run import build_parser, main  # noqa: E402
from skype.spark.sources import command_positions, plan_batch  # noqa: E402


def due_by(positions) -> np.ndarray:
    pos = np.maximum(np.asarray(positions, np.int64), 0)
    return np.minimum.accumulate(pos[::-1])[::-1] if len(pos) else pos


def batches(positions, messages: int, max_messages: int | None, max_commands: int | None) -> list[tuple[int, int]]:
    """The batch ends the source plans over a finished stream, until it stops moving."""
    due = due_by(positions)
    ends, start = [], (0, 0)
    while True:
        end = plan_batch(start, (messages, len(positions)), due, max_messages, max_commands)
        if end == start:
            return ends
        ends.append(end)
        start = end


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-1, 60), max_size=40), st.integers(0, 60), st.integers(1, 12),
       st.one_of(st.none(), st.integers(1, 9)), st.booleans())
def test_batch_plan_respects_caps_and_delivers_commands_before_their_messages(positions, messages, max_messages,
                                                                            max_commands, ordered):
    """Every batch holds at most the caps, moves forward, and holds every command due before
    (or right after) its last message; the stream is consumed to its end (every command
    positioned within the messages delivered); without a cap, commands come all at once."""
    if ordered:
        positions = sorted(positions)
    ends = batches(positions, messages, max_messages, max_commands)
    prev = (0, 0)
    for m1, c1 in ends:
        assert m1 >= prev[0] and c1 >= prev[1] and (m1, c1) != prev
        assert m1 - prev[0] <= max_messages
        if max_commands is not None:
            assert c1 - prev[1] <= max_commands
        if m1 > prev[0]:  # a batch with messages: every command due up to m1 is in
            assert all(i < c1 for i, at in enumerate(positions) if at <= m1)
        prev = (m1, c1)
    assert prev[0] == messages
    assert prev[1] >= max((i + 1 for i, at in enumerate(positions) if at <= messages), default=0)
    if max_commands is None and positions:
        assert ends[0][1] == len(positions)


def test_reading_tasks_are_not_sent_the_commands_positions(tmp_path):
    import pickle

    from skype.spark.sources import PairedStreamReader, StreamFilesReader

    for kind in ("messages", "commands"):
        (tmp_path / kind).mkdir()
    (tmp_path / "commands" / "part-0.jsonl").write_text("".join('{"op": "sub", "at": 0}\n' for _ in range(5000)))
    reader = PairedStreamReader(StreamFilesReader(str(tmp_path / "messages"), "messages", None),
                                StreamFilesReader(str(tmp_path / "commands"), "commands", None), 10, 100)
    assert reader.latestOffset(None, None) == {"messages": 0, "commands": 100}
    assert len(reader.due_by) == 5000
    shipped = pickle.loads(pickle.dumps(reader))
    assert len(shipped.due_by) == 0 and len(pickle.dumps(reader)) < 2000 and len(reader.due_by) == 5000


def test_command_positions_read_staged_and_raw_files(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"op": ["sub", "unsub", "sub"], "at": [0, 5, None]}), tmp_path / "c.parquet")
    (tmp_path / "c.jsonl").write_text('{"op": "sub", "at": 3}\n\n{"op": "sub"}\n{"at": "x"}\nnot json\n')
    assert command_positions(str(tmp_path / "c.parquet")).tolist() == [0, 5, -1]
    assert command_positions(str(tmp_path / "c.jsonl")).tolist() == [3, -1, -1, -1]


@pytest.mark.parametrize("method", ["prefix", "location"])
def test_log_entries_stored_in_pieces_rebuild_exactly(method, tmp_path, monkeypatch):
    """With values capped at 700 bytes every snapshot and most deltas are stored in pieces; the
    job's own processors (``TwsTester``, no JVM) stay exact after every batch through a lost cache
    (rebuilt from the pieced log)."""
    from spark_fixtures import LocalPipeline, centralized_by_batch

    from skype.dskype.plan import RunSettings
    from skype.dskype import durable
    from skype.spark import processors
    from skype.spark.hosts import InProcessHosts

    monkeypatch.setattr(durable, "VALUE_PIECE_BYTES", 700)
    events = events_workload(tmp_path / "events.jsonl")
    args = build_parser().parse_args(["distributed", "--events", str(events), "--window", "500", "--method", method,
                                      "--partitions", "3", "--batch-size", "400"])
    inputs = load_inputs(vars(args))
    settings = RunSettings.from_options(vars(args), inputs.bounds)
    want = centralized_by_batch(inputs, settings.window.centralized(), 400)
    pipe = LocalPipeline(tmp_path / "run", settings, inputs)
    for b in range(len(want)):
        if b in (1, 3):
            InProcessHosts.clear()
        got = pipe.step()
        assert got == want[b], f"batch {b}: {first_difference(got, want[b])}"
    logged = [i for key in pipe.plan.pipelines[0].partition_keys
              for i in processors.Meta.from_blob(pipe.snapshot_state(key)["meta"][0]).log_ids]
    assert any(i < 0 for i in logged)  # further pieces were written
    last = {m["partition"]: m["log_entries"] for ms in pipe.metrics for m in ms if m["stage"] == "partition"}
    assert sum(last.values()) == sum(1 for i in logged if i >= 0)  # entries, not their pieces
    rebuilt = [m for ms in pipe.metrics for m in ms if m["stage"] == "partition" and not m["hit"]]
    assert len(rebuilt) >= 2 * settings.distribution.partitions


# --------------------------------------------------------------------------- on Spark

BATCH, CAP, WINDOW = 400, 23, 500


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    return events_workload(tmp_path_factory.mktemp("spark-caps") / "events.jsonl")


@pytest.mark.spark
@pytest.mark.parametrize("method", [pytest.param("location", marks=pytest.mark.spark_lane), "prefix"])
def test_spark_job_with_tiny_command_cap_is_exact_after_every_batch(spark, workload, tmp_path, method):
    """With at most 23 commands per batch the 120 initial subscriptions come in commands-only
    batches, and the later commands hold messages back; the batches are those the source plans,
    and after each batch that ends a message prefix the delivered top-k equal the centralized
    engine's; the final results equal ``simulate`` and the independent oracle."""
    from skype.spark.job import run_options

    run_dir = tmp_path / "run"
    args = build_parser().parse_args(["distributed", "--events", str(workload), "--window", str(WINDOW),
                                      "--batch-size", str(BATCH), "--commands-per-batch", str(CAP),
                                      "--method", method, "--partitions", "2", "--checkpoint", str(run_dir),
                                      "--results-out", str(run_dir / "results.jsonl"),
                                      "--metrics-out", str(run_dir / "metrics.json")])
    run_options(vars(args), spark)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    inputs = load_inputs(vars(build_parser().parse_args(["simulate", "--events", str(workload), "--window", str(WINDOW)])))
    positions = np.concatenate([command_positions(str(p)) for p in sorted((run_dir / "stream" / "commands").iterdir())])
    ends = batches(positions, inputs.num_messages, BATCH, CAP)
    assert metrics["batches"] == len(ends)
    assert ends[0] == (0, CAP) and max(c for _, c in ends) == len(positions) > 5 * CAP
    files = sorted(str(p) for p in (run_dir / "events" / method).glob("batch-*.parquet"))
    got = fold_events_by_batch([r.asDict(recursive=True) for r in spark.read.parquet(*files).collect()], len(ends))
    # a batch whose commands include every command due at its end (commands-only batches before
    # it hold part of them: no centralized state to compare with)
    due = due_by(positions)
    checked = [b for b, (m, c) in enumerate(ends) if c >= np.searchsorted(due, m, side="right")]
    assert len(checked) >= inputs.num_messages // BATCH
    want = centralized_at(inputs, {"window": WINDOW}, [ends[b][0] for b in checked])
    for b, w in zip(checked, want):
        assert got[b] == w, f"{method} batch {b}: {first_difference(got[b], w)}"
    assert main(["simulate", "--events", str(workload), "--window", str(WINDOW),
                 "--results-out", str(tmp_path / "central.jsonl")]) == 0
    got_final, want_final = results_of(run_dir / "results.jsonl"), results_of(tmp_path / "central.jsonl")
    assert got_final == want_final, first_difference(got_final, want_final)
    *_, (oracle, live) = oracle_by_batch(inputs, {"window": WINDOW}, BATCH)
    oracle_check(oracle, got_final, live, f"{method} final")


@pytest.mark.spark
@pytest.mark.spark_lane  # a stop and a resume: the Spark lane (the default run resumes in test_spark_jobs.py)
def test_spark_job_stopped_inside_the_commands_resumes_with_another_cap_exactly(spark, workload, tmp_path):
    """Stopped after two commands-only batches (cap 23), resumed from the run directory with a
    cap of 50: the batches logged before the stop keep their offsets, later ones follow the new
    cap, and the final results equal ``simulate``'s."""
    from skype.spark.job import run_options

    run_dir = tmp_path / "run"

    def run(*extra):
        args = build_parser().parse_args(["distributed", "--events", str(workload), "--window", str(WINDOW),
                                          "--batch-size", str(BATCH), "--method", "prefix", "--partitions", "2",
                                          "--checkpoint", str(run_dir), "--results-out", str(run_dir / "r.jsonl"),
                                          "--metrics-out", str(run_dir / "m.json"), *map(str, extra)])
        run_options(vars(args), spark)
        return json.loads((run_dir / "m.json").read_text())

    first = run("--commands-per-batch", CAP, "--stop-after-batches", 2)
    assert first["stopped_early"]
    second = run("--commands-per-batch", 50)
    assert second["resumed"] and not second["stopped_early"]
    offsets = sorted((run_dir / "spark" / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))
    ends = [json.loads(p.read_text().splitlines()[-1]) for p in offsets]
    assert ends[0]["commands"] == CAP and ends[1]["commands"] == 2 * CAP  # the first run's batches
    assert ends[2]["commands"] - ends[1]["commands"] <= 50
    assert main(["simulate", "--events", str(workload), "--window", str(WINDOW),
                 "--results-out", str(tmp_path / "central.jsonl")]) == 0
    got, want = results_of(run_dir / "r.jsonl"), results_of(tmp_path / "central.jsonl")
    assert got == want, first_difference(got, want)


@pytest.mark.spark
def test_memory_too_small_for_a_batch_of_commands_is_a_catalogue_error(spark):
    """The derived cap needs heap for ``MIN_COMMANDS_PER_BATCH`` commands; a smaller one is
    refused with what to set (E130); an explicit ``--commands-per-batch`` is taken as given."""
    from skype.dskype.plan import RunSettings
    from skype.errors import InputError
    from skype.spark import session as runtime  # the session settings (skype.spark.session)

    from skype.model import Bounds

    s = RunSettings.from_options({"method": "location", "partitions": 2, "batch_size": 100, "window": 10},
                                 Bounds(0, 0, 1, 1))
    heap = runtime.batch_heap(spark)[1]
    assert runtime.commands_cap(spark, s) == int(heap * runtime.COMMANDS_SHARE / runtime.BYTES_PER_COMMAND)
    s.control.commands_per_batch = 0
    assert runtime.commands_cap(spark, s) is None
    s.control.commands_per_batch = None
    old = runtime.BYTES_PER_COMMAND
    runtime.BYTES_PER_COMMAND = heap  # a heap that holds a fraction of one command
    try:
        with pytest.raises(InputError, match=r"E130.*|spark\.driver\.memory") as err:
            runtime.commands_cap(spark, s)
        assert err.value.code == "E130" and "--driver-memory" in str(err.value)
    finally:
        runtime.BYTES_PER_COMMAND = old


@pytest.mark.spark
def test_out_of_memory_in_a_run_becomes_e131(spark):
    """E131 names the batch by Spark's ids (a resumed run's continue past this process's batches),
    says "probably" where the cause is a guess, and keeps the error it replaces as its cause."""
    from skype.errors import OperationalError
    from skype.spark.runtime import out_of_memory_as_error

    class Sink:  # a resumed run: this process wrote batch 7, then failed writing batch 8
        batches = [7]
        running: int | None = 8

    class Query:
        lastProgress = {"batchId": 7}

    heap = RuntimeError("Job aborted\njava.lang.OutOfMemoryError: Java heap space\n\tat org.apache...")
    with pytest.raises(OperationalError) as err:
        with out_of_memory_as_error(spark, Sink(), Query()):
            raise heap
    assert err.value.code == "E131" and "batch 8," in str(err.value) and "Java heap space" in str(err.value)
    assert err.value.__cause__ is heap
    Sink.running = None  # failed after batch 7's sink, before batch 8's
    with pytest.raises(OperationalError) as err:  # the state server's thread died: the task sees a closed socket
        with out_of_memory_as_error(spark, Sink(), Query()):
            raise RuntimeError('File "stateful_processor_api_client.py", in _receive_proto_message\nEOFError')
    text = str(err.value)
    assert err.value.code == "E131" and "batch 8," in text and "probably out of memory" in text
    assert "spark.driver.memory" in text or "spark.executor.memory" in text
    with pytest.raises(RuntimeError, match="other"):
        with out_of_memory_as_error(spark, Sink(), Query()):
            raise RuntimeError("other")
