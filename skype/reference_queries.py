"""The reference implementation of the query kinds beside topk: brute force, obviously correct.

It keeps its own list of window messages (the same window rules as
:class:`~skype.reference.ReferenceEngine`, time edges in rational arithmetic) and shares no
code with the core beyond the compiled predicates of :mod:`skype.queries`.

* ``range``: on arrival every range subscription is tested against the message (entered); on
  expiry every one is tested again (left).  Results are recomputed by scanning the window.
* ``knn``: each subscription keeps its exact top-k list; an arrival is merged in; when a listed
  message expires the list is recomputed from a scan of the window.
* ``terms``: each subscription keeps a counter of the terms of the window messages in its
  rectangle; its top-k is sorted from the whole counter.
* Snapshots scan the whole window.
Events of knn and terms subscriptions are netted per step (top-k before against after).
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from skype.model import ChangeLog, Match, MessageBatch, score
from skype.queries import OP_AND, OP_OR, Neighbor, QuerySpec, TermCount
from skype.querykinds import QueryKinds
from skype.text import Vocabulary


@dataclass
class _Msg:
    seq: int
    id: int
    x: float
    y: float
    t: float
    terms: dict[int, float]


@dataclass
class _Sub:
    spec: QuerySpec
    top: list = field(default_factory=list)  # knn: [(distance, -seq, id)]; terms: unused
    counts: Counter = field(default_factory=Counter)  # terms


def holds(program: np.ndarray, terms) -> bool:
    """Evaluate a postfix predicate on a message's term set (empty program: true)."""
    stack: list[bool] = []
    for op in program.tolist():
        if op == OP_AND:
            b = stack.pop()
            stack.append(stack.pop() and b)
        elif op == OP_OR:
            b = stack.pop()
            stack.append(stack.pop() or b)
        else:
            stack.append(op in terms)
    return stack[0] if stack else True


def inside(rect, x: float, y: float) -> bool:
    return rect[0] <= x <= rect[2] and rect[1] <= y <= rect[3]


def distance(qx: float, qy: float, mx: float, my: float) -> float:
    dx = mx - qx
    dy = my - qy
    return math.sqrt(dx * dx + dy * dy)


def fresh(tm: float, now: float, last: float | None) -> bool:
    """now - tm < last, exactly."""
    return last is None or Fraction(now) - Fraction(tm) < Fraction(last)


