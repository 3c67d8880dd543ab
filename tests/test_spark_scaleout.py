"""Scale-out accounting (issue 25): the per-batch work counters partitions report
(:mod:`skype.dskype.work`) add up to the engine's own totals, a partition core reports them per
batch and, at P = 1, exactly the centralized engine's counts; the memory guard of local runs
(E123) stops with a catalogue error that says what to set.  No JVM."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skype.simulate import load_inputs
from skype.dskype.work import COUNTERS, counter_delta, engine_counters
from skype.engine import Engine
from skype.errors import OperationalError


def _inputs(num_subs: int = 300, num_messages: int = 1200, seed: int = 3):
    return load_inputs({"dataset": "tweets", "num_subs": num_subs, "num_messages": num_messages, "window": 400,
                        "seed": seed})


@settings(max_examples=10, deadline=None)
@given(batch=st.integers(min_value=7, max_value=500), seed=st.integers(min_value=0, max_value=3))
def test_batch_counters_add_up_to_the_engine_totals(batch, seed):
    inputs = _inputs(seed=seed)
    engine = Engine(window=400, bounds=inputs.bounds, vocabulary=inputs.vocabulary)
    engine.subscribe_batch(inputs.subscriptions)
    start = engine_counters(engine)
    summed = dict.fromkeys(COUNTERS, 0)
    for op, payload in inputs.steps:
        assert op == "msgs"
        for chunk in payload.batches(batch):
            before = engine_counters(engine)
            engine.publish_batch(chunk)
            work = counter_delta(before, engine_counters(engine))
            assert all(v >= 0 for v in work.values())
            for name in COUNTERS:
                summed[name] += work[name]
    end = engine_counters(engine)
    assert summed == {name: end[name] - start[name] for name in COUNTERS}
    assert summed["arrivals"] == inputs.num_messages and summed["postings"] > 0


def test_a_restarted_counter_counts_its_new_value():
    assert counter_delta({"admits": 10, "cpu_ns": 5}, {"admits": 3, "cpu_ns": 9}) == {"admits": 3, "cpu_ns": 4}


def test_reference_engine_has_zero_counters():
    from skype.reference import ReferenceEngine

    counters = engine_counters(ReferenceEngine(window=10))
    assert all(counters[name] == 0 for name in COUNTERS)


def test_a_single_partition_reports_the_centralized_engines_work():
    """The metrics row of every batch carries the batch's counters; at P = 1 with a native count
    window they equal, batch by batch, what the centralized engine counts over the same stream."""
    from skype.dskype.codec import OP_SUB, Commands
    from skype.dskype.partition import PartitionConfig, PartitionCore, PartitionInput
    from skype.dskype.window import WindowSpec

    inputs = _inputs()
    core = PartitionCore(PartitionConfig(0, 1, WindowSpec("count", 400.0), tuple(inputs.bounds.as_tuple()),
                                         count_native=True))
    central = Engine(window=400, bounds=inputs.bounds, vocabulary=inputs.vocabulary)
    central.subscribe_batch(inputs.subscriptions)
    n = len(inputs.subscriptions)
    subs = Commands(np.arange(n), np.zeros(n, np.int64), np.full(n, OP_SUB, np.int8), inputs.subscriptions, np.ones(n))
    seq0, batches = 0, 0
    for _, payload in inputs.steps:
        for chunk in payload.batches(200):
            seq = np.arange(seq0, seq0 + len(chunk), dtype=np.int64)
            out = core.apply(PartitionInput(chunk, seq, subs if seq0 == 0 else Commands.empty(), int(seq[-1]),
                                            float(chunk.t[-1]), ()))
            before = engine_counters(central)
            central.publish_batch(chunk)
            expected = counter_delta(before, engine_counters(central))
            if seq0 > 0:  # the first batch also registers the partition's subscriptions
                assert {k: out.metrics["work"][k] for k in COUNTERS} == {k: expected[k] for k in COUNTERS}
                batches += 1
            assert out.metrics["engine_cpu_s"] >= 0.0 and out.metrics["work"]["arrivals"] == len(chunk)
            seq0 += len(chunk)
    assert batches == inputs.num_messages // 200 - 1


class _FakeConf:
    def __init__(self, values):
        self.values = values

    def get(self, key, default=None):
        return self.values.get(key, default)


class _FakeSpark:
    def __init__(self, values):
        self.conf = _FakeConf(values)


class _FakeSink:
    running = None
    batches = [4]

    @staticmethod
    def held():
        return 1_000_000, 3 << 30


def test_memory_guard_stops_a_local_run_with_e123(monkeypatch):
    from skype.spark import runtime

    monkeypatch.setattr(runtime, "meminfo_mb", lambda: {"MemTotal": 24_000, "MemAvailable": 900})
    guard = runtime.MemoryGuard.of(_FakeSpark({"spark.master": "local[2]"}))
    assert guard is not None and guard.floor_mb == 1200 and not guard.passes()
    with pytest.raises(OperationalError) as err:
        guard.raise_error(_FakeSink(), None)
    text = str(err.value)
    assert err.value.code == "E123" and "batch 5" in text and "1,000,000" in text and "3072 MB" in text
    assert "spark.executor.memory" in text and runtime.MEMORY_FLOOR_CONF in text


def test_memory_guard_passes_above_its_floor_and_is_off_when_asked_or_on_a_cluster(monkeypatch):
    from skype.spark import runtime

    monkeypatch.setattr(runtime, "meminfo_mb", lambda: {"MemTotal": 2_000, "MemAvailable": 300})
    guard = runtime.MemoryGuard.of(_FakeSpark({"spark.master": "local[*]"}))
    assert guard is not None and guard.floor_mb == runtime.MEMORY_FLOOR_MIN_MB and guard.passes()
    assert runtime.MemoryGuard.of(_FakeSpark({"spark.master": "local[2]", runtime.MEMORY_FLOOR_CONF: "0"})) is None
    assert runtime.MemoryGuard.of(_FakeSpark({"spark.master": "spark://h:7077"})) is None


def test_a_context_stopped_by_out_of_memory_becomes_e131_without_asking_the_jvm():
    """The 1M run's failure: a task died of OutOfMemoryError, local mode's handler stopped the
    SparkContext and the query failed on the missing scheduler; E131 must come out of it with the
    heap setting read before the run (the JVM cannot be asked any more) and the batch the sink was in."""
    from skype.spark.runtime import out_of_memory_as_error

    class Sink:
        batches = [14]
        running: int | None = None

    class DeadQuery:
        @property
        def lastProgress(self):
            raise ConnectionRefusedError(111, "Connection refused")

    gone = RuntimeError('[STREAM_FAILED] terminated with exception: Cannot invoke '
                        '"org.apache.spark.scheduler.DAGScheduler.cleanupQueryJobs(long)" because the return value of '
                        '"org.apache.spark.SparkContext.dagScheduler()" is null')
    with pytest.raises(OperationalError) as err:
        with out_of_memory_as_error(None, Sink(), DeadQuery(), ("spark.driver.memory", 1 << 30)):
            raise gone
    text = str(err.value)
    assert err.value.code == "E131" and "batch 15," in text and "probably out of memory" in text
    assert "spark.driver.memory (now 1024m" in text and err.value.__cause__ is gone


@settings(max_examples=30, deadline=None)
@given(lists=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3), st.booleans(), st.booleans()), max_size=40),
       size=st.integers(min_value=1, max_value=4000))
def test_events_split_into_pieces_read_back_as_the_same_rows(lists, size):
    """A batch's events leave a task in pieces of bounded size; the sink's table of the pieces
    equals the table of the whole blob, row for row."""
    pytest.importorskip("pyspark")
    import pyarrow as pa

    from skype.dskype.reports import EventBuilder, events_to_arrow
    from skype.spark.processors import split_events

    events = EventBuilder(upto=77)
    for i, (n_in, n_left, created, removed) in enumerate(lists):
        entered = (np.arange(n_in, dtype=np.int64) + 10 * i, np.linspace(0.1, 0.9, n_in), np.full(n_in, i, np.int64))
        events.add(1000 + i, entered, np.arange(n_left, dtype=np.int64) + 100 * i, created=created, removed=removed)
    blob = events.rows().pack(77)
    pieces = split_events(blob, size)
    assert (len(pieces) == 1) == (len(blob) <= size) or len(lists) <= 1
    whole = pa.Table.from_batches([events_to_arrow(blob)])
    joined = pa.Table.from_batches([events_to_arrow(p) for p in pieces], schema=whole.schema)
    assert joined.equals(whole)
