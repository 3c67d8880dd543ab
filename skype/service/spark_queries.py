"""Snapshot queries of ``serve --engine spark`` (``POST /v1/query``): DSkype commands in the stream.

A query is one more command of the stream DSkype runs (:mod:`skype.dskype.snapshots`,
``docs/queries.md`` "Snapshot queries on Spark"); the service stages it, and answers the request
from the batch that holds it.

* **Checked and compiled on the engine thread**, as the single-process service checks a query
  (the record, its ``qid``, then the query compiled with the service's vocabulary, new terms
  forgotten after), then refused where the method cannot answer it exactly
  (:func:`skype.dskype.snapshots.refuse_live`: E135, E138).  Its position ``at`` is the
  messages acknowledged before it, the single-process answer's ``after``; its clock (``now_t``,
  and ``from_seq`` for ``last``) comes from the window's timestamps the engine keeps.
* **Staged at that position**: the writes pending staging are staged first, then the query is
  written as one command file ``in/commands/part-<r>-<r>.q<n>.parquet`` (``r``: the last log
  record before it; ``n``: its ordinal, one past the largest staged), which sorts after the
  command files of the records before it and before those after it.  Since the source lists the
  messages before the commands and every later message file is written after it, no batch holds
  a message after the query without the query: the partitions answer it at its position.
* **Answered from the batch's answer files**: the tailer, once a batch is complete, reads its
  answer lines (:func:`skype.dskype.snapshots.batch_partials`) for the queries waiting and
  merges each query's partials (one for a whole-window method, else one per partition) as
  ``distributed --answers-out`` does.  A query before any message is answered at once (the
  window is empty).
* **Bounded**: the request waits at most ``query_timeout_s`` (then 503, E139: the query stays
  staged and is answered later, unread).  A killed driver re-runs its batches from the
  checkpoint, so a waiting query is answered by the new driver; a killed service loses its
  waiting requests (their connections close), never the stream: their queries are answered
  into ``answers/`` unread, and the ordinals continue after them.

Registering a waiting query comes before its file is written, so the tailer cannot pass the
batch that holds it unseen.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skype.dskype import snapshots
from skype.errors import InputError, OperationalError
from skype.service.state import query_record

WHERE = "serve --engine spark"


@dataclass
class Waiting:
    """A staged query waiting for its batch: what its line needs, and the partials read so far."""

    qid: Any
    at: int
    kind: str
    k: int
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    parts: dict[int, dict] = field(default_factory=dict)


class PendingAnswer:
    """What the engine thread returns for a staged query: the route awaits it (at most the
    timeout) and gets the answers-file line ``{"qid", "after", "kind", "answer"}``."""

    def __init__(self, queries: LiveQueries, n: int, waiting: Waiting) -> None:
        self.queries, self.n, self.waiting = queries, n, waiting

    def __await__(self):
        return self._wait().__await__()

    async def _wait(self) -> dict:
        timeout = self.queries.timeout_s
        try:
            return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(self.waiting.future)), timeout)
        except asyncio.TimeoutError:
            self.queries.forget(self.n)
            raise OperationalError("E139", qid=self.waiting.qid, at=self.waiting.at, seconds=timeout) from None


class LiveQueries:
    """The staged queries of one service (module docstring): ``stage`` on the engine thread,
    ``batch_done`` on the tailer, in batch order."""

    def __init__(self, run_dir: Path, method: str, partitions: int, bounds: Any, window: int,
                 timeout_s: float) -> None:
        from skype.dskype.plan import RunSettings, summarised_methods
        from skype.partitioning.capabilities import capabilities_of

        self.method, self.bounds, self.timeout_s = method, bounds, float(timeout_s)
        self.run_dir = Path(run_dir)
        self.kept: bool | None = None  # whether the run keeps the query window (window_kept)
        self.answers_dir = Path(run_dir) / "answers" / method
        self.need = 1 if capabilities_of(method).whole_window else int(partitions)
        settings = RunSettings.from_options({"method": method, "partitions": partitions, "window": window}, bounds)
        self.summarised = bool(summarised_methods(settings))
        self.next = staged_queries(Path(run_dir) / "in" / "commands")
        self.waiting: dict[int, Waiting] = {}
        self.lock = threading.Lock()
        self.answered = 0

    def stage(self, state: Any, rec: Any, writer: Any) -> dict | PendingAnswer:
        """On the engine thread: check and compile ``rec`` (module docstring), stage it, and
        return what the route awaits (the line itself for a query before any message)."""
        q = query_record(rec)
        at = int(state.position)
        mark = len(state.vocabulary)
        try:
            spec, asked = snapshots.lower_query(q, self.next, state.vocabulary, self.bounds, at,
                                                state.engine.window_times())
        finally:
            state.vocabulary.forget_from(mark)
        snapshots.refuse_live(q, self.method, self.summarised, WHERE)
        if not self.window_kept():
            raise InputError("E138", where=WHERE, reason="this data directory's Spark run was planned without the "
                                                         "query window (before the service staged queries)")
        if at == 0:  # no message yet: the window is empty, as the single-process engine's
            return {"qid": asked["qid"], "after": 0, "kind": asked["kind"], "answer": []}
        n = self.next
        waiting = Waiting(asked["qid"], at, asked["kind"], int(asked["k"]))
        with self.lock:
            self.waiting[n] = waiting  # before the file: the tailer cannot miss its batch
        try:
            writer.query(n, at, spec)
        except BaseException:
            self.forget(n)
            raise
        self.next += 1
        return PendingAnswer(self, n, waiting)

    def window_kept(self) -> bool:
        """Whether the partitions' engines keep the query window: a run planned by this version
        (``run.json``'s engine options; not planned yet: it will be, with the window)."""
        if self.kept is None:
            meta = self.run_dir / "run.json"
            if not meta.exists():
                return True
            options = json.loads(meta.read_text())["settings"].get("engine_options", {})
            self.kept = bool(options.get("snapshots"))
        return self.kept

    def forget(self, n: int) -> None:
        with self.lock:
            self.waiting.pop(n, None)

    def batch_done(self, batch: int) -> None:
        """On the tailer, once ``batch`` is complete: answer the waiting queries it holds."""
        with self.lock:
            if not self.waiting:
                return
        for n, parts in snapshots.batch_partials(self.answers_dir, batch).items():
            with self.lock:
                waiting = self.waiting.get(n)
                if waiting is None:
                    continue
                waiting.parts.update(parts)
                if len(waiting.parts) < self.need:
                    continue
                del self.waiting[n]
            answer = snapshots.merge_partials(waiting.kind, waiting.k,
                                              [waiting.parts[p] for p in sorted(waiting.parts)])
            self.answered += 1
            try:
                waiting.future.set_result({"qid": waiting.qid, "after": waiting.at, "kind": waiting.kind,
                                           "answer": answer})
            except concurrent.futures.InvalidStateError:  # cancelled: the request went away
                pass


def query_file_name(last_record: int, n: int) -> str:
    """The command file of query ``n`` staged after log record ``last_record`` (module docstring).

    >>> sorted([query_file_name(4, 2), "part-000000000005-000000000009.parquet",
    ...         "part-000000000003-000000000004.parquet"])[1]
    'part-000000000004-000000000004.q00000002.parquet'
    """
    return f"part-{last_record:012d}-{last_record:012d}.q{n:08d}.parquet"


def staged_queries(commands_dir: Path) -> int:
    """One past the largest query ordinal staged in ``commands_dir`` (0: none)."""
    last = -1
    if commands_dir.is_dir():
        for path in commands_dir.glob("part-*.q*.parquet"):
            last = max(last, int(path.name.split(".")[1][1:]))
    return last + 1
