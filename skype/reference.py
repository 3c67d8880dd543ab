"""The reference engine: a small, obviously correct brute-force implementation.

It is the oracle of every test of the real engine and the "what a user would write" baseline of
the benchmarks, not the product.  Every subscription keeps its exact top-k as a sorted list.

* Arrival: expire first (count window: drop the oldest while the window is full; time window:
  drop every message with timestamp <= t - T), then score the new message against every
  subscription sharing a term with it and merge it into their top-k lists.
* Expiry: every subscription whose top-k held the expired message recomputes its top-k from
  scratch over the whole window.

Scores are computed exactly as the core computes them, operation by operation
(:func:`skype.model.score`, re-exported here as ``skype.reference.score``), so the two engines agree bit for bit and ties are broken the same way: score
descending, then the newer message (larger arrival sequence number) first.
"""

from __future__ import annotations

import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from skype.api import ChangeLog, EngineBase
from skype.model import MessageBatch, SubscriptionBatch, score
from skype.reference_queries import ReferenceQueryKinds  # the other kinds, brute force too


def _outside_time_window(tm: float, t: float, seconds: float) -> bool:
    """Exactly tm <= t - T: the window (t - T, t] in rational arithmetic (a float t - T can
    round across a timestamp on the edge)."""
    return Fraction(tm) <= Fraction(t) - Fraction(seconds)


@dataclass
class _Msg:
    seq: int  # arrival number: larger = newer
    id: int
    x: float
    y: float
    t: float
    terms: dict[int, float]  # term id -> unit weight


@dataclass
class _Sub:
    id: int
    x: float
    y: float
    k: int
    alpha: float
    terms: list[tuple[int, float]]  # ascending term id
    topk: list[tuple[float, int, int]] = field(default_factory=list)  # (score, seq, msg id), best first


def _rank_key(entry: tuple[float, int, int]) -> tuple[float, int]:
    return (-entry[0], -entry[1])


