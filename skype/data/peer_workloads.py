"""Peer-style workloads: the query kinds of Tornado, PS2Stream, SSTD and AQWA over our streams.

* Subscriptions of mixed kinds (``kinds``: {kind: share}).  Each is drawn as the paper's
  subscriptions are (:func:`~skype.data.workloads.make_subscriptions`: a sampled message's
  location and 1..3 of its terms), then shaped by kind: ``range`` takes the square of ``area``
  times the space's area centred on that location (clipped to the space) and the terms with
  ``match``; ``knn`` the location, ``k`` and the terms; ``terms`` the square and ``k``;
  ``topk`` stays as drawn.
* Snapshot queries (records ``{"op": "query", "qid", "kind", ...}``) drawn the same way, with an
  optional ``last``.

Everything is seeded by the caller's generator.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from skype.errors import InputError, invalid_choice
from skype.model import DEFAULT_BOUNDS, Bounds, MessageBatch, SubscriptionBatch
from skype.queries import KINDS, KnnSubscription, RangeSubscription, TermsSubscription
from skype.text import Vocabulary
from skype.data.workloads import make_subscriptions


def parse_kinds(text: str) -> dict[str, float]:
    """``"range"``, ``"topk,range,knn,terms"`` (equal shares) or ``"topk=1,range=3"``."""
    out: dict[str, float] = {}
    for part in text.split(","):
        name, _, share = part.strip().partition("=")
        if name not in KINDS:
            raise InputError("E040", kind=name, choices=", ".join(KINDS))
        try:
            out[name] = float(share) if share else 1.0
        except ValueError:
            raise InputError("E023", what=f"share of {name}", expected="a number", value=share) from None
        if not (math.isfinite(out[name]) and out[name] > 0):
            raise InputError("E023", what=f"share of {name}", expected="> 0", value=share)
    return out


def square_around(x: np.ndarray, y: np.ndarray, area: float, bounds: Bounds) -> np.ndarray:
    """Rectangles (n x 4) of ``area`` times the space's area centred on the points, clipped."""
    if not 0 < area <= 1:
        raise InputError("E023", what="rectangle area", expected="a fraction in (0, 1]", value=area)
    half_w = 0.5 * math.sqrt(area) * (bounds.maxx - bounds.minx)
    half_h = 0.5 * math.sqrt(area) * (bounds.maxy - bounds.miny)
    return np.stack([np.maximum(x - half_w, bounds.minx), np.maximum(y - half_h, bounds.miny),
                     np.minimum(x + half_w, bounds.maxx), np.minimum(y + half_h, bounds.maxy)], axis=1)


def _kind_per_row(n: int, kinds: Mapping[str, float], rng: np.random.Generator) -> np.ndarray:
    names = list(kinds)
    p = np.array([kinds[k] for k in names], dtype=np.float64)
    return np.array(names, dtype=object)[rng.choice(len(names), size=n, p=p / p.sum())]


def peer_subscriptions(messages: MessageBatch, vocab: Vocabulary, num_subs: int, rng: np.random.Generator, *,
                       kinds: Mapping[str, float], area: float = 0.01, sub_terms: tuple[int, int] = (1, 3),
                       k: int = 20, match: str = "any", bounds: Bounds = DEFAULT_BOUNDS,
                       first_id: int = 0) -> tuple[SubscriptionBatch, list]:
    """(the topk subscriptions as a batch, the others as subscription objects); ids are
    ``first_id ..`` in draw order across both."""
    for kind in kinds:
        if kind not in KINDS:
            raise invalid_choice("kind", kind, KINDS)
    base = make_subscriptions(messages, vocab, num_subs, rng, sub_terms=sub_terms, k=k, first_id=first_id)
    per_row = _kind_per_row(num_subs, kinds, rng)
    rects = square_around(base.x, base.y, area, bounds)
    others: list = []
    for i in np.flatnonzero(per_row != "topk"):
        sid = int(base.ids[i])
        names = [vocab.term(int(t)) for t in base.terms.row(int(i))[0]]
        kind = per_row[i]
        if kind == "range":
            others.append(RangeSubscription(sid, tuple(rects[i].tolist()), terms=names, match=match))
        elif kind == "knn":
            others.append(KnnSubscription(sid, float(base.x[i]), float(base.y[i]), k, terms=names, match=match))
        else:
            others.append(TermsSubscription(sid, tuple(rects[i].tolist()), k))
    return base.take(np.flatnonzero(per_row == "topk")), others


def peer_queries(messages: MessageBatch, vocab: Vocabulary, num_queries: int, rng: np.random.Generator, *,
                 kinds: Mapping[str, float], area: float = 0.01, sub_terms: tuple[int, int] = (1, 3), k: int = 20,
                 match: str = "any", last: float | None = None, bounds: Bounds = DEFAULT_BOUNDS,
                 first_qid: int = 0) -> list[dict[str, Any]]:
    """Snapshot query records ``{"op": "query", "qid", "kind", ...}``."""
    batch, others = peer_subscriptions(messages, vocab, num_queries, rng, kinds=kinds, area=area,
                                       sub_terms=sub_terms, k=k, match=match, bounds=bounds, first_id=first_qid)
    out: list[dict[str, Any]] = []
    for i in range(len(batch)):
        ids, w = batch.terms.row(i)
        out.append({"qid": int(batch.ids[i]), "kind": "topk", "x": float(batch.x[i]), "y": float(batch.y[i]),
                    "k": int(batch.k[i]), "alpha": float(batch.alpha[i]),
                    "terms": {vocab.term(int(t)): float(v) for t, v in zip(ids, w)}})
    for sub in others:
        rec: dict[str, Any] = {"qid": sub.id, "kind": sub.kind}
        if sub.kind in ("range", "terms"):
            rec["rect"] = list(sub.rect)
        if sub.kind == "knn":
            rec.update(x=sub.x, y=sub.y)
        if sub.kind in ("knn", "terms"):
            rec["k"] = sub.k
        if sub.kind in ("range", "knn"):
            rec.update(terms={t: 1.0 for t in sub.terms}, match=sub.match)
        out.append(rec)
    out.sort(key=lambda r: r["qid"])
    for rec in out:
        rec["op"] = "query"
        if last is not None:
            rec["last"] = last
    return out
