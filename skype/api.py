"""The engine API shared by :class:`skype.Engine` and :class:`skype.reference.ReferenceEngine`.

:class:`EngineBase` owns validation, the vocabulary and the clock; subclasses implement the
vector-level methods (``_subscribe_batch``, ``_publish_batch``...).  The contract:

* ``subscribe(sub)`` registers a subscription and returns its initial top-k over the current
  window; ``subscribe_batch(batch)`` registers many (a columnar ``SubscriptionBatch`` or records
  of any kind) without reading their results; ``unsubscribe(id)`` removes one.  All interleave
  freely with the stream.
* ``publish(msg)`` expires what leaves the window, then inserts ``msg``, and returns the result
  changes it caused: for every subscription whose top-k differs before and after, the message
  ids that entered and that left.  ``publish_batch`` does the same for many messages at once and
  returns a columnar :class:`ChangeLog`.
* Count window of N: after a message arrives the window holds the N newest messages.  Time
  window of T seconds: after a message with timestamp t arrives (or ``advance(t)``), the window
  holds exactly the messages with timestamp in ``(t - T, t]``.
* Message ids must be unique among the messages in the window (and within a batch).
* Kinds (``skype.queries``, ``docs/queries.md``): ``subscribe`` also takes range, knn and terms
  subscriptions, which the engine dispatches to its :class:`~skype.querykinds.QueryKinds`; one id
  space holds every kind.  ``until`` ends a subscription of any kind when the clock passes it:
  before the first message with ``t > until`` (or ``advance`` past it), its results leave, in
  that message's changes.  ``query`` answers a snapshot query over the current window.
"""

from __future__ import annotations

import abc
import heapq
import math
from typing import TYPE_CHECKING, Any, Iterable, Iterator

import numpy as np

from skype.errors import InputError
from skype.model import (
    DEFAULT_BOUNDS,
    Bounds,
    ChangeLog,
    Match,
    Message,
    MessageBatch,
    ResultChange,
    Subscription,
    SubscriptionBatch,
    TermMatrix,
)
from skype.text import Vocabulary
from skype import queries, validate

if TYPE_CHECKING:
    from skype.querykinds import QueryKinds


