"""The single engine writer: one thread, a bounded job queue, group commit.

Every request that touches the engine becomes a job on a bounded ``queue.Queue``; a full queue
is refused at once (429, E093) rather than buffered.  The thread takes a job and every job
already waiting (up to ``GROUP``), applies them in order (:class:`~skype.service.state.State`;
a rejected command changes nothing and is not logged), appends the accepted commands to the
log, makes them durable with one ``fsync`` (``--fsync batch``; ``always``: one per command), and
only then hands the replies and the events back to the event loop.  So an acknowledgement, and
every event, follows the log write that makes it durable.

Startup (status ``recovering``; the HTTP routes answer 503) loads the newest good snapshot and
replays the log after it.  Snapshots are taken every ``snapshot_every`` records (messages,
subscription changes, advances) or ``snapshot_seconds`` seconds (when something changed) and
when the worker stops, so a restart replays at most about ``snapshot_every`` records (a little
more while a snapshot is still being written: the next waits for it).  The state is captured on
the engine thread and written on a snapshot thread (Parquet and fsync release the GIL).

Order of a write: validated, appended to the log, applied (``State.apply``'s ``before`` hook),
and acknowledged after the group's fsync (``always``: after its own).  A failed append changes
nothing (500); a failed fsync leaves the engine ahead of the disk, so the worker stops: the
writes not yet synced are answered 503 (E094, never acknowledged), and so is everything after
(status ``failed``; a restart recovers exactly the durable log).

Status ``failed`` also follows any other death of the engine thread or the snapshot thread (a
snapshot that cannot be captured, written or rotated to), so ``/healthz`` never says ``ok`` for
a server that cannot take writes.  A failed recovery (a damaged log: E140) calls ``on_failure``
on the loop (``serve`` exits non-zero) after changing nothing.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future, ThreadPoolExecutor
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from skype.errors import CodedError, InputError, OperationalError
from skype.service import snapshot
from skype.service.state import State
from skype.service.wal import Log

GROUP = 256
BULK_OPS = ("msgs", "subs", "unsubs")  # commands whose reply says how many records they wrote


def _records(cmd: dict) -> int:
    """What a command weighs towards the next snapshot: its messages (a reply's ``accepted``),
    or 1."""
    for key in ("accepted", "created", "deleted"):  # messages, bulk subscriptions (replies)
        if key in cmd:
            return int(cmd[key])
    return len(cmd["recs"]) if cmd.get("op") == "msgs" and "recs" in cmd else 1


class Busy(Exception):
    """The job queue is full."""


class Job:
    __slots__ = ("kind", "payload", "future", "t0")

    def __init__(self, kind: str, payload: Any, future: asyncio.Future | None, t0: float | None = None) -> None:
        self.kind, self.payload, self.future = kind, payload, future
        self.t0 = time.monotonic() if t0 is None else t0  # the request's arrival, when the caller knows it


class Worker:
    def __init__(self, data_dir: Path, state: State, *, fsync: str, queue_size: int,
                 snapshot_every: int, snapshot_seconds: float, metrics: Any,
                 loop: asyncio.AbstractEventLoop, publish: Callable[[list, float | None], None],
                 start_at: Callable[[int], None] | None = None,
                 on_failure: Callable[[BaseException], None] | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.state = state
        self.metrics = metrics
        self.log = Log(self.data_dir / "log", fsync, on_sync=metrics.fsync_seconds.observe)
        self.snap_dir = self.data_dir / "snapshots"
        self.jobs: queue.Queue = queue.Queue(queue_size)
        self.snapshot_every, self.snapshot_seconds = snapshot_every, snapshot_seconds
        self.loop, self.publish = loop, publish
        self.start_at = start_at  # told the snapshot's seq, before the replayed events are published
        self.status = "recovering"
        self.error: BaseException | None = None  # why the worker stopped (status failed)
        self.recovery_error: BaseException | None = None  # why it never started
        self.failure = ""  # what failed, for the E094 answers
        self._batch: list[Job] = []  # the jobs in hand on the engine thread
        self.on_failure = on_failure
        self.since_snapshot = 0
        self.last_snapshot = time.time()
        self.thread = threading.Thread(target=self._run, name="skype-engine", daemon=True)
        self.snapshot_thread = ThreadPoolExecutor(1, thread_name_prefix="skype-snapshot")
        self.pending: Future | None = None  # the snapshot being written
        self.subs_written: tuple[int, Path] | None = None  # (State.subs_version, its file) of the last snapshot

    # ------------------------------------------------------------------ loop side
    def start(self) -> None:
        self.thread.start()

    def submit(self, kind: str, payload: Any = None, t0: float | None = None) -> asyncio.Future:
        fut = self.loop.create_future()
        try:
            self.jobs.put_nowait(Job(kind, payload, fut, t0))
        except queue.Full:
            raise Busy() from None
        self.metrics.queue_depth.set(self.jobs.qsize())
        return fut

    def stop(self) -> None:
        """Ask the thread to snapshot and stop (blocks until it has)."""
        if self.thread.is_alive():
            self.jobs.put(Job("stop", None, None))
        self.thread.join()

    @property
    def healthy(self) -> bool:
        """The engine thread runs and nothing has failed (``/healthz``)."""
        return self.error is None and self.thread.is_alive()

    def _fail(self, err: BaseException, what: str) -> None:
        """Stop taking work: status ``failed`` at once (the middleware answers 503), and the
        engine thread answers every job after this with :meth:`_refusal`."""
        if self.error is None:
            self.error = err
            self.failure = what
        self.status = "failed"
        print(f"skype serve: {what}, stopping: {err!r}", file=sys.stderr, flush=True)

    def _refusal(self) -> OperationalError:
        return OperationalError("E094", status=f"failed ({self.failure}: {self.error})")

    def _ready(self) -> None:
        if self.error is None:
            self.status = "ok"

    def _deliver(self, replies: list, events: list) -> None:
        """On the loop: acknowledge first, then fan out.  Resolving a future schedules its
        handler's next step; the fan-out is scheduled after it (``call_soon`` runs in order), so
        the replies are written before the events and never wait behind the writes to streams."""
        for fut, ok, value in replies:
            if fut is None or fut.done():
                continue
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(value)
        for ev_list, t0 in events:
            self.loop.call_soon(self.publish, ev_list, t0)

    # ------------------------------------------------------------------ thread side
    def _run(self) -> None:
        try:
            self._recover()
        except BaseException as err:  # reported by /healthz and on stderr; nothing was changed
            self.recovery_error = err
            self._fail(err, "recovery failed")
            if self.on_failure is not None:
                self.loop.call_soon_threadsafe(self.on_failure, err)
            return
        self.loop.call_soon_threadsafe(self._ready)  # after the replayed events
        try:
            self._serve()
        except BaseException as err:  # a bug: the thread ends here
            self._fail(err, "engine thread died")
            jobs = self._batch  # answer the batch in hand too (a future already answered is skipped)
            self.loop.call_soon_threadsafe(self._deliver, [(j.future, False, self._refusal()) for j in jobs], [])
        if self.error is not None:  # failed: answer what is still queued
            while True:
                try:
                    job = self.jobs.get_nowait()
                except queue.Empty:
                    break
                self.loop.call_soon_threadsafe(self._deliver, [(job.future, False, self._refusal())], [])

    def _serve(self) -> None:
        while self.error is None:
            try:  # a snapshot put off while the previous one was written is taken when idle
                batch = [self.jobs.get(timeout=0.05 if self._snapshot_due() else None)]
            except queue.Empty:
                self._snapshot()
                continue
            while len(batch) < GROUP:
                try:
                    batch.append(self.jobs.get_nowait())
                except queue.Empty:
                    break
            self.metrics.queue_depth.set(self.jobs.qsize())
            self._batch = batch
            if self._process(batch):
                break

    def _snapshot(self, wait: bool = False) -> None:
        try:
            self.take_snapshot(wait=wait)
        except Exception as err:  # the log sync, the capture or the rotate: the state may be ahead
            self._fail(err, "snapshot failed")

    def _process(self, batch: list[Job]) -> bool:
        replies: list = []
        events: list = []
        stop = wrote = unsynced = False  # unsynced: an fsync of this group failed
        for job in batch:
            if job.kind == "stop":
                stop = True
                continue
            if self.error is not None:  # failed (fsync, snapshot thread): not applied
                replies.append((job.future, False, self._refusal()))
                continue
            try:
                value, evs = self._do(job)
            except CodedError as err:  # refused (input or operational): answered with its status
                replies.append((job.future, False, err))
                continue
            except Exception as err:  # a bug: answer 500, keep serving
                print(f"skype serve: {job.kind} failed: {err!r}", file=sys.stderr)
                replies.append((job.future, False, err))
                continue
            if job.kind == "cmd":
                wrote = True
                if self.log.fsync == "always":
                    try:
                        self.log.sync()
                    except OSError as err:  # applied, maybe not on disk: never acknowledged
                        unsynced = True
                        self._fail(err, "log fsync failed")
                        replies.append((job.future, False, self._refusal()))
                        continue
            replies.append((job.future, True, value))
            if evs:
                events.append((evs, job.t0))
        if wrote and not unsynced:  # (even if the snapshot thread failed meanwhile)
            try:
                self.log.sync()
            except OSError as err:
                # the engine has applied writes the disk may not hold: stop serving (503) so
                # that a restart recovers the durable state from the log
                self._fail(err, "log fsync failed")
                refusal = self._refusal()
                replies = [(fut, False, refusal) if ok else (fut, ok, value) for fut, ok, value in replies]
                events = []
            self.metrics.log_bytes.set(self.log.bytes_written)
        # ``always``: the writes before a failed fsync were synced, their answers and events stand
        self.loop.call_soon_threadsafe(self._deliver, replies, events)
        if self.error is not None:
            if stop:
                self.snapshot_thread.shutdown()
            return True  # no snapshot: the state may be ahead of the log
        if stop or self._snapshot_due():
            self._snapshot(wait=stop)
        if stop:
            if self.error is None:
                self.log.close()
            self.snapshot_thread.shutdown()
        return stop

    def _do(self, job: Job) -> tuple[Any, list]:
        st = self.state
        if job.kind == "cmd":
            cmd, lines = job.payload if isinstance(job.payload, tuple) else (job.payload, None)
            value, evs = st.apply(cmd, lines, before=self.log.append)  # logged before it applies
            self.since_snapshot += _records(value if cmd["op"] in BULK_OPS else cmd)
            if cmd["op"] == "msgs":
                self.metrics.messages.inc(value["accepted"])
            self.metrics.subscriptions.set(len(st.records))
            return value, evs
        if job.kind == "read":  # a function of the state (the reads of skype.service.bulk)
            return job.payload(st), []
        if job.kind == "result":
            sid = job.payload
            return {"subscription": st.record(sid), "result": st.result_line(sid), "seq": st.seq}, []
        if job.kind == "results":
            return st.results_ndjson(), []
        if job.kind == "query":
            return st.query(job.payload), []
        if job.kind == "messages":  # the newest window messages' records (GET /v1/messages)
            return st.last_messages(job.payload), []
        if job.kind == "reset":  # current result lines and the seq they correspond to
            lines = {sid: (st.result_line(sid) if sid in st.records else None) for sid in job.payload}
            return (st.seq, st.position, lines), []
        raise ValueError(f"unknown job {job.kind}")

    def _recover(self) -> None:
        t0 = time.perf_counter()
        start = 0
        snap = snapshot.load_newest(self.snap_dir)
        if snap is not None:
            meta, subs, window, engine_state = snap
            self.state.restore(meta, subs, window, engine_state)
            start = int(meta["log_index"])
            if self.start_at is not None:
                self.loop.call_soon_threadsafe(self.start_at, self.state.seq)
        chunk: list = []
        for _, cmd in self.log.recover(start):
            try:
                value, evs = self.state.apply(cmd)
            except InputError as err:  # cannot happen for a log this code wrote
                print(f"skype serve: log record skipped on replay: {err}", file=sys.stderr)
                continue
            self.since_snapshot += _records(value if cmd["op"] in BULK_OPS else cmd)
            chunk.extend(evs)
            if len(chunk) >= 100:  # blocks: one per command
                self.loop.call_soon_threadsafe(self.publish, chunk, None)
                chunk = []
        if chunk:
            self.loop.call_soon_threadsafe(self.publish, chunk, None)
        self.metrics.subscriptions.set(len(self.state.records))
        self.metrics.recovery_seconds.set(time.perf_counter() - t0)
        if self.log.truncated_bytes:
            print(f"skype serve: recovered after cutting {self.log.truncated_bytes} bytes of damaged log",
                  file=sys.stderr)

    def _snapshot_due(self) -> bool:
        return bool(self.since_snapshot) and (self.since_snapshot >= self.snapshot_every
                                              or time.time() - self.last_snapshot >= self.snapshot_seconds)

    def take_snapshot(self, wait: bool = False) -> None:
        """Capture the state (cheap: the window's records are shared, immutable buffers) and
        rotate the log at it on this thread; write the Parquet files and fsync them on the
        snapshot thread (``wait``: here), so the engine goes on meanwhile.  The log segments
        before the oldest kept snapshot are deleted only once the new one is whole on disk."""
        if self.pending is not None:
            if not wait and not self.pending.done():
                return  # the previous one is still being written: try again after the next job
            self.pending.result()
            self.pending = None
        st = self.state
        self.log.sync()
        index = self.log.next_index
        subs: list | Path
        if self.subs_written is not None and self.subs_written[0] == st.subs_version \
                and self.subs_written[1].exists():
            subs = self.subs_written[1]  # no subscription changed: link the last file
        else:
            subs = [(sid, rec.decode(), st.tokens.get(sid, "")) for sid, rec in sorted(st.records.items())]
        version = st.subs_version
        meta = st.meta()
        meta["vocabulary"] = {k: list(v) if isinstance(v, list) else v for k, v in meta["vocabulary"].items()}
        window = (*st.window.columns(), st.window.batch())
        engine_state = st.engine_state()  # the engine's subscriptions and buffers (copies: it goes on)
        self.log.rotate()
        self.since_snapshot = 0
        self.last_snapshot = time.time()
        if wait:
            self._write_snapshot(index, meta, subs, window, version, engine_state)
        else:
            self.pending = self.snapshot_thread.submit(self._write_snapshot, index, meta, subs, window, version,
                                                       engine_state)

    def _write_snapshot(self, index: int, meta: dict, subs: list | Path, window: tuple, version: int,
                        engine_state: dict | None = None) -> None:
        """On the snapshot thread.  A failure stops the worker (status failed): the log still
        holds everything, but a server that cannot snapshot grows its log and its restart time
        without bound, and says so rather than answering ``ok``."""
        try:
            path = snapshot.write(self.snap_dir, index, meta, subs, window, engine_state)
            self.subs_written = (version, path / "subscriptions.parquet")
            oldest = snapshot.oldest_kept(self.snap_dir)
            if oldest is not None:
                self.log.drop_before(oldest)
        except Exception as err:
            self._fail(err, f"snapshot at record {index} failed")
            return
        self.metrics.snapshot_time.set(time.time())
