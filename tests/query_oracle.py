"""An independent oracle for the query kinds: every answer recomputed from scratch.

It holds the window as a plain list and the subscriptions as records, and computes every
result directly from the contract (issue 12's semantics table), with its own predicate
evaluator (recursive descent over the expression text, not the engines' postfix programs) and
exact time arithmetic.  It shares no code with ``skype.querykinds`` or
``skype.reference_queries``; it uses the vocabulary only to normalise terms and
``skype.reference.score`` for Skype's score (checked independently in tests/test_oracle.py).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from fractions import Fraction

from skype.reference import score
from skype.text import normalize_term, tokenize


def predicate(match: str, words: list[str] | None):
    """A function of a message's term set, from the record's ``match`` and terms."""
    if match == "any":
        return (lambda terms: True) if not words else (lambda terms: any(w in terms for w in words))
    if match == "all":
        return (lambda terms: True) if not words else (lambda terms: all(w in terms for w in words))
    tokens = re.findall(r"\(|\)|[^\s()]+", match)

    def parse_or(i):
        fs, i = parse_and(i)
        alts = [fs]
        while i < len(tokens) and tokens[i] == "OR":
            f, i = parse_and(i + 1)
            alts.append(f)
        return (lambda t, alts=alts: any(a(t) for a in alts)), i

    def parse_and(i):
        f, i = parse_atom(i)
        parts = [f]
        while i < len(tokens) and tokens[i] == "AND":
            f, i = parse_atom(i + 1)
            parts.append(f)
        return (lambda t, parts=parts: all(p(t) for p in parts)), i

    def parse_atom(i):
        if tokens[i] == "(":
            f, i = parse_or(i + 1)
            return f, i + 1
        word = normalize_term(tokens[i])
        return (lambda t, word=word: word in t), i + 1

    f, _ = parse_or(0)
    return f


def _dist(qx, qy, mx, my) -> float:
    dx, dy = mx - qx, my - qy
    return math.sqrt(dx * dx + dy * dy)


def record_words(text, terms) -> list[str] | None:
    if text is not None:
        return tokenize(text)
    if terms is not None:
        return [normalize_term(t) for t in terms]
    return None


class QueryOracle:
    """Window + subscriptions of every kind; ``result(id)`` and ``snapshot(kind, **fields)``
    computed from scratch.  Messages are (id, x, y, t, {term name: weight}); subscriptions are
    the records themselves."""

    def __init__(self, *, window=None, window_seconds=None, max_dist=1.0, vocabulary=None):
        self.window, self.window_seconds, self.max_dist = window, window_seconds, max_dist
        self.vocabulary = vocabulary
        self.msgs: list[tuple] = []  # (seq, id, x, y, t, names set, weights by name)
        self.subs: dict[int, object] = {}
        self.seq = 0
        self.clock = -math.inf

    def _end(self, t) -> None:
        for sid in [s for s, sub in self.subs.items() if sub.until is not None and sub.until < t]:
            del self.subs[sid]

    def _expire(self, t, arriving) -> None:
        if self.window is not None:
            while arriving and len(self.msgs) >= self.window:
                self.msgs.pop(0)
        else:
            self.msgs = [m for m in self.msgs if Fraction(m[4]) > Fraction(t) - Fraction(self.window_seconds)]

    def publish(self, mid, x, y, t, terms: dict[str, float]) -> None:
        self._end(t)
        self._expire(t, True)
        names = {normalize_term(n) for n in terms}
        self.msgs.append((self.seq, mid, x, y, t, names, terms))
        self.seq += 1
        self.clock = t

    def advance(self, t) -> None:
        self._end(t)
        self._expire(t, False)
        self.clock = t

    # ------------------------------------------------------------------ answers
    def _fresh(self, m, last) -> bool:
        return last is None or Fraction(self.clock) - Fraction(m[4]) < Fraction(last)

    def answer(self, kind, fields, last=None) -> list:
        msgs = [m for m in self.msgs if self._fresh(m, last)]

        def inside(m, r):
            return r[0] <= m[2] <= r[2] and r[1] <= m[3] <= r[3]

        if kind == "range":
            pred = predicate(fields.get("match", "any"), record_words(fields.get("text"), fields.get("terms")))
            return [m[1] for m in sorted(msgs, key=lambda m: -m[0]) if inside(m, fields["rect"]) and pred(m[5])]
        if kind == "knn":
            pred = predicate(fields.get("match", "any"), record_words(fields.get("text"), fields.get("terms")))
            qx, qy = fields["x"], fields["y"]
            found = sorted((_dist(qx, qy, m[2], m[3]), -m[0], m[1]) for m in msgs if pred(m[5]))
            return [(mid, d) for d, _, mid in found[: fields.get("k", 10)]]
        if kind == "terms":
            counts = Counter()
            for m in msgs:
                if inside(m, fields["rect"]):
                    counts.update(m[5])
            return [(term, -neg) for neg, term in sorted((-c, term) for term, c in counts.items())][: fields.get("k", 10)]
        if kind == "topk":
            v = self.vocabulary
            ids, ws = v.vectorize_terms(fields["terms"]) if "terms" in fields else v.vectorize_text(fields["text"])
            qterms = list(zip(ids.tolist(), ws.tolist()))
            scored = []
            for m in msgs:
                mids, mws = v.vectorize_terms(m[6])
                sc = score(qterms, fields.get("alpha", 0.5), fields["x"], fields["y"], dict(zip(mids.tolist(), mws.tolist())),
                           m[2], m[3], self.max_dist)
                if sc is not None:
                    scored.append((-sc, -m[0], m[1], sc))
            return [(mid, sc) for _, _, mid, sc in sorted(scored)[: fields.get("k", 10)]]
        raise ValueError(kind)

    def result(self, sid) -> list:
        sub = self.subs[sid]
        fields = {k: getattr(sub, k) for k in ("rect", "x", "y", "k", "alpha", "text", "terms", "match")
                  if getattr(sub, k, None) is not None}
        return self.answer(sub.kind, fields)


def as_plain(answer: list) -> list:
    """An engine's answer in the oracle's shape."""
    out = []
    for e in answer:
        if isinstance(e, int):
            out.append(e)
        elif hasattr(e, "distance"):
            out.append((e.id, e.distance))
        elif hasattr(e, "count"):
            out.append((e.term, e.count))
        else:
            out.append((e.id, e.score))
    return out