class EngineBase(abc.ABC):
    """Validation, vocabulary and clock for every engine (see module docstring)."""

    def __init__(
        self,
        *,
        window: int | None = None,
        window_seconds: float | None = None,
        bounds: Bounds | tuple[float, float, float, float] = DEFAULT_BOUNDS,
        vocabulary: Vocabulary | None = None,
    ) -> None:
        self.window, self.window_seconds = validate.check_window(window, window_seconds)
        self.bounds = bounds if isinstance(bounds, Bounds) else Bounds(*bounds)
        self.vocabulary = vocabulary if vocabulary is not None else Vocabulary()
        self._arrivals = 0  # messages published so far: the default timestamp of the next one
        self._clock = -math.inf  # largest timestamp seen (messages or advance)
        self._queries: QueryKinds | None = None  # set by subclasses that serve the other kinds
        self._kinds: dict[int, tuple[str, object]] = {}  # range/knn/terms subscription id -> (kind, handle)
        self._until: dict[int, float] = {}  # subscription id -> until
        self._until_heap: list[tuple[float, int]] = []  # (until, id), lazily deleted
        self._ended: dict[int, str] = {}  # kinds of the subscriptions the last step ended

    # ------------------------------------------------------------------ subscriptions
    def subscribe(self, sub: queries.AnySubscription) -> list:
        """Register ``sub`` (any kind); returns its initial result over the current window."""
        if not isinstance(sub, Subscription):
            sid = self._subscribe_kind(sub)
            return self.result(sid)
        sid, x, y, k, alpha, ids, weights = validate.check_subscription(sub, self.vocabulary, self.bounds)
        try:
            until = queries.check_until(sub.until, self._clock)
        except InputError as err:
            raise err.located(record_id=sid) from None
        if self.has_subscription(sid):
            raise InputError("E007", id=sid, record_id=sid)
        batch = SubscriptionBatch(np.array([sid]), np.array([x]), np.array([y]), np.array([k]), np.array([alpha]),
                                  TermMatrix(np.array([0, len(ids)]), ids, weights))
        self._subscribe_batch(batch)
        self._set_until(sid, until)
        return self.topk(sid)

    def _subscribe_kind(self, sub) -> int:
        spec = queries.compile_subscription(sub, self.vocabulary, self.bounds, self._clock)
        sid = int(spec.id)  # type: ignore[arg-type]
        if self.has_subscription(sid):
            raise InputError("E007", id=sid, record_id=sid)
        kinds = self._query_kinds(spec.kind)
        self._kinds[sid] = (spec.kind, kinds.subscribe(spec))
        self._set_until(sid, spec.until)
        return sid

    def _query_kinds(self, kind: str) -> QueryKinds:
        if self._queries is None:
            raise InputError("E050", kinds="range, knn, terms")
        return self._queries

    def _set_until(self, sid: int, until: float | None) -> None:
        if until is not None:
            self._until[sid] = until
            heapq.heappush(self._until_heap, (until, sid))

    def _next_until(self) -> float | None:
        while self._until_heap and self._until.get(self._until_heap[0][1]) != self._until_heap[0][0]:
            heapq.heappop(self._until_heap)
        return self._until_heap[0][0] if self._until_heap else None

    def _end_until(self, t: float) -> ChangeLog:
        """End every subscription with until < t; its current results leave (rows at 0)."""
        rows: list[tuple[int, int, bool]] = []
        while True:
            nxt = self._next_until()
            if nxt is None or not nxt < t:
                break
            _, sid = heapq.heappop(self._until_heap)
            rows.extend((sid, e, False) for e in sorted(self._entries(sid)))
            self._ended[sid] = self._kinds[sid][0] if sid in self._kinds else "topk"
            self.unsubscribe(sid)
        if not rows:
            return ChangeLog.empty()
        sub, msg, ent = zip(*rows)
        return ChangeLog(np.zeros(len(rows), np.int64), np.array(sub, np.int64), np.array(msg, np.int64),
                         np.array(ent, bool))

    def _entries(self, sid: int) -> list[int]:
        """A subscription's current result as change-log entries (message ids; term ids for terms)."""
        if sid in self._kinds:
            kind, handle = self._kinds[sid]
            return self._query_kinds(kind).result_entries(kind, handle)
        return [int(i) for i in self._topk(sid)[0]]

    def subscribe_batch(self, batch: SubscriptionBatch | Iterable[queries.AnySubscription | queries.QuerySpec]) -> None:
        """Register many subscriptions at once, without reading their initial results (bulk
        loading).  ``batch`` is either

        * a :class:`~skype.model.SubscriptionBatch`: topk subscriptions column-wise, with term ids
          of this engine's vocabulary (``batch.meta["until"]``, NaN for none, gives their ends);
          checked column-wise and registered in one call of the core; or
        * records of any kind (``Subscription``, ``RangeSubscription``...), each validated as by
          :meth:`subscribe`, and :class:`~skype.queries.QuerySpec` s compiled already (term ids of
          this engine's vocabulary: a distributed runtime validates each record once, where it
          enters), registered in order.
        """
        if not isinstance(batch, SubscriptionBatch):
            self._subscribe_records(batch)
            return
        validate.check_subscription_batch(batch, self.bounds)
        until = batch.meta.get("until")
        if until is not None:
            for i in np.flatnonzero(~np.isnan(until)):
                try:
                    queries.check_until(float(until[i]), self._clock)
                except InputError as err:
                    raise err.located(record_id=int(batch.ids[i])) from None
        known = self._known_subscriptions(batch.ids) | np.isin(batch.ids, np.fromiter(self._kinds, np.int64))
        if known.any():
            sid = int(batch.ids[np.argmax(known)])
            raise InputError("E007", id=sid, record_id=sid)
        self._reserve_terms(batch.terms)
        self._subscribe_batch(batch)
        if until is not None:
            for i in np.flatnonzero(~np.isnan(until)):
                self._set_until(int(batch.ids[i]), float(until[i]))

    def _subscribe_records(self, subs: Iterable[queries.AnySubscription | queries.QuerySpec]) -> None:
        for sub in subs:
            if isinstance(sub, Subscription):
                self.subscribe(sub)
            elif isinstance(sub, queries.QuerySpec):
                sid = validate.check_id(sub.id)
                if self.has_subscription(sid):
                    raise InputError("E007", id=sid, record_id=sid)
                self._kinds[sid] = (sub.kind, self._query_kinds(sub.kind).subscribe(sub))
                self._set_until(sid, sub.until)
            else:
                self._subscribe_kind(sub)
        if self._queries is not None:
            self._queries.prepare()

    def unsubscribe(self, sub_id: int) -> None:
        sid = validate.check_id(sub_id)
        if not self.has_subscription(sid):
            raise InputError("E008", id=sid, record_id=sid)
        self._until.pop(sid, None)
        if sid in self._kinds:
            kind, handle = self._kinds.pop(sid)
            self._query_kinds(kind).unsubscribe(kind, handle)
            return
        self._unsubscribe(sid)

    def has_subscription(self, sub_id: int) -> bool:
        return sub_id in self._kinds or bool(self._known_subscriptions(np.array([sub_id], dtype=np.int64))[0])

    def kind_counts(self) -> dict[str, int]:
        """Subscriptions per query kind: ``topk`` and each other kind the engine holds."""
        counts = {"topk": len(self.subscription_ids())}
        for kind, _ in self._kinds.values():
            counts[kind] = counts.get(kind, 0) + 1
        return counts

    def kind_of(self, sub_id: int) -> str:
        """``"topk"``, ``"range"``, ``"knn"`` or ``"terms"``."""
        sid = validate.check_id(sub_id)
        if sid in self._kinds:
            return self._kinds[sid][0]
        if not self.has_subscription(sid):
            raise InputError("E020", id=sid, record_id=sid)
        return "topk"

    # ------------------------------------------------------------------ messages
    def publish(self, msg: Message) -> list[ResultChange]:
        """Slide the window over ``msg``; returns the result changes it caused."""
        mid, x, y, t, ids, weights = validate.check_message(
            msg, self.vocabulary, self.bounds, default_t=float(self._arrivals)
        )
        batch = MessageBatch(np.array([mid]), np.array([x]), np.array([y]), np.array([t]),
                             TermMatrix(np.array([0, len(ids)]), ids, weights))
        return self.named_changes(self.publish_batch(batch))

    def named_changes(self, log: ChangeLog) -> list[ResultChange]:
        """``log.changes()`` with the entries of ``terms`` subscriptions as term names (call it
        right after the step that returned ``log``)."""
        out = []
        for c in log.changes():
            if self._kinds.get(c.sub_id, ("",))[0] == "terms" or self._ended.get(c.sub_id) == "terms":
                term = self.vocabulary.term
                c = ResultChange(c.sub_id, tuple(term(i) for i in c.entered), tuple(term(i) for i in c.left))  # type: ignore[misc]
            out.append(c)
        return out

    def publish_batch(self, batch: MessageBatch) -> ChangeLog:
        """Publish many messages in order; returns the changes, ``at`` = row in ``batch``."""
        validate.check_message_batch(batch, self.bounds, self._clock)
        uniq, counts = np.unique(batch.ids, return_counts=True)
        if len(uniq) != len(batch.ids):
            dup = int(uniq[np.argmax(counts > 1)])
            raise InputError("E019", id=dup, record_id=dup)
        in_window = self._window_has(batch.ids)
        if in_window.any():
            dup = int(batch.ids[np.argmax(in_window)])
            raise InputError("E019", id=dup, record_id=dup)
        if len(batch) == 0:
            return ChangeLog.empty()
        self._reserve_terms(batch.terms)
        self._ended.clear()
        logs, offsets = [], []
        start = 0
        while start < len(batch):
            # the rows before the first message past the next until, then the ends it causes
            nxt = self._next_until()
            stop = len(batch) if nxt is None else max(start, int(np.searchsorted(batch.t, nxt, side="right")))
            if stop > start:
                logs.append(self._publish_kinds(batch.slice(start, stop)))
                offsets.append(start)
                self._arrivals += stop - start
                self._clock = float(batch.t[stop - 1])
                start = stop
            if start < len(batch):
                logs.append(self._end_until(float(batch.t[start])))
                offsets.append(start)
        return self._merged(logs, offsets)

    @staticmethod
    def _merged(logs: list[ChangeLog], offsets: list[int]) -> ChangeLog:
        kept = [(log, off) for log, off in zip(logs, offsets) if len(log)]
        if not kept:
            return ChangeLog.empty()
        if len(kept) == 1:
            log, off = kept[0]
            return log if off == 0 else ChangeLog(log.at + off, log.sub, log.msg, log.entered)
        logs, offsets = [k[0] for k in kept], [k[1] for k in kept]
        log = ChangeLog.concat(logs, offsets)
        order = np.argsort(log.at, kind="stable")
        return ChangeLog(log.at[order], log.sub[order], log.msg[order], log.entered[order])

    def _publish_kinds(self, batch: MessageBatch) -> ChangeLog:
        log = self._publish_batch(batch)
        if self._queries is None:
            return log
        return self._merged([log, self._queries.publish(batch)], [0, 0])

    def advance(self, t: float) -> list[ResultChange]:
        """Time windows: move the clock to ``t`` and expire messages with timestamp <= t - T."""
        return self.named_changes(self.advance_log(t))

    def advance_log(self, t: float) -> ChangeLog:
        """:meth:`advance` with the changes as a columnar :class:`ChangeLog` (``at`` = 0)."""
        ft = validate.check_timestamp(t)
        if self.window_seconds is None:
            raise InputError("E023", what="advance()", expected="used with a time window (window_seconds)", value=t)
        if ft < self._clock:
            raise InputError("E009", t=ft, prev=self._clock)
        self._ended.clear()
        ended = self._end_until(ft)
        self._clock = ft
        logs = [ended, self._advance(ft)] + ([self._queries.advance(ft)] if self._queries is not None else [])
        return self._merged(logs, [0] * len(logs))

    # ------------------------------------------------------------------ results
    def topk(self, sub_id: int) -> list[Match]:
        sid = validate.check_id(sub_id)
        if not self.has_subscription(sid):
            raise InputError("E020", id=sid, record_id=sid)
        if sid in self._kinds:
            raise InputError("E048", where="topk()", kind=self._kinds[sid][0], supported="topk (use result())")
        ids, scores = self._topk(sid)
        return [Match(int(i), float(s)) for i, s in zip(ids, scores)]

    def result(self, sub_id: int) -> list:
        """The current result of a subscription of any kind: ``Match`` (topk), message ids
        (range, newest first), ``Neighbor`` (knn) or ``TermCount`` (terms)."""
        sid = validate.check_id(sub_id)
        if sid in self._kinds:
            kind, handle = self._kinds[sid]
            return self._query_kinds(kind).result(kind, handle)
        return self.topk(sid)

    def results_by_kind(self) -> Iterator[tuple[int, str, list]]:
        """Every subscription's result, by ascending id: (id, kind, result)."""
        ids = np.union1d(self.subscription_ids(), np.fromiter(self._kinds, np.int64, len(self._kinds)))
        for sid in ids:
            sid = int(sid)
            yield sid, self._kinds[sid][0] if sid in self._kinds else "topk", self.result(sid)

    def query(self, kind: str, **fields: Any) -> list:
        """A snapshot query over the current window (``docs/queries.md``): ``range`` (rect,
        text/terms, match), ``knn`` (x, y, k, text/terms, match), ``terms`` (rect, k) or
        ``topk`` (x, y, k, alpha, text/terms); each with an optional ``last`` (seconds: only
        messages with ``t > now - last``).  Answers are shaped as :meth:`result`."""
        spec = queries.compile_query(kind, fields, self.vocabulary, self.bounds, self._clock, snapshot=True)
        return self.query_spec(spec)

    def query_spec(self, spec: queries.QuerySpec, now: float | None = None) -> list:
        """:meth:`query` for a snapshot query compiled already (term ids of this engine's
        vocabulary), answered at ``now`` (default: the engine's clock; a distributed runtime
        answers at the query's own position in the stream)."""
        return self._query_kinds(spec.kind).snapshot(spec, self._clock if now is None else now)

    def topn(self, sub_id: int, n: int) -> list[Match]:
        """The ``n`` best window messages of a subscription in ranking order, whatever its k
        (a deeper look than ``topk``; used e.g. for safe routing thresholds)."""
        ids, scores = self.topn_arrays(sub_id, n)
        return [Match(int(i), float(s)) for i, s in zip(ids, scores)]

    def topn_arrays(self, sub_id: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`topn` as arrays ``(message ids, scores)``, in ranking order (no Python object
        per entry: a distributed runtime reads many of them per batch)."""
        sid = validate.check_id(sub_id)
        if not self.has_subscription(sid):
            raise InputError("E020", id=sid, record_id=sid)
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise InputError("E023", what="n", expected="an integer >= 0", value=n)
        return self._topn(sid, int(n))

    def topk_arrays(self, sub_ids) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The top-k of many subscriptions as CSR arrays ``(indptr, message ids, scores)``, in
        ranking order per subscription (no Python object per entry)."""
        ids = np.ascontiguousarray(sub_ids, dtype=np.int64)
        known = self._known_subscriptions(ids)
        if not known.all():
            sid = int(ids[np.argmin(known)])
            raise InputError("E020", id=sid, record_id=sid)
        return self._topk_arrays(ids)

    def topk_ranks(self, sub_ids, msg_ids) -> tuple[np.ndarray, np.ndarray]:
        """Where message ``msg_ids[i]`` stands in the current top-k of subscription ``sub_ids[i]``:
        its rank (0 is the best; -1 when it is not in that top-k) and its score (NaN when not),
        as two arrays of the pairs' length (no Python object per pair).  What a step's events
        need of the entries that entered: their scores and their order, without reading every
        changed top-k whole.  Pairs of one subscription placed next to each other are cheapest."""
        subs = np.ascontiguousarray(sub_ids, dtype=np.int64)
        msgs = np.ascontiguousarray(msg_ids, dtype=np.int64)
        if subs.shape != msgs.shape or subs.ndim != 1:
            raise InputError("E023", what="topk_ranks", expected="two 1-d arrays of one length",
                             value=f"{subs.shape} and {msgs.shape}")
        runs = subs[np.r_[True, subs[1:] != subs[:-1]]] if len(subs) else subs  # one check per run
        known = self._known_subscriptions(runs)
        if not known.all():
            sid = int(runs[np.argmin(known)])
            raise InputError("E020", id=sid, record_id=sid)
        return self._topk_ranks(subs, msgs)

    def _topk_ranks(self, subs: np.ndarray, msgs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Generic: each distinct subscription's top-k read once (:meth:`_topk_arrays`)."""
        rank = np.full(len(subs), -1, np.int64)
        score = np.full(len(subs), np.nan, np.float64)
        if len(subs) == 0:
            return rank, score
        uniq, row = np.unique(subs, return_inverse=True)
        indptr, ids, scores = self._topk_arrays(uniq)
        for i, (r, m) in enumerate(zip(row.tolist(), msgs.tolist())):
            a, b = int(indptr[r]), int(indptr[r + 1])
            hit = np.flatnonzero(ids[a:b] == m)
            if len(hit):
                rank[i] = int(hit[0])
                score[i] = scores[a + int(hit[0])]
        return rank, score

    def set_floors(self, sub_ids, floors, side_list: int = 32) -> ChangeLog:
        """Admission floors of topk subscriptions: the caller promises that, until its next call,
        no arrival scoring below ``floors[i]`` can matter to subscription ``sub_ids[i]`` (DSkype:
        the global k-th score, :mod:`skype.dskype.floors`); ``-inf`` lifts a floor.  The engine
        may then skip admitting such arrivals; every top-k entry ranking above the current floor
        stays exact.  ``side_list``: how many skipped messages the engine may keep per
        subscription to re-admit when a floor falls (0: it rebuilds the buffer instead).  Returns
        the top-k changes of the buffers a lowered floor repaired.  A floor permits, it never
        obliges: this default ignores them, which is exact."""
        self._floor_inputs(sub_ids, floors)
        return ChangeLog.empty()

    def _floor_inputs(self, sub_ids, floors) -> tuple[np.ndarray, np.ndarray]:
        """Validated ``set_floors`` arrays: known topk subscriptions, one float (not NaN) each."""
        ids = np.ascontiguousarray(sub_ids, dtype=np.int64)
        values = np.ascontiguousarray(floors, dtype=np.float64)
        if values.shape != ids.shape or np.isnan(values).any():
            raise InputError("E023", what="floors", expected="one score (not NaN) per subscription id",
                             value=f"{len(values)} floors for {len(ids)} ids")
        known = self._known_subscriptions(ids)
        if not known.all():
            sid = int(ids[np.argmin(known)])
            raise InputError("E020", id=sid, record_id=sid)
        return ids, values

    def _topk_arrays(self, sub_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        parts = [self._topk(int(sid)) for sid in sub_ids]
        indptr = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum([len(p[0]) for p in parts], out=indptr[1:])
        if not parts:
            return indptr, np.zeros(0, np.int64), np.zeros(0, np.float64)
        return (indptr, np.concatenate([p[0] for p in parts]).astype(np.int64, copy=False),
                np.concatenate([p[1] for p in parts]).astype(np.float64, copy=False))

    def results(self) -> Iterator[tuple[int, list[Match]]]:
        """Every topk subscription's top-k, by ascending subscription id (every kind:
        :meth:`results_by_kind`)."""
        for sid in np.sort(self.subscription_ids()):
            ids, scores = self._topk(int(sid))
            yield int(sid), [Match(int(i), float(s)) for i, s in zip(ids, scores)]

    def thresholds(self, sub_ids: np.ndarray | None = None) -> np.ndarray:
        """Per-subscription dissemination threshold theta_s (float64, aligned with ``sub_ids``,
        default :meth:`subscription_ids`): every message that can still enter the subscription's
        top-k scores at least theta_s.  0 while fewer than k messages qualify."""
        ids = self.subscription_ids() if sub_ids is None else np.asarray(sub_ids, dtype=np.int64)
        return self._thresholds(ids)

    @property
    def clock(self) -> float:
        return self._clock

    @property
    def arrivals(self) -> int:
        """Messages published so far (the default timestamp of the next one)."""
        return self._arrivals

    def restore_position(self, clock: float, arrivals: int) -> None:
        """Set the clock and the arrival count of an engine rebuilt from a snapshot (its window
        republished, its clock at or before ``clock``), so that it goes on as the engine that
        took the snapshot: the same default timestamps, the same checks of ``until`` and of
        timestamp order.  Neither may go back."""
        if not (isinstance(clock, float) and (math.isfinite(clock) or clock == -math.inf)):
            raise InputError("E021", t=clock)
        if clock < self._clock:
            raise InputError("E009", t=clock, prev=self._clock)
        if isinstance(arrivals, bool) or not isinstance(arrivals, (int, np.integer)) or arrivals < self._arrivals:
            raise InputError("E023", what="arrivals", expected=f"an integer >= {self._arrivals}", value=arrivals)
        self._clock, self._arrivals = clock, int(arrivals)

    def window_has(self, ids) -> np.ndarray:
        """Which of the message ids ``ids`` are in the window now (a boolean mask)."""
        return self._window_has(np.ascontiguousarray(ids, dtype=np.int64))

    def ended_subscriptions(self) -> dict[int, str]:
        """The subscriptions the last step (``publish_batch``, ``advance_log``...) ended because
        their ``until`` passed, with their kinds; they are no longer registered."""
        return dict(self._ended)

    # ------------------------------------------------------------------ for subclasses
    def _reserve_terms(self, terms: TermMatrix) -> None:
        """Called before term ids reach the engine; the core sizes its tables here."""

    @abc.abstractmethod
    def _known_subscriptions(self, ids: np.ndarray) -> np.ndarray: ...

    @abc.abstractmethod
    def _window_has(self, ids: np.ndarray) -> np.ndarray: ...

    @abc.abstractmethod
    def _subscribe_batch(self, batch: SubscriptionBatch) -> None: ...

    @abc.abstractmethod
    def _unsubscribe(self, sub_id: int) -> None: ...

    @abc.abstractmethod
    def _publish_batch(self, batch: MessageBatch) -> ChangeLog: ...

    @abc.abstractmethod
    def _advance(self, t: float) -> ChangeLog: ...

    @abc.abstractmethod
    def _topk(self, sub_id: int) -> tuple[np.ndarray, np.ndarray]: ...

    @abc.abstractmethod
    def _thresholds(self, sub_ids: np.ndarray) -> np.ndarray: ...

    @abc.abstractmethod
    def _topn(self, sub_id: int, n: int) -> tuple[np.ndarray, np.ndarray]: ...

    @abc.abstractmethod
    def subscription_ids(self) -> np.ndarray: ...

    @abc.abstractmethod
    def window_ids(self) -> np.ndarray:
        """Ids of the messages currently in the window, oldest first."""

    @abc.abstractmethod
    def stats(self) -> dict: ...
