"""The service's engine state: commands in, result-change events out (one thread only).

A command is what the log stores: ``{"op": "sub", "rec", "token_hash"}``, ``{"op": "unsub",
"id"}``, ``{"op": "msgs", "recs"}``, ``{"op": "advance", "t"}``, and the bulk ones
``{"op": "subs", "ndjson", "token_hashes"}`` (atomic: every record or none, registered through
the engine's bulk path) and ``{"op": "unsubs", "ids"}``.  Owner tokens are kept and logged as
hashes only (:mod:`~skype.service.auth`; an older log's plain ``token`` is hashed on replay).  :meth:`State.apply` validates a
command completely against the current state, through the same parsers and checks as
``simulate`` (``skype.io``, ``skype.validate``, the engine's own batch checks), and either
raises an :class:`~skype.errors.InputError` having changed nothing (the vocabulary's new terms
are rolled back too) or applies it and returns the events it caused.  Applying the same
commands in the same order gives the same results, event ``seq`` numbers and term ids, which is
what makes a log replay (and a snapshot followed by a replay) reproduce the state exactly.

Events are net per command: for each subscription whose result differs before and after a
command, the entries that entered (shaped as in the results file, taken from the result after
the command) and the ids that left (terms for ``terms``).  Subscriptions in ascending id
order; ``seq`` increases by one per event.  A command's events are one
:class:`~skype.service.events.EventBlock` (columns, built with numpy from the engine's change
log, netted with one stable sort, and one ``topk_ranks`` call that gives the rank and score of
every entered entry: no Python object per top-k event, no changed top-k read whole).

A message batch is either records (``{"op": "msgs", "recs"}``: design 1, validated record by
record) or an NDJSON body (``{"op": "msgs", "ndjson"}``: design 2, :mod:`skype.service.ingest`,
which hands a batch it refuses to design 1 to name the error).  ``apply``'s ``before`` hook (the
log append) runs after every check and before the engine changes (see :meth:`State.apply`).
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any, Callable

import numpy as np

from skype import io, queries, validate
from skype.api import ChangeLog, EngineBase
from skype.workload import messages_batch, subscriptions_batch
from skype.errors import InputError
from skype.model import Subscription
from skype.service import ingest
from skype.service.auth import stored_owner
from skype.service.ingest import Counters
from skype.service.events import EventBlock
from skype.service.window import WindowRecords
from skype.text import Vocabulary

ENTRY_KEY = {"topk": lambda e: e["id"], "knn": lambda e: e["id"], "range": lambda e: e,
             "terms": lambda e: e["term"]}


MESSAGE_FIELDS = ("id", "x", "y", "t", "text", "terms")  # a message record's fields, as GET /v1/messages answers


def _line_error(err: InputError, line: int) -> InputError:
    return err.located(line=line)


_EMPTY_I = np.zeros(0, np.int64)
_EMPTY_F = np.zeros(0, np.float64)


def _by_sub_then_message(sub: np.ndarray, msg: np.ndarray) -> np.ndarray:
    """The stable order of the pairs ``(sub[i], msg[i])``: by ``sub``, then ``msg``, then
    position (``np.lexsort((msg, sub))``).  One stable sort of a combined key when both spans
    fit in it together (as a stream's ids do), else the two-key sort."""
    if len(sub) < 2:
        return np.arange(len(sub), dtype=np.int64)
    s0, m0 = int(sub.min()), int(msg.min())
    s_span, m_span = int(sub.max()) - s0 + 1, int(msg.max()) - m0 + 1
    if s_span * m_span >= 1 << 62:
        return np.lexsort((msg, sub))
    return np.argsort((sub - s0) * m_span + (msg - m0), kind="stable")


def pack_record(rec: dict) -> bytes:
    """A subscription record as the state keeps it: compact JSON."""
    return json.dumps(rec, separators=(",", ":"), ensure_ascii=False).encode()


def _nothing(cmd: dict) -> None:
    return None


def query_record(rec: Any) -> dict:
    """A posted snapshot query, checked: a JSON object (E033), ``qid`` 0 when absent, a valid
    kind and id; its fields are checked when it is answered."""
    if not isinstance(rec, dict):
        raise InputError("E033", kind="query", value=rec)
    q = io.query_from_obj({"qid": 0, **rec})
    validate.check_id(q["qid"])
    return q

class State:
    """Engine, subscription records and event numbering (see module docstring)."""

    def __init__(self, make_engine: Callable[[Vocabulary], EngineBase], vocabulary: Vocabulary | None = None,
                 ingest: str = "columnar", max_records: int = 100_000) -> None:
        self.make_engine = make_engine
        self.vocabulary = vocabulary if vocabulary is not None else Vocabulary()
        self.engine = make_engine(self.vocabulary)
        self.records: dict[int, bytes] = {}  # subscription id -> its record (as PUT), compact JSON
        self.tokens: dict[int, str] = {}     # subscription id -> owner token's hash (auth.owner_hash)
        self.other_kinds: set[int] = set()   # the subscriptions of another kind than topk
        self.subs_version = 0                # changes with every change of ``records`` or ``tokens``
        self.position = 0                    # messages accepted so far
        self.seq = 0                         # seq of the last event emitted
        self.ingest = ingest                 # "columnar" (design 2) or "records" (design 1)
        self.max_records = max_records       # records per NDJSON batch (E092)
        self.counters = Counters()           # per-message Python work of the ingest
        # the records of the messages in the window, oldest first
        self.window = WindowRecords(self.engine.window, self.engine.window_seconds)
        self.sorted_ids_cache: tuple[int, np.ndarray] = (-1, _EMPTY_I)  # (subs_version, ids ascending): manysubs
        self.restored_by = ""  # how restore registered the subscriptions: "engine state", "columns" or "records"

    @property
    def window_size(self) -> int:
        """Messages in the window (kept by :class:`WindowRecords`, no engine call)."""
        return len(self.window)

    # ------------------------------------------------------------------ commands
    def apply(self, cmd: dict, lines: list[int] | None = None,
              before: Callable[[dict], object] | None = None) -> tuple[Any, list[EventBlock]]:
        """Apply one command; returns (reply, events).  Raises InputError changing nothing
        (naming, for messages, the record's line: ``lines[i]``, default ``i + 1``).

        ``before(cmd)`` (the log append) runs once the command is known to be valid and before
        the engine changes, for messages and advances; for a subscription change it runs after
        the engine applied it, and an exception from it undoes the change.  Either way, when
        ``before`` raises, the state is as it was."""
        op = cmd["op"]
        mark = len(self.vocabulary)
        before = before or _nothing
        try:
            if op == "msgs":
                if "ndjson" in cmd:
                    return self._messages_ndjson(cmd["ndjson"].encode(), before, cmd)
                return self._messages(cmd["recs"], lines, before, cmd)
            if op == "sub":
                owner = cmd["token_hash"] if "token_hash" in cmd else stored_owner(cmd.get("token", ""))
                return self._subscribe(cmd["rec"], owner, before, cmd)
            if op == "unsub":
                return self._unsubscribe(cmd["id"], before, cmd)
            if op == "subs":
                from skype.service import manysubs  # it builds on this module

                return manysubs.subscribe_many(self, cmd, before)
            if op == "unsubs":
                from skype.service import manysubs

                return manysubs.unsubscribe_many(self, cmd["ids"], before, cmd)
            if op == "advance":
                return self._advance(cmd["t"], before, cmd)
        except BaseException:
            self._rollback_vocabulary(mark)
            raise
        raise InputError("E018", op=op)

    def _rollback_vocabulary(self, mark: int) -> None:
        self.vocabulary.forget_from(mark)

    def _check_records(self, recs: list, numbers: list[int] | None) -> tuple[list[tuple], dict[int, int]]:
        """Design 1: every record parsed and validated in Python, in order."""
        rows: list[tuple] = []
        lines: dict[int, int] = {}
        last_t = self.engine.clock
        for i, obj in enumerate(recs):
            line = numbers[i] if numbers else i + 1
            try:
                if not isinstance(obj, dict):
                    raise InputError("E033", kind="message", value=obj)
                msg = io.message_from_obj(obj)
                row = validate.check_message(msg, self.vocabulary, self.engine.bounds,
                                             default_t=float(self.position + len(rows)))
                if row[3] < last_t:
                    raise InputError("E009", t=row[3], prev=last_t, record_id=row[0])
                if row[0] in lines:
                    raise InputError("E019", id=row[0], record_id=row[0])
            except InputError as err:
                raise _line_error(err, line) from None
            last_t = row[3]
            lines[row[0]] = line
            rows.append(row)
        self.counters.fallback_records += len(rows)
        return rows, lines

    def _messages(self, recs: list, numbers: list[int] | None, before: Callable[[dict], object],
                  cmd: dict) -> tuple[Any, list[EventBlock]]:
        rows, lines = self._check_records(recs, numbers)
        if not rows:
            return {"accepted": 0, "position": self.position}, []
        batch = messages_batch(rows)
        log = self._publish(batch, lambda rid: lines.get(rid), before, cmd)
        self.window.add(batch.ids, batch.t, recs=recs, batch=batch)
        return self._published(log)

    def _messages_ndjson(self, raw: bytes, before: Callable[[dict], object], cmd: dict) -> tuple[Any, list[EventBlock]]:
        """Design 2 (:mod:`skype.service.ingest`); a batch it refuses goes through design 1,
        which names the error (or, should it accept the batch, publishes it)."""
        starts, numbers = ingest.record_lines(raw)
        if len(starts) > self.max_records:
            raise InputError("E092", n=f"more than {self.max_records}", limit=self.max_records)
        if len(starts) == 0:
            raise InputError("E105", expected="NDJSON message records")
        batch = None
        if self.ingest == "columnar":
            mark = len(self.vocabulary)
            try:
                batch = ingest.columnar_batch(raw, len(starts), self.vocabulary, self.engine.bounds, self.position,
                                              self.engine.clock, self.counters)
            except ingest.Rejected:
                self._rollback_vocabulary(mark)
        if batch is None:
            recs, lines = ingest.parse_records(raw)
            rows, _ = self._check_records(recs, lines)
            batch = messages_batch(rows)
        ids = batch.ids
        line_of = lambda rid: int(numbers[int(np.flatnonzero(ids == rid)[0])])  # noqa: E731 (errors only)
        log = self._publish(batch, line_of, before, cmd)
        self.window.add(batch.ids, batch.t, raw=raw, starts=starts, batch=batch)
        return self._published(log)

    def _publish(self, batch: Any, line_of: Callable[[int], int | None], before: Callable[[dict], object],
                 cmd: dict) -> ChangeLog:
        """The engine's own checks that need its window (an id still in it: E019), then
        ``before`` (the log append), then the engine's batch call."""
        in_window = self.engine.window_has(batch.ids)
        if in_window.any():
            dup = int(batch.ids[np.argmax(in_window)])
            raise _line_error(InputError("E019", id=dup, record_id=dup), line_of(dup) or 1)
        before(cmd)
        try:
            return self.engine.publish_batch(batch)
        except InputError as err:  # its checks are the ones above: not expected
            at = line_of(err.record_id) if isinstance(err.record_id, int) else None
            raise (_line_error(err, at) if at else err) from None

    def _published(self, log: ChangeLog) -> tuple[Any, list[EventBlock]]:
        n = len(self.window.chunks[-1].ids)
        self.position += n
        self.window.trim(self.engine.clock)
        return {"accepted": n, "position": self.position}, self._events(log)

    def _subscribe(self, rec: Any, token: str, before: Callable[[dict], object], cmd: dict) -> tuple[Any, list[EventBlock]]:
        if not isinstance(rec, dict):
            raise InputError("E033", kind="subscription", value=rec)
        sub = io.subscription_from_obj(rec)
        sid = validate.check_id(rec["id"])
        if not isinstance(sub, Subscription):
            self.open_queries()
        events: list[EventBlock] = []
        old = self.record(sid)
        old_keys: list = []
        if old is not None:
            old_keys = self._entries(sid)
            self.engine.unsubscribe(sid)
        try:
            self.engine.subscribe(sub)
        except InputError:
            if old is not None:
                self.engine.subscribe(io.subscription_from_obj(old))
            raise
        try:
            before(cmd)
        except BaseException:  # not logged: undo
            self.engine.unsubscribe(sid)
            if old is not None:
                self.engine.subscribe(io.subscription_from_obj(old))
            raise
        self.records[sid] = pack_record(rec)
        self.tokens[sid] = self.tokens.get(sid, token) if old is not None else token
        self.subs_version += 1
        kind = self.engine.kind_of(sid)
        if kind == "topk":
            self.other_kinds.discard(sid)
        else:
            self.other_kinds.add(sid)
        after = io.answer_entries(kind, self.engine.result(sid))
        left = [k for k in old_keys if k not in {ENTRY_KEY[kind](e) for e in after}] if old is not None else []
        kept = set(old_keys) if old is not None else set()
        entered = [e for e in after if ENTRY_KEY[kind](e) not in kept]
        events.append(EventBlock.single(self._event(sid, entered, left)))
        return {"id": sid, "position": self.position, "created": old is None}, events

    def _unsubscribe(self, sid: Any, before: Callable[[dict], object], cmd: dict) -> tuple[Any, list[EventBlock]]:
        sid = validate.check_id(sid)
        if sid not in self.records:
            raise InputError("E020", id=sid, record_id=sid)
        left = self._entries(sid)
        before(cmd)
        self.engine.unsubscribe(sid)
        del self.records[sid]
        self.tokens.pop(sid, None)
        self.other_kinds.discard(sid)
        self.subs_version += 1
        return {"id": sid, "position": self.position}, [EventBlock.single(self._event(sid, [], left, removed=True))]

    def _advance(self, t: Any, before: Callable[[dict], object], cmd: dict) -> tuple[Any, list[EventBlock]]:
        if self.engine.window_seconds is None:
            raise InputError("E023", what="advance", expected="used with a time window (--window-seconds)", value=t)
        ft = validate.check_timestamp(t)  # the engine's checks, before the log append
        if ft < self.engine.clock:
            raise InputError("E009", t=ft, prev=self.engine.clock)
        before(cmd)
        log = self.engine.advance_log(t)
        self.window.trim(self.engine.clock)
        return {"t": self.engine.clock, "position": self.position}, self._events(log)

    # ------------------------------------------------------------------ events and results
    def _entries(self, sid: int) -> list:
        """The keys of a subscription's current result entries (ids; terms for terms)."""
        kind = self.engine.kind_of(sid)
        return [ENTRY_KEY[kind](e) for e in io.answer_entries(kind, self.engine.result(sid))]

    def _event(self, sid: int, entered: list, left: list, removed: bool = False) -> dict:
        self.seq += 1
        ev = {"sub": sid, "seq": self.seq, "position": self.position, "entered": entered, "left": left}
        if removed:
            ev["removed"] = True
        return ev

    def _events(self, log: ChangeLog) -> list[EventBlock]:
        """The net changes of a command as one :class:`EventBlock` (module docstring): columns
        for top-k subscriptions, objects for the other kinds and for ended subscriptions of
        other kinds; no Python object per top-k event."""
        n = len(log)
        ended = np.array(sorted(sid for sid in self.engine.ended_subscriptions() if sid in self.records), np.int64)
        if n:
            order = _by_sub_then_message(log.sub, log.msg)  # then time (a stable sort)
            sub, msg, ent = log.sub[order], log.msg[order], log.entered[order]
            starts = np.flatnonzero(np.r_[True, (sub[1:] != sub[:-1]) | (msg[1:] != msg[:-1])])
            ends = np.r_[starts[1:], n] - 1
            changed = ent[starts] == ent[ends]  # in before and out after, or the reverse
            s, m, e = sub[starts][changed], msg[starts][changed], ent[ends][changed]
        else:
            s, m, e = _EMPTY_I, _EMPTY_I, np.zeros(0, bool)
        distinct = s[np.r_[True, s[1:] != s[:-1]]] if len(s) else _EMPTY_I  # s is sorted
        subs = np.union1d(distinct, ended) if len(ended) else distinct
        count = len(subs)
        if count == 0:
            return []
        seq0 = self.seq + 1
        self.seq += count
        ev = np.searchsorted(subs, s)  # the event of each net change
        is_ended = np.isin(subs, ended)
        other = np.isin(subs, np.fromiter(self.other_kinds, np.int64, len(self.other_kinds))) \
            if self.other_kinds else np.zeros(count, bool)
        topk_ev = np.flatnonzero(~is_ended & ~other)
        # entered entries of top-k events: their rank and score in the current top-k
        is_topk = np.zeros(count, bool)
        is_topk[topk_ev] = True
        pick = e & is_topk[ev]
        ent_ev, ent_msg = ev[pick], m[pick]  # by event, then message id
        # their rank and score in the top-k after the command, from the engine in one call
        rank, score = self.engine.topk_ranks(s[pick], ent_msg) if len(ent_ev) else (_EMPTY_I, _EMPTY_F)
        assert (rank >= 0).all(), "an entered message is missing from its top-k"
        at = _by_sub_then_message(ent_ev, rank)  # each event's entries in ranking order
        ent_ptr = np.zeros(count + 1, np.int64)
        np.cumsum(np.bincount(ent_ev, minlength=count), out=ent_ptr[1:])
        left_ev, left_ids = ev[~e], m[~e]
        left_ptr = np.zeros(count + 1, np.int64)
        np.cumsum(np.bincount(left_ev, minlength=count), out=left_ptr[1:])
        objects: dict[int, dict] = {}
        for i in np.flatnonzero(other | is_ended).tolist():
            sid = int(subs[i])
            kind = json.loads(self.records[sid]).get("kind", "topk")
            mine = ev == i
            entered_ids, left_l = m[mine & e].tolist(), m[mine & ~e].tolist()
            if kind == "terms":
                entered_keys: set = {self.vocabulary.term(t) for t in entered_ids}
                left_l = [self.vocabulary.term(t) for t in left_l]
            else:
                entered_keys = set(entered_ids)
            obj: dict[str, Any] = {"sub": sid, "seq": seq0 + i, "position": self.position}
            if is_ended[i]:
                obj.update(entered=[], left=left_l, removed=True)
                self.records.pop(sid, None)
                self.tokens.pop(sid, None)
                self.other_kinds.discard(sid)
                self.subs_version += 1
            else:
                after = io.answer_entries(kind, self.engine.result(sid))
                obj.update(entered=[x for x in after if ENTRY_KEY[kind](x) in entered_keys], left=left_l)
            objects[i] = obj
        return [EventBlock(seq0, subs, self.position, ent_ptr=ent_ptr, ent_ids=ent_msg[at], ent_scores=score[at],
                           left_ptr=left_ptr, left_ids=left_ids, removed=is_ended, objects=objects)]

    def record(self, sid: int) -> dict | None:
        """Subscription ``sid``'s record as it was PUT, or None."""
        packed = self.records.get(sid)
        return None if packed is None else json.loads(packed)

    def result_line(self, sid: int) -> dict:
        sid = validate.check_id(sid)
        if sid not in self.records:
            raise InputError("E020", id=sid, record_id=sid)
        return next(io.kind_result_objects([(sid, self.engine.kind_of(sid), self.engine.result(sid))]))

    def results_ndjson(self) -> bytes:
        lines = (json.dumps(obj, ensure_ascii=False, allow_nan=False)
                 for obj in io.kind_result_objects(self.engine.results_by_kind()))
        return "".join(line + "\n" for line in lines).encode()

    def open_queries(self) -> None:
        """The engine's query window, kept from the first command that needs it on (a snapshot
        query, a subscription of another kind than topk: ``serve --queries lazy``), built from
        the window's messages as the engine was given them (:meth:`skype.Engine.open_queries`).
        An engine that keeps it from the start, or has no such verb, is left as it is."""
        open_queries = getattr(self.engine, "open_queries", None)
        if open_queries is not None and not getattr(self.engine, "queries_open", True):
            batch = self.window.batch()
            assert batch is not None, "every window chunk keeps the engine's batch"
            open_queries(batch)

    def query(self, rec: Any) -> dict:
        q = query_record(rec)
        fields = {k: v for k, v in q.items() if k not in ("qid", "kind")}
        self.open_queries()
        mark = len(self.vocabulary)
        try:
            answer = self.engine.query(q["kind"], **fields)
        finally:
            self._rollback_vocabulary(mark)
        return {"qid": q["qid"], "after": self.position, "kind": q["kind"],
                "answer": io.answer_entries(q["kind"], answer)}

    # ------------------------------------------------------------------ snapshots
    def window_records(self) -> list[tuple[int, float, dict]]:
        """The records of the messages in the window, oldest first."""
        return self.window.records()

    def last_messages(self, n: int) -> list[dict]:
        """The records of the newest ``n`` messages in the window, oldest first, shaped as
        message records: ``id``, ``x``, ``y``, ``t`` and ``text`` or ``terms``."""
        if n <= 0:
            return []
        return [{k: rec[k] for k in MESSAGE_FIELDS if k in rec} for rec in self.window.newest(n)]

    def engine_state(self) -> dict[str, np.ndarray] | None:
        """The engine's state for a snapshot (:meth:`skype.Engine.export_state`: the top-k
        subscriptions as registered, with their buffers), or None for an engine without it."""
        export = getattr(self.engine, "export_state", None)
        return export() if export is not None else None

    def restore(self, meta: dict, subs: tuple[list[int], list[bytes], list[str]], window: tuple,
                engine_state: dict[str, np.ndarray] | None = None) -> None:
        """Rebuild from a snapshot (:func:`skype.service.snapshot.read`): the window's messages
        first (the engine's batch as the snapshot kept it, else decoded from their texts), then
        every subscription: imported with its buffer from ``engine_state`` when the snapshot
        kept one that fits (:meth:`_restore_from_engine_state`), else in bulk (topk through
        ``subscribe_batch``).  ``subs`` is three columns: ids, records' JSON texts (kept as
        they are: the live state's bytes) and owner tokens."""
        self.vocabulary = type(self.vocabulary).from_dict(meta["vocabulary"])
        engine = self.engine = self.make_engine(self.vocabulary)
        self.window = WindowRecords(engine.window, engine.window_seconds)
        texts, ts = window[:2]
        batch = window[2] if len(window) > 2 else None  # the engine's batch, when the snapshot kept it
        if texts:  # else the columnar path, as the batches were published (design 1 if it refuses)
            raw = b"\n".join(texts)
            starts, _ = ingest.record_lines(raw)
            t = np.asarray(ts, np.float64)
            mark = len(self.vocabulary)
            try:
                if batch is None:
                    batch = ingest.columnar_batch(raw, len(starts), self.vocabulary, engine.bounds, 0, -math.inf,
                                                  t=t)
            except ingest.Rejected:
                self._rollback_vocabulary(mark)
                rows = [validate.check_message(io.message_from_obj(dict(json.loads(text), t=float(tm))),
                                               self.vocabulary, engine.bounds, default_t=0.0)
                        for text, tm in zip(texts, t.tolist())]
                batch = messages_batch(rows)
            for start in range(0, len(batch.ids), 10_000):
                engine.publish_batch(batch.slice(start, min(start + 10_000, len(batch.ids))))
            self.window.add(batch.ids, batch.t, raw=raw, starts=starts, batch=batch)
        clock = float(meta["clock"]) if meta["clock"] is not None else -math.inf
        if engine.window_seconds is not None and clock > engine.clock:
            engine.advance_log(clock)
        engine.restore_position(clock, int(meta["position"]))
        self.position, self.seq = int(meta["position"]), int(meta["seq"])
        ids, packed, tokens = subs
        packed = [p if isinstance(p, bytes) else p.encode() for p in packed]
        if engine_state is not None and self._restore_from_engine_state(ids, packed, engine_state, clock):
            self.restored_by = "engine state"
        elif packed and self._restore_topk_by_columns(packed, clock):
            self.restored_by = "columns"
        else:
            self._restore_by_records(ids, packed, clock)
            self.restored_by = "records"
        self.records = dict(zip(ids, packed))
        self.tokens = dict(zip(ids, map(stored_owner, tokens)))
        self.subs_version += 1  # the checks above read the (empty) ids: no stale page of them

    def _restore_from_engine_state(self, ids: list[int], packed: list[bytes], engine_state: dict[str, np.ndarray],
                                   clock: float) -> bool:
        """The top-k subscriptions imported with their buffers as the snapshot's engine kept
        them (``Engine.import_state``: no registration search), the rest (other kinds) record
        by record.  False, with nothing registered, when the engine cannot import, or the
        state names a subscription the snapshot's records do not hold, or the engine refuses it
        (E160: said on stderr); the caller then registers every subscription."""
        import_state = getattr(self.engine, "import_state", None)
        if import_state is None:
            return False
        all_ids = np.asarray(ids, np.int64)
        in_state = np.isin(all_ids, np.asarray(engine_state.get("ids", _EMPTY_I)))
        why = None
        if int(in_state.sum()) != len(engine_state.get("ids", _EMPTY_I)):
            why = "it names subscriptions the snapshot's records do not hold"
        else:
            try:
                import_state(engine_state)
            except InputError as err:
                why = str(err)
        if why is not None:
            print(f"skype serve: the snapshot's engine state is not used ({why}); registering the subscriptions "
                  f"again", file=sys.stderr)
            return False
        rest = np.flatnonzero(~in_state).tolist()
        if rest:  # the other kinds (and any record the state lacks)
            self._restore_by_records([ids[i] for i in rest], [packed[i] for i in rest], clock)
        return True

    def _restore_by_records(self, ids: list[int], packed: list[bytes], clock: float) -> None:
        """A snapshot's subscriptions record by record (any kind; the columnar checks refused)."""
        topk_rows, others = [], []
        for sid, line in zip(ids, packed):
            sub = io.subscription_from_obj(json.loads(line))
            if isinstance(sub, Subscription):
                row = validate.check_subscription(sub, self.vocabulary, self.engine.bounds)
                topk_rows.append(row + (queries.check_until(sub.until, clock),))
            else:
                others.append(sub)
                self.other_kinds.add(sid)
        if topk_rows:
            self.engine.subscribe_batch(subscriptions_batch(topk_rows))
        if others:
            self.open_queries()
            self.engine.subscribe_batch(others)

    def _restore_topk_by_columns(self, packed: list[bytes], clock: float) -> bool:
        """Register a snapshot's subscriptions through the bulk call's columnar checks when every
        one is a topk record those checks accept (one typed decode, vectorised checks, weights
        bit for bit the record path's): no Python object per subscription.  False, with nothing
        registered and the vocabulary as it was, when they refuse the body; the caller then
        takes the record-by-record path."""
        from skype.service import manysubs  # it builds on this module

        mark = len(self.vocabulary)
        try:
            _, batch, _ = manysubs.columnar_topk(b"\n".join(packed), len(packed), self, clock)
        except ingest.Rejected:
            self._rollback_vocabulary(mark)
            return False
        self.engine.subscribe_batch(batch)
        return True

    def meta(self) -> dict:
        clock = self.engine.clock
        return {"position": self.position, "seq": self.seq, "clock": clock if math.isfinite(clock) else None,
                "vocabulary": self.vocabulary.to_dict()}