class ReferenceQueryKinds(QueryKinds):
    """Brute-force :class:`~skype.querykinds.QueryKinds`."""

    def __init__(self, vocabulary: Vocabulary, window: int | None, window_seconds: float | None,
                 max_dist: float = 1.0) -> None:
        self.vocabulary = vocabulary
        self.window, self.window_seconds, self.max_dist = window, window_seconds, max_dist
        self._msgs: deque[_Msg] = deque()
        self._subs: dict[int, _Sub] = {}
        self._seq = 0

    # ------------------------------------------------------------------ subscriptions
    def subscribe(self, spec: QuerySpec) -> object:
        s = _Sub(spec)
        self._subs[spec.id] = s  # type: ignore[index]
        if spec.kind == "knn":
            s.top = self._knn_scan(spec)
        elif spec.kind == "terms":
            for m in self._msgs:
                if inside(spec.rect, m.x, m.y):
                    s.counts.update(list(m.terms))
        return spec.id

    def unsubscribe(self, kind: str, handle: object) -> None:
        del self._subs[handle]  # type: ignore[arg-type]

    def _knn_scan(self, spec: QuerySpec, now: float = 0.0, last: float | None = None) -> list:
        found = [(distance(spec.x, spec.y, m.x, m.y), -m.seq, m.id) for m in self._msgs
                 if holds(spec.program, m.terms) and fresh(m.t, now, last)]
        return sorted(found)[: spec.k]

    @staticmethod
    def _top_terms(counts: Counter, k: int, vocab: Vocabulary) -> list[tuple[str, int, int]]:
        ranked = sorted(((-c, vocab.term(t), t) for t, c in counts.items() if c > 0))
        return [(name, -neg, t) for neg, name, t in ranked[:k]]

    def _entries(self, s: _Sub) -> set[int]:
        if s.spec.kind == "knn":
            return {e[2] for e in s.top}
        return {t for _, _, t in self._top_terms(s.counts, s.spec.k, self.vocabulary)}

    # ------------------------------------------------------------------ the stream
    def _expire(self, t: float | None, arriving: bool, at: int, before: dict, rows: list) -> None:
        while self._msgs:
            old = self._msgs[0]
            if self.window is not None:
                if not (arriving and len(self._msgs) >= self.window):
                    break
            elif not (Fraction(old.t) <= Fraction(t) - Fraction(self.window_seconds)):  # type: ignore[arg-type]
                break
            self._msgs.popleft()
            for sid, s in self._subs.items():
                spec = s.spec
                if spec.kind == "range":
                    if inside(spec.rect, old.x, old.y) and holds(spec.program, old.terms):
                        rows.append((at, sid, old.id, False))
                elif spec.kind == "knn":
                    if any(e[2] == old.id and e[1] == -old.seq for e in s.top):
                        before.setdefault(sid, self._entries(s))
                        s.top = self._knn_scan(spec)
                elif inside(spec.rect, old.x, old.y):
                    before.setdefault(sid, self._entries(s))
                    s.counts.subtract(list(old.terms))

    def _arrive(self, m: _Msg, at: int, before: dict, rows: list) -> None:
        self._msgs.append(m)
        for sid, s in self._subs.items():
            spec = s.spec
            if spec.kind == "range":
                if inside(spec.rect, m.x, m.y) and holds(spec.program, m.terms):
                    rows.append((at, sid, m.id, True))
            elif spec.kind == "knn":
                if holds(spec.program, m.terms):
                    before.setdefault(sid, self._entries(s))
                    s.top = sorted(s.top + [(distance(spec.x, spec.y, m.x, m.y), -m.seq, m.id)])[: spec.k]
            elif inside(spec.rect, m.x, m.y):
                before.setdefault(sid, self._entries(s))
                s.counts.update(list(m.terms))

    def _net(self, at: int, before: dict, rows: list) -> None:
        for sid, old in before.items():
            new = self._entries(self._subs[sid])
            rows.extend((at, sid, e, True) for e in sorted(new - old))
            rows.extend((at, sid, e, False) for e in sorted(old - new))

    def publish(self, batch: MessageBatch) -> ChangeLog:
        rows: list = []
        for i in range(len(batch)):
            tids, ws = batch.terms.row(i)
            m = _Msg(self._seq, int(batch.ids[i]), float(batch.x[i]), float(batch.y[i]), float(batch.t[i]),
                     {int(t): float(w) for t, w in zip(tids, ws)})
            self._seq += 1
            before: dict = {}
            self._expire(m.t, True, i, before, rows)
            self._arrive(m, i, before, rows)
            self._net(i, before, rows)
        return ChangeLog.from_rows(rows)

    def advance(self, t: float) -> ChangeLog:
        rows: list = []
        before: dict = {}
        self._expire(t, False, 0, before, rows)
        self._net(0, before, rows)
        return ChangeLog.from_rows(rows)

    # ------------------------------------------------------------------ results
    def result(self, kind: str, handle: object) -> list:
        s = self._subs[handle]  # type: ignore[index]
        if kind == "range":
            return self.result_entries(kind, handle)
        if kind == "knn":
            return [Neighbor(e[2], e[0]) for e in s.top]
        return [TermCount(name, c) for name, c, _ in self._top_terms(s.counts, s.spec.k, self.vocabulary)]

    def result_entries(self, kind: str, handle: object) -> list[int]:
        s = self._subs[handle]  # type: ignore[index]
        if kind == "range":
            return [m.id for m in reversed(self._msgs)
                    if inside(s.spec.rect, m.x, m.y) and holds(s.spec.program, m.terms)]
        if kind == "knn":
            return [e[2] for e in s.top]
        return [t for _, _, t in self._top_terms(s.counts, s.spec.k, self.vocabulary)]

    def snapshot(self, spec: QuerySpec, now: float) -> list:
        msgs = [m for m in self._msgs if fresh(m.t, now, spec.last)]
        if spec.kind == "range":
            return [m.id for m in reversed(msgs) if inside(spec.rect, m.x, m.y) and holds(spec.program, m.terms)]
        if spec.kind == "knn":
            return [Neighbor(e[2], e[0]) for e in self._knn_scan(spec, now, spec.last)]
        if spec.kind == "terms":
            counts: Counter = Counter()
            for m in msgs:
                if inside(spec.rect, m.x, m.y):
                    counts.update(list(m.terms))
            return [TermCount(name, c) for name, c, _ in self._top_terms(counts, spec.k, self.vocabulary)]
        terms = list(zip(spec.term_ids.tolist(), spec.weights.tolist()))
        scored = []
        for m in msgs:
            sc = score(terms, spec.alpha, spec.x, spec.y, m.terms, m.x, m.y, self.max_dist)
            if sc is not None:
                scored.append((-sc, -m.seq, m.id, sc))
        return [Match(mid, sc) for _, _, mid, sc in sorted(scored)[: spec.k]]

    def stats(self) -> dict:
        return {"query_window_size": len(self._msgs)}
