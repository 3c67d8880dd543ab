"""The live service over DSkype on Spark (``serve --engine spark``): the service's side.

The service keeps its whole contract (routes, log, worker, hub, fan-out: :mod:`skype.service`);
only the engine changes (:mod:`skype.service.backend`).  Its flow:

1. **Writes.**  The service validates each write as for the in-process engine
   (:class:`SparkState` is a :class:`~skype.service.state.State` whose engine is a
   :class:`StreamEngine`: the same parsers, checks and vocabulary), appends it to its log, and
   then *stages* it: the vectorised messages or subscription commands of log records ``i..j``
   become the stream file ``part-<i>-<j>`` of ``DIR/spark/in/messages`` or ``in/commands``
   (:mod:`skype.dskype.staging`'s format; commands carry ``at``, the messages before them),
   written atomically every half trigger (:mod:`skype.service.spark_staging`).  Names follow the log, so the
   stream's order is the log's, and a restart that replays the log stages only the records no
   file holds yet.
2. **The engine.**  A Spark driver process (:mod:`skype.spark.live_driver`, started before
   the service folds its completed batches on a restart, and restarted when it dies) runs
   DSkype over those two directories as an open stream (``trigger-ms`` apart) and writes each micro-batch's result-change events to ``DIR/spark/events/<method>/``.  It plans
   the distribution when it first starts, from what is staged by then (it starts with the first
   message); the Spark checkpoint in ``DIR/spark`` resumes it after a kill.
3. **Events back.**  A tailer follows the completed batches (``metrics/batch-<id>.json`` is
   written after every file of its batch) in batch order and folds each batch's rows into the
   results (:class:`FoldedResults`, on the engine thread, as a ``read`` job of the worker: the
   results and their seq change together).  A batch's events are, per subscription it touched
   (ascending id), the net change of its top-k over the batch, numbered after the previous
   batch's: seqs follow from the batch outputs alone, so a restart, which folds the completed
   batches again, gives every event the seq it had.  ``position`` is the messages the batch's
   end offset covers.

Results (``GET /v1/results``, resets) are the folded events: they trail the acknowledged writes
by the batches Spark has not completed (``skype_spark_position`` in ``/metrics`` says how far it
has come).  Snapshot queries are commands of the stream, staged at the acknowledged position and
answered from the batch that holds them (:mod:`skype.service.spark_queries`).  Subscriptions are topk without ``until`` (E048) and the window counts messages
(``--window``).  A write is staged after its log append and before the group's fsync: a machine
crash can leave a staged write the log lost (a SIGKILL cannot: the page cache survives).
"""

from __future__ import annotations

import asyncio
import json
import math
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from skype.api import ChangeLog
from skype.errors import InputError
from skype.model import Bounds, MessageBatch, Subscription, SubscriptionBatch
from skype.service.events import EventBlock
from skype.service.spark_fold import BatchRows, FoldedResults
from skype.service.spark_staging import StreamWriter, _id_rows
from skype.service.spark_queries import LiveQueries
from skype.service.state import State
from skype import validate
from skype.workload import subscriptions_batch

if TYPE_CHECKING:
    from skype.service.app import Service
    from skype.service.settings import ServiceSettings

DEFAULTS = {"master": "local[2]", "method": "location", "partitions": 2, "trigger_ms": 500, "batch_size": 100_000,
            "driver_memory": None, "query_timeout_s": 120}
DRIVER_MODULE = "skype.spark.live_driver"