class ReferenceEngine(EngineBase):
    """Brute-force top-k spatial-keyword pub/sub over a count or time window.

    >>> from skype import Subscription, Message
    >>> ref = ReferenceEngine(window=2)
    >>> ref.subscribe(Subscription(1, 0.0, 0.0, k=1, alpha=0.5, terms={"pizza": 1.0}))
    []
    >>> [c.entered for c in ref.publish(Message(10, 1.0, 1.0, terms={"pizza": 1.0}))]
    [(10,)]
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._max_dist = self.bounds.max_dist
        self._window: deque[_Msg] = deque()
        self._window_ids: dict[int, _Msg] = {}
        self._seq = 0
        self._subs: dict[int, _Sub] = {}
        self._sub_postings: dict[int, dict[int, float]] = defaultdict(dict)  # term -> {sub id: w}
        self._win_postings: dict[int, dict[int, _Msg]] = defaultdict(dict)  # term -> {seq: msg}
        self._holders: dict[int, set[int]] = defaultdict(set)  # seq -> sub ids whose top-k hold it
        self._counters = {"arrivals": 0, "expirations": 0, "reevaluations": 0, "arrival_s": 0.0, "expiry_s": 0.0}
        self._queries = ReferenceQueryKinds(self.vocabulary, self.window, self.window_seconds, self._max_dist)

    # ------------------------------------------------------------------ scoring
    def _score(self, s: _Sub, m: _Msg):
        return score(s.terms, s.alpha, s.x, s.y, m.terms, m.x, m.y, self._max_dist)

    def _set_topk(self, s: _Sub, entries: list[tuple[float, int, int]]) -> None:
        for _, seq, _ in s.topk:
            self._holders[seq].discard(s.id)
        s.topk = entries
        for _, seq, _ in entries:
            self._holders[seq].add(s.id)

    def _ranked(self, s: _Sub, limit: int) -> list[tuple[float, int, int]]:
        """The ``limit`` best window messages of ``s``: score every one sharing a term."""
        candidates: dict[int, _Msg] = {}
        for term, _ in s.terms:
            candidates.update(self._win_postings.get(term, {}))
        scored = []
        for m in candidates.values():
            sc = self._score(s, m)
            if sc is not None:
                scored.append((sc, m.seq, m.id))
        scored.sort(key=_rank_key)
        return scored[:limit]

    def _recompute(self, s: _Sub) -> None:
        """Top-k of ``s`` from scratch."""
        self._set_topk(s, self._ranked(s, s.k))

    # ------------------------------------------------------------------ EngineBase
    def _known_subscriptions(self, ids: np.ndarray) -> np.ndarray:
        return np.fromiter((int(i) in self._subs for i in ids), dtype=bool, count=len(ids))

    def _window_has(self, ids: np.ndarray) -> np.ndarray:
        return np.fromiter((int(i) in self._window_ids for i in ids), dtype=bool, count=len(ids))

    def _subscribe_batch(self, batch: SubscriptionBatch) -> None:
        for i in range(len(batch)):
            tids, ws = batch.terms.row(i)
            s = _Sub(
                int(batch.ids[i]), float(batch.x[i]), float(batch.y[i]), int(batch.k[i]), float(batch.alpha[i]),
                [(int(t), float(w)) for t, w in zip(tids, ws)],
            )
            self._subs[s.id] = s
            for term, w in s.terms:
                self._sub_postings[term][s.id] = w
            self._recompute(s)

    def _unsubscribe(self, sub_id: int) -> None:
        s = self._subs.pop(sub_id)
        for term, _ in s.terms:
            del self._sub_postings[term][sub_id]
        self._set_topk(s, [])

    def _expire_oldest(self, before: dict[int, set[int]]) -> None:
        m = self._window.popleft()
        del self._window_ids[m.id]
        for term in m.terms:
            del self._win_postings[term][m.seq]
        affected = self._holders.pop(m.seq, set())
        for sid in affected:
            s = self._subs[sid]
            before.setdefault(sid, {e[2] for e in s.topk})
            self._counters["reevaluations"] += 1
            self._recompute(s)
        self._counters["expirations"] += 1

    def _expire_until(self, t: float | None, before: dict[int, set[int]]) -> None:
        start = time.perf_counter()
        if self.window is not None:
            while len(self._window) >= self.window:
                self._expire_oldest(before)
        else:
            assert t is not None and self.window_seconds is not None
            while self._window and _outside_time_window(self._window[0].t, t, self.window_seconds):
                self._expire_oldest(before)
        self._counters["expiry_s"] += time.perf_counter() - start

    def _insert(self, m: _Msg, before: dict[int, set[int]]) -> None:
        start = time.perf_counter()
        self._window.append(m)
        self._window_ids[m.id] = m
        for term in m.terms:
            self._win_postings[term][m.seq] = m
        touched: set[int] = set()
        for term in m.terms:
            touched.update(self._sub_postings.get(term, {}))
        for sid in touched:
            s = self._subs[sid]
            sc = self._score(s, m)
            if sc is None:
                continue
            entry = (sc, m.seq, m.id)
            if len(s.topk) < s.k or _rank_key(entry) < _rank_key(s.topk[-1]):
                before.setdefault(sid, {e[2] for e in s.topk})
                self._set_topk(s, sorted(s.topk + [entry], key=_rank_key)[: s.k])
        self._counters["arrivals"] += 1
        self._counters["arrival_s"] += time.perf_counter() - start

    def _diff(self, at: int, before: dict[int, set[int]], rows: list) -> None:
        for sid, old in before.items():
            s = self._subs.get(sid)
            new = {e[2] for e in s.topk} if s is not None else set()
            rows.extend((at, sid, mid, True) for mid in sorted(new - old))
            rows.extend((at, sid, mid, False) for mid in sorted(old - new))

    def _publish_batch(self, batch: MessageBatch) -> ChangeLog:
        rows: list = []
        for i in range(len(batch)):
            tids, ws = batch.terms.row(i)
            m = _Msg(self._seq, int(batch.ids[i]), float(batch.x[i]), float(batch.y[i]), float(batch.t[i]),
                     {int(t): float(w) for t, w in zip(tids, ws)})
            self._seq += 1
            before: dict[int, set[int]] = {}
            self._expire_until(m.t, before)
            self._insert(m, before)
            self._diff(i, before, rows)
        return ChangeLog.from_rows(rows)

    def _advance(self, t: float) -> ChangeLog:
        before: dict[int, set[int]] = {}
        self._expire_until(t, before)
        rows: list = []
        self._diff(0, before, rows)
        return ChangeLog.from_rows(rows)

    def _topk(self, sub_id: int) -> tuple[np.ndarray, np.ndarray]:
        s = self._subs[sub_id]
        return (np.array([e[2] for e in s.topk], dtype=np.int64), np.array([e[0] for e in s.topk], dtype=np.float64))

    def _topn(self, sub_id: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        ranked = self._ranked(self._subs[sub_id], n)
        return np.array([e[2] for e in ranked], dtype=np.int64), np.array([e[0] for e in ranked], dtype=np.float64)

    def _thresholds(self, sub_ids: np.ndarray) -> np.ndarray:
        """kScore: the k-th best score, or 0 while fewer than k messages qualify."""
        out = np.zeros(len(sub_ids), dtype=np.float64)
        for i, sid in enumerate(sub_ids):
            s = self._subs[int(sid)]
            if len(s.topk) == s.k:
                out[i] = s.topk[-1][0]
        return out

    def subscription_ids(self) -> np.ndarray:
        return np.fromiter(self._subs, dtype=np.int64, count=len(self._subs))

    def window_ids(self) -> np.ndarray:
        return np.fromiter((m.id for m in self._window), dtype=np.int64, count=len(self._window))

    def stats(self) -> dict:
        c = self._counters
        sizes = [len(s.topk) for s in self._subs.values()]
        return {
            "engine": "reference",
            "subscriptions": len(self._subs),
            "query_subscriptions": len(self._kinds),
            "window_size": len(self._window),
            "arrivals": c["arrivals"],
            "expirations": c["expirations"],
            "amp_us": 1e6 * c["arrival_s"] / c["arrivals"] if c["arrivals"] else 0.0,
            "emp_us": 1e6 * c["expiry_s"] / c["expirations"] if c["expirations"] else 0.0,
            "reevaluations": c["reevaluations"],
            "avg_buffer_size": float(np.mean(sizes)) if sizes else 0.0,
        }