def spark_options(settings: ServiceSettings) -> dict:
    """The Spark engine's options of ``settings`` (``--master``, ``--method``, ``--partitions``,
    ``--trigger-ms``), the defaults filled in and checked."""
    opts = dict(DEFAULTS, **{k: v for k, v in settings.engine_options.items() if v is not None})
    unknown = sorted(set(opts) - set(DEFAULTS))
    if unknown:
        raise InputError("E023", what="options of --engine spark", expected=f"among {sorted(DEFAULTS)}", value=unknown)
    for name in ("partitions", "trigger_ms", "batch_size", "query_timeout_s"):
        value = opts[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError("E023", what=f"--{name.replace('_', '-')}", expected="an integer >= 1", value=value)
    if settings.window is None:
        raise InputError("E023", what="--window-seconds", expected="--window N (a count window) with --engine spark",
                         value=settings.window_seconds)
    return opts


class StreamEngine:
    """What :class:`~skype.service.state.State` needs of an engine, over the staged stream: the
    checks that need the engine's state (ids in the window, registered ids, timestamp order)
    here; the writes go to the :class:`StreamWriter`, the results come from the
    :class:`FoldedResults`."""

    def __init__(self, writer: StreamWriter, fold: FoldedResults, vocabulary: Any, bounds: Any, window: int) -> None:
        self.writer, self.fold, self.vocabulary, self.bounds = writer, fold, vocabulary, bounds
        self.window, self.window_seconds = int(window), None
        self.clock = -math.inf
        self.arrivals = 0
        self.subscribed: set[int] = set()
        self._window_ids: deque[np.ndarray] = deque()
        self._window_t: deque[np.ndarray] = deque()  # the timestamps beside (snapshot queries' clocks)
        self._window_count = 0

    # ------------------------------------------------------------------ messages
    def window_has(self, ids: Any) -> np.ndarray:
        ids = np.asarray(ids, np.int64)
        if not self._window_ids:
            return np.zeros(len(ids), bool)
        return np.isin(ids, np.concatenate(list(self._window_ids)))

    def publish_batch(self, batch: MessageBatch) -> ChangeLog:
        if len(batch.ids) == 0:
            return ChangeLog.empty()
        if batch.t[0] < self.clock:
            raise InputError("E009", t=float(batch.t[0]), prev=self.clock, record_id=int(batch.ids[0]))
        self.writer.message(batch)
        self._window_ids.append(batch.ids.copy())
        self._window_t.append(np.asarray(batch.t, np.float64).copy())
        self._window_count += len(batch.ids)
        while self._window_count - len(self._window_ids[0]) >= self.window:
            self._window_count -= len(self._window_ids.popleft())
            self._window_t.popleft()
        excess = self._window_count - self.window
        if excess > 0:
            self._window_ids[0] = self._window_ids[0][excess:]
            self._window_t[0] = self._window_t[0][excess:]
            self._window_count -= excess
        self.clock = float(batch.t[-1])
        self.arrivals += len(batch.ids)
        return ChangeLog.empty()  # the events come from the fold

    def window_times(self) -> list[np.ndarray]:
        """The timestamps of the window's messages, oldest first, as non-empty chunks ending at
        the newest (what :func:`skype.dskype.snapshots.lower_query` reads)."""
        return [t for t in self._window_t if len(t)]

    def restore_position(self, clock: float, arrivals: int) -> None:
        self.clock, self.arrivals = max(self.clock, clock), arrivals

    def ended_subscriptions(self) -> dict[int, str]:
        return {}

    def advance_log(self, t: Any) -> ChangeLog:
        raise InputError("E023", what="advance", expected="used with a time window (--window-seconds)", value=t)

    # ------------------------------------------------------------------ subscriptions
    def subscribe(self, sub: Any) -> None:
        if not isinstance(sub, Subscription) or sub.until is not None:
            raise InputError("E048", where="serve --engine spark", kind=getattr(sub, "kind", "topk with until"),
                             supported="topk subscriptions without until", record_id=getattr(sub, "id", None))
        row = validate.check_subscription(sub, self.vocabulary, self.bounds)
        self.subscribe_batch(subscriptions_batch([row]))

    def subscribe_batch(self, batch: SubscriptionBatch) -> None:
        if "until" in batch.meta:
            raise InputError("E048", where="serve --engine spark", kind="topk with until",
                             supported="topk subscriptions without until")
        ids = batch.ids.tolist()
        taken = [s for s in ids if s in self.subscribed]
        if taken or len(set(ids)) != len(ids):
            sid = taken[0] if taken else next(s for s in ids if ids.count(s) > 1)
            raise InputError("E007", id=sid, record_id=sid)
        self.subscribed.update(ids)
        self.writer.command("sub", self.arrivals, batch)

    def subscribe_many(self, subs: list) -> None:
        if subs:
            self.subscribe(subs[0])  # another kind than topk: refused (E048)

    def unsubscribe(self, sub_id: int) -> None:
        if sub_id not in self.subscribed:
            raise InputError("E020", id=sub_id, record_id=sub_id)
        self.subscribed.discard(sub_id)
        self.writer.command("unsub", self.arrivals, _id_rows([sub_id]))

    def has_subscription(self, sub_id: int) -> bool:
        return sub_id in self.subscribed

    # ------------------------------------------------------------------ results
    def kind_of(self, sub_id: int) -> str:
        if sub_id not in self.subscribed:
            raise InputError("E020", id=sub_id, record_id=sub_id)
        return "topk"

    def result(self, sub_id: int) -> list:
        return self.fold.result(sub_id)

    def topk_arrays(self, sub_ids: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.fold.topk_arrays(sub_ids)

    def results_by_kind(self):
        for sid in sorted(self.subscribed):
            yield sid, "topk", self.fold.result(sid)



class SparkState(State):
    """The service's state over DSkype (module docstring): validation, records and tokens as
    :class:`State`; the write staged once applied; events and seqs from the fold only."""

    def __init__(self, backend: SparkBackend, vocabulary: Any, ingest: str, max_records: int) -> None:
        self.backend = backend
        super().__init__(backend.make_engine, vocabulary, ingest=ingest,  # type: ignore[arg-type]
                         max_records=max_records)  # (what State needs of an engine: StreamEngine's docstring)

    @property
    def seq(self) -> int:
        """The seq of the last folded event (the local path's own numbering is not used)."""
        return self.backend.fold.seq

    @seq.setter
    def seq(self, value: int) -> None:
        pass

    def apply(self, cmd: dict, lines: list[int] | None = None, before: Any = None) -> tuple[Any, list[EventBlock]]:
        writer = self.backend.writer
        mark = writer.mark()
        try:
            value, _ = super().apply(cmd, lines, before)  # its events are not the engine's: the fold's are
        except BaseException:
            writer.undo(mark)
            raise
        writer.written()
        if cmd["op"] == "msgs":
            self.backend.note_arrival(self.position, time.monotonic())
        return value, []

    def restore(self, meta: dict, subs: tuple[list[int], list[bytes], list[str]], window: tuple,
                engine_state: dict | None = None) -> None:
        writer = self.backend.writer
        writer.muted = True
        try:
            super().restore(meta, subs, window, engine_state)
        finally:
            writer.muted = False
        writer.restored(int(meta["log_index"]))

    def query(self, rec: Any) -> Any:
        """A snapshot query, staged as a command of the stream; the route awaits its answer
        (:mod:`skype.service.spark_queries`)."""
        return self.backend.queries.stage(self, rec, self.backend.writer)

    def meta(self) -> dict:
        """What a snapshot records (called on the engine thread as the snapshot is captured):
        first the pending writes are staged, since the log will not replay them."""
        self.backend.writer.flush()
        return super().meta()



class SparkBackend:
    """``serve --engine spark``: the state, the driver process and the tailer (module docstring)."""

    def __init__(self, settings: ServiceSettings, data_dir: Path, loop: asyncio.AbstractEventLoop) -> None:
        self.options = spark_options(settings)
        self.settings, self.loop = settings, loop
        self.run_dir = (Path(data_dir) / "spark").resolve()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.writer = StreamWriter(self.run_dir)
        self.fold = FoldedResults()
        self.queries = LiveQueries(self.run_dir, self.options["method"], self.options["partitions"], self._bounds(),
                                   int(settings.window or 0), self.options["query_timeout_s"])
        self.state: SparkState | None = None
        self.service: Service | None = None
        self.stopping = threading.Event()
        self.driver: subprocess.Popen | None = None
        self.driver_log: Any = None
        self.driver_starts = 0
        self.threads: list[threading.Thread] = []
        self.flusher: asyncio.Task | None = None
        self.gauges: dict[str, Any] = {}
        self.pushed_upto: deque[tuple[int, float]] = deque()  # (messages accepted after a write, its arrival)

    # ------------------------------------------------------------------ the seam (skype.service.backend)
    def make_engine(self, vocabulary: Any) -> StreamEngine:
        return StreamEngine(self.writer, self.fold, vocabulary, self.settings.bounds, int(self.settings.window or 0))

    def make_state(self, vocabulary: Any, ingest: str, max_records: int) -> SparkState:
        self.state = SparkState(self, vocabulary, ingest, max_records)
        return self.state

    def attach(self, service: Service) -> None:
        """Start the driver of a run that has one (its JVM starts while this process recovers),
        then fold the batches completed before this start and hand their events to the hub (the
        worker has not started: nothing else reads the fold yet)."""
        from prometheus_client import Counter, Gauge

        self._spawn_driver()

        self.service = service
        registry = service.metrics.registry
        self.gauges = {
            "position": Gauge("skype_spark_position", "messages the folded Spark batches cover", registry=registry),
            "batch": Gauge("skype_spark_batch", "the last Spark micro-batch folded", registry=registry),
            "driver_starts": Gauge("skype_spark_driver_starts", "Spark driver processes started", registry=registry),
            "fold_s": Counter("skype_spark_fold_seconds", "reading and folding the batches' events, off the engine "
                                                          "thread", registry=registry),
            "rows": Counter("skype_spark_event_rows", "event rows read from the batches", registry=registry),
        }
        self.gauges["driver_starts"].set(self.driver_starts)
        for batch in self.completed_batches():
            block = self.fold.apply(batch, self.batch_rows(batch), self.batch_position(batch))
            if block is not None:
                service.hub.publish([block], None)
        self._count()

    async def start(self) -> None:
        self.flusher = asyncio.get_running_loop().create_task(self._stage_periodically())
        for target, name in ((self._supervise, "skype-spark-driver"), (self._tail, "skype-spark-tailer")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self.threads.append(thread)

    async def stop(self) -> None:
        self.stopping.set()
        if self.flusher is not None:
            self.flusher.cancel()
        driver = self.driver
        if driver is not None and driver.poll() is None:
            driver.send_signal(signal.SIGTERM)
            try:
                await asyncio.get_running_loop().run_in_executor(None, driver.wait, 30)
            except subprocess.TimeoutExpired:
                driver.kill()

    # ------------------------------------------------------------------ staging
    async def _stage_periodically(self) -> None:
        """Every half trigger (at most 250 ms), stage the pending writes on the engine thread:
        a micro-batch then reads a few files, not one per write (each file is a task of the
        batch's first stage)."""
        from skype.service.worker import Busy

        assert self.service is not None
        period = min(0.25, self.options["trigger_ms"] / 2000.0)
        writer = self.writer
        while not self.stopping.is_set():
            await asyncio.sleep(period)
            if writer.first is not None or (writer.staged_messages and not self._settings_file().exists()):
                try:
                    await self.service.worker.submit("read", self._stage)
                except Busy:
                    continue
                except Exception as err:  # the worker failed or stopped: its status says so
                    print(f"skype serve: staging stopped: {err!r}", file=sys.stderr, flush=True)
                    return

    def _stage(self, state: Any) -> None:
        """On the engine thread: stage what is pending; with the first message staged, write the
        driver's settings (the vocabulary is read here, where it changes)."""
        self.writer.flush()
        if self.writer.staged_messages and not self._settings_file().exists():
            self._write_settings()

    # ------------------------------------------------------------------ the driver process
    def _settings_file(self) -> Path:
        return self.run_dir / "live.json"

    def _write_settings(self) -> None:
        """What the driver runs (``live.json``): the options, the window, the bounds, and the
        vocabulary its planning weighs samples with."""
        assert self.state is not None
        vocabulary = self.state.vocabulary.to_dict()
        cfg = dict(self.options, window=int(self.settings.window or 0), bounds=list(self._bounds().as_tuple()),
                   vocabulary={k: list(v) if isinstance(v, list) else v for k, v in vocabulary.items()})
        from skype.service.wal import write_atomic

        write_atomic(self._settings_file(), json.dumps(cfg).encode())

    def _bounds(self) -> Bounds:
        b = self.settings.bounds
        return b if isinstance(b, Bounds) else Bounds(*b)

    def _supervise(self) -> None:
        """Start the driver once a message is staged (it plans from the stream staged by then)
        and again whenever it dies, until the service stops (its pid: ``driver.pid``)."""
        try:
            while not self.stopping.is_set():
                if self.driver is None or self.driver.poll() is not None:
                    if self.driver is not None:
                        print(f"skype serve: the Spark driver exited ({self.driver.returncode}); starting it again",
                              file=sys.stderr, flush=True)
                        self.stopping.wait(1.0)
                    self._spawn_driver()
                self.stopping.wait(0.1)
        finally:
            if self.driver_log is not None:
                self.driver_log.close()

    def _spawn_driver(self) -> None:
        """Start the driver process if its settings are written (with the first message staged)."""
        if not self._settings_file().exists():
            return
        if self.driver_log is None:
            self.driver_log = open(self.run_dir / "driver.log", "ab")
        self.driver = subprocess.Popen([sys.executable, "-m", DRIVER_MODULE, str(self.run_dir)],
                                       stdout=self.driver_log, stderr=self.driver_log, stdin=subprocess.DEVNULL,
                                       preexec_fn=_die_with_parent)
        (self.run_dir / "driver.pid").write_text(f"{self.driver.pid}\n")
        self.driver_starts += 1
        if self.gauges:
            self.gauges["driver_starts"].set(self.driver_starts)

    # ------------------------------------------------------------------ the batches' events
    def completed_batches(self) -> list[int]:
        """Completed batches after the last one folded, in order."""
        metrics = self.run_dir / "metrics"
        if not metrics.exists():
            return []
        ids = sorted(int(p.name[6:14]) for p in metrics.glob("batch-*.json"))
        return [b for b in ids if b > self.fold.batch]

    def batch_rows(self, batch: int) -> BatchRows:
        import pyarrow.parquet as pq

        paths = sorted((self.run_dir / "events" / self.options["method"]).glob(f"batch-{batch:08d}-part-*.parquet"))
        # ParquetFile.read, not read_table: the latter imports pyarrow.dataset (about 0.5 s on a restart)
        return BatchRows([pq.ParquetFile(path).read() for path in paths])

    def batch_position(self, batch: int) -> int:
        """The messages the batch's end offset covers (the Spark checkpoint's offset log)."""
        path = self.run_dir / "spark" / "offsets" / str(batch)
        for line in path.read_text().splitlines()[2:]:
            try:
                offset = json.loads(line)
            except ValueError:
                continue
            if isinstance(offset, dict) and "messages" in offset:
                return int(offset["messages"])
        return self.fold.position

    def _count(self) -> None:
        if self.gauges:
            self.gauges["position"].set(self.fold.position)
            self.gauges["batch"].set(self.fold.batch)

    def _tail(self) -> None:
        while not self.stopping.is_set():
            batches = self.completed_batches()
            if not batches:
                self.stopping.wait(0.02)
                continue
            for batch in batches:
                t0 = time.perf_counter()
                rows = self.batch_rows(batch)
                prepared = self.fold.prepare(batch, rows, self.batch_position(batch))
                self.gauges["fold_s"].inc(time.perf_counter() - t0)
                self.gauges["rows"].inc(rows.count)
                future = asyncio.run_coroutine_threadsafe(self._fold(prepared), self.loop)
                try:
                    future.result()
                except Exception as err:  # the worker failed or stopped: nothing more to fold
                    print(f"skype serve: folding Spark batch {batch} failed: {err!r}", file=sys.stderr, flush=True)
                    return
                self.queries.batch_done(batch)

    async def _fold(self, prepared: tuple | None) -> None:
        """On the loop: commit the prepared batch on the engine thread (a ``read`` job: the
        results and their seq change between two of its jobs), then publish the events."""
        from skype.service.worker import Busy

        assert self.service is not None
        worker = self.service.worker
        while True:
            try:
                future = worker.submit("read", lambda st: self.fold.commit(prepared))
                break
            except Busy:
                await asyncio.sleep(0.01)
        block = await future
        self._count()
        if block is not None:
            self.service.hub.publish([block], self.arrival_before(block.position))

    def note_arrival(self, position: int, t0: float) -> None:
        self.pushed_upto.append((position, t0))

    def arrival_before(self, position: int) -> float | None:
        """The arrival of the oldest write the batch up to ``position`` completes (the push
        latency histogram measures from it)."""
        first = None
        while self.pushed_upto and self.pushed_upto[0][0] <= position:
            _, t0 = self.pushed_upto.popleft()
            first = t0 if first is None else first
        return first


def _die_with_parent() -> None:
    """In the driver's child process: die when the service does (Linux ``PR_SET_PDEATHSIG``),
    so that a killed service leaves no driver writing the run directory."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
