"""Seeded drift workloads: a generated workload whose stream changes over time.

Real geo-textual streams drift: a stadium fills, a storm moves, a hashtag trends and dies.  Each
kind takes a generated :class:`~skype.data.workloads.Workload` and changes the stream after
message ``start`` (before it, the stream is the base one: the build sample of a distribution
stays undrifted).  ``p`` in [0, 1] is the progress through the drifting part.  A drift changes
messages in place (same ids, timestamps and order) and adds subscription **arrivals** (and
their **departures**), all deterministic in ``seed``:

* ``hotspot``: a hot spot moves ``travel`` degrees in a straight line from a place of the stream
  (a storm, not a jet: about a degree an hour on the default stream).  Each
  message is moved into it (Gaussian, ``radius`` degrees) with probability ``share * p``, a
  rising share.  ``sub_share * |S|`` subscriptions arrive at the spot where it is when they
  arrive (more as it heats up, density ``2p``), copying the terms of base subscriptions near the
  spot (the nearest 5%: local interests), and leave ``lifetime`` (a fraction of the drifting
  part) later.
* ``trending``: ``trends`` mid-frequency terms rise to the top of the frequency list and fall,
  one after another (a triangular bump each, peak probability ``share``); a message gets the
  term of the current trend added.  Subscriptions on the trending term arrive during its bump
  (anywhere, at base subscriptions' places) and leave after ``lifetime``.
* ``flip``: PS2Stream's drift test: 10% of the regions of a 10 x 10 grid over the stream's
  extent (the busiest ones) flip every ``1/periods`` of the drift between Q1 subscriptions
  (frequent terms, the top 1%) and Q2 subscriptions (a rare term); at each flip the previous
  period's subscriptions there leave and new ones arrive.
* ``inject``: SSTD's injection test: from ``p = 1/3`` a ``share`` of the messages is injected
  into one region, and at ``p = 2/3`` ``sub_share * |S|`` subscriptions are injected into
  another, all at once.

:func:`drift_steps` lays the result out as the step list the command-line runners consume
(``("msgs", batch)``, ``("sub", batch)``, ``("unsub", id)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from skype.errors import InputError, invalid_choice
from skype.model import MessageBatch, SubscriptionBatch, TermMatrix
from skype.partitioning.registry import concat_subscriptions, empty_subscriptions
from skype.text import normalize_rows

DRIFT_KINDS = ("none", "hotspot", "trending", "flip", "inject")
DEFAULTS: dict[str, dict[str, float]] = {
    "none": {},
    "hotspot": {"share": 0.5, "sub_share": 0.3, "radius": 1.5, "lifetime": 0.2, "travel": 10.0},
    "trending": {"share": 0.4, "sub_share": 0.2, "trends": 4, "lifetime": 0.2},
    "flip": {"sub_share": 0.3, "periods": 4},
    "inject": {"share": 0.5, "sub_share": 0.3, "radius": 2.0},
}


@dataclass
class DriftStream:
    """A drifted stream: messages, and subscriptions arriving (and leaving) at message indices."""

    kind: str
    messages: MessageBatch
    arrivals: SubscriptionBatch
    arrive_at: np.ndarray  # message index before which each arrival registers
    leave_at: np.ndarray  # message index before which it leaves; -1 = stays
    start: int
    params: dict[str, Any] = field(default_factory=dict)

    def steps(self, chunk: int = 1000) -> list[tuple[str, Any]]:
        return drift_steps(self.messages, self.arrivals, self.arrive_at, self.leave_at, chunk)


def drift_steps(messages: MessageBatch, arrivals: SubscriptionBatch, arrive_at: np.ndarray, leave_at: np.ndarray,
                chunk: int = 1000) -> list[tuple[str, Any]]:
    """Steps in stream order, one group per ``chunk`` messages: the arrivals due within the chunk
    (one batch), then its departures, then its messages (events move to the chunk's start)."""
    n = len(messages)
    chunk = max(1, int(chunk))
    steps: list[tuple[str, Any]] = []
    arrive_chunk = np.asarray(arrive_at, np.int64) // chunk
    leave_chunk = np.where(np.asarray(leave_at) >= 0, np.asarray(leave_at, np.int64) // chunk, -1)
    for c, a in enumerate(range(0, max(n, 1), chunk)):
        due = np.flatnonzero(arrive_chunk == c)
        if len(due):
            steps.append(("sub", arrivals.take(due)))
        for i in np.flatnonzero(leave_chunk == c):
            steps.append(("unsub", int(arrivals.ids[i])))
        if a < n:
            steps.append(("msgs", messages.slice(a, min(a + chunk, n))))
    return steps


def _check(kind: str, params: dict[str, float]) -> dict[str, float]:
    if kind not in DRIFT_KINDS:
        raise invalid_choice("drift kind", kind, DRIFT_KINDS)
    out = dict(DEFAULTS[kind])
    for key, value in params.items():
        if key not in out:
            raise InputError("E062", kind=kind, detail=f"unknown parameter {key!r}; known: {sorted(out)}")
        out[key] = float(value)
    for key in ("share", "sub_share", "lifetime"):
        if key in out and not 0.0 <= out[key] <= 1.0:
            raise InputError("E062", kind=kind, detail=f"{key} must lie in [0, 1], got {out[key]!r}")
    return out


def _clip(x: np.ndarray, y: np.ndarray, bounds) -> tuple[np.ndarray, np.ndarray]:
    return np.clip(x, bounds.minx, bounds.maxx), np.clip(y, bounds.miny, bounds.maxy)


def _progress(n: int, start: int) -> np.ndarray:
    return np.clip((np.arange(n) - start) / max(n - start, 1), 0.0, 1.0)


def with_term(terms: TermMatrix, rows: np.ndarray, term: np.ndarray, weight: float) -> TermMatrix:
    """Add ``term[i]`` to row ``rows[i]`` (weight ``weight`` before L2 normalisation)."""
    all_rows = np.repeat(np.arange(terms.rows, dtype=np.int64), terms.lengths())
    ids = np.r_[terms.ids, term]
    w = np.r_[terms.weights, np.full(len(rows), weight)]
    r = np.r_[all_rows, rows]
    order = np.lexsort((ids, r))
    r, ids, w = r[order], ids[order], w[order]
    keep = np.r_[True, (r[1:] != r[:-1]) | (ids[1:] != ids[:-1])]
    r, ids, w = r[keep], ids[keep], w[keep]
    norm = np.sqrt(np.bincount(r, weights=w * w, minlength=terms.rows))
    indptr = np.zeros(terms.rows + 1, np.int64)
    np.cumsum(np.bincount(r, minlength=terms.rows), out=indptr[1:])
    return TermMatrix(indptr, ids, w / norm[r])


def _copies(base: SubscriptionBatch, rng: np.random.Generator, n: int, first_id: int,
            near: tuple[float, float] | None = None) -> SubscriptionBatch:
    """``n`` copies of random base subscriptions (of the 5% nearest to ``near``, if given: local
    interests, which matters where terms are local, as place names are)."""
    pool = np.arange(len(base))
    if near is not None and len(base):
        d2 = (base.x - near[0]) ** 2 + (base.y - near[1]) ** 2
        pool = np.argsort(d2, kind="stable")[: max(1, len(base) // 20)]
    src = pool[rng.integers(0, len(pool), n)]
    out = base.take(src)
    out.ids = np.arange(first_id, first_id + n, dtype=np.int64)
    return out


def _subs_with_terms(vocab, rows: list[list[int]], x, y, rng: np.random.Generator, first_id: int, k: int):
    n = len(rows)
    r = np.repeat(np.arange(n, dtype=np.int64), [len(t) for t in rows])
    ids = np.array([t for ts in rows for t in ts], np.int64)
    order = np.lexsort((ids, r))
    r, ids = r[order], ids[order]
    weights = normalize_rows(r, vocab.idf(ids), n)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(r, minlength=n), out=indptr[1:])
    return SubscriptionBatch(np.arange(first_id, first_id + n, dtype=np.int64), x, y, np.full(n, k, np.int64),
                             rng.random(n), TermMatrix(indptr, ids, weights))


def make_drift(kind: str, workload, *, start: int = 0, seed: int = 0, **params: float) -> DriftStream:
    """Drift ``workload``'s stream after message ``start`` (see module docstring).

    >>> from skype.data import make_workload
    >>> w = make_workload("tweets", num_subs=100, num_messages=2000, seed=1)
    >>> d = make_drift("hotspot", w, start=500, seed=3)
    >>> len(d.messages), len(d.arrivals) == 30, bool((d.arrive_at >= 500).all())
    (2000, True, True)
    >>> bool((d.messages.x[:500] == w.messages.x[:500]).all())
    True
    """
    p = _check(kind, params)
    msgs = workload.messages
    subs = workload.subscriptions
    n = len(msgs)
    start = int(np.clip(start, 0, n))
    rng = np.random.default_rng(np.random.SeedSequence([seed, DRIFT_KINDS.index(kind)]))
    prog = _progress(n, start)
    x, y, terms = msgs.x.copy(), msgs.y.copy(), msgs.terms
    first_id = int(subs.ids.max(initial=-1)) + 1
    arrivals, arrive_at, leave_at = empty_subscriptions(), np.zeros(0, np.int64), np.zeros(0, np.int64)
    info: dict[str, Any] = {"kind": kind, "start": start, "seed": seed, **p}
    span = max(n - start, 1)
    bounds = workload.bounds
    if kind == "hotspot":
        a = rng.integers(0, n)
        heading = rng.uniform(0, 2 * np.pi)
        ax, ay = msgs.x[a], msgs.y[a]
        bx = float(np.clip(ax + p["travel"] * np.cos(heading), bounds.minx, bounds.maxx))
        by = float(np.clip(ay + p["travel"] * np.sin(heading), bounds.miny, bounds.maxy))
        info["path"] = [[float(ax), float(ay)], [float(bx), float(by)]]
        hot = (np.arange(n) >= start) & (rng.random(n) < p["share"] * prog)
        cx, cy = ax + prog * (bx - ax), ay + prog * (by - ay)
        x[hot] = cx[hot] + rng.normal(0, p["radius"], hot.sum())
        y[hot] = cy[hot] + rng.normal(0, p["radius"], hot.sum())
        count = int(p["sub_share"] * len(subs))
        when = np.sqrt(rng.random(count))  # density 2p: more arrivals as the spot heats up
        arrive_at = (start + when * span).astype(np.int64).clip(start, n - 1)
        arrivals = _copies(subs, rng, count, first_id, near=((ax + bx) / 2, (ay + by) / 2))
        arrivals.x, arrivals.y = _clip(ax + when * (bx - ax) + rng.normal(0, p["radius"], count),
                                       ay + when * (by - ay) + rng.normal(0, p["radius"], count), bounds)
        leave_at = arrive_at + int(p["lifetime"] * span)
        leave_at[leave_at >= n] = -1
    elif kind == "trending":
        df = workload.vocabulary.document_frequency(np.arange(workload.vocabulary.num_known))
        ranked = np.argsort(-df, kind="stable")
        trends = int(p["trends"])
        pool = ranked[100:1000] if len(ranked) > 1000 else ranked[len(ranked) // 2:]
        chosen = rng.choice(pool, size=trends, replace=False)
        info["terms"] = [workload.vocabulary.term(int(t)) for t in chosen]
        centres = (np.arange(trends) + 1) / (trends + 1)
        width = 1.0 / (trends + 1)
        bump = np.clip(1 - np.abs(prog[:, None] - centres[None, :]) / width, 0, 1) * (np.arange(n) >= start)[:, None]
        which = np.argmax(bump, axis=1)
        hot = rng.random(n) < p["share"] * bump[np.arange(n), which]
        terms = with_term(terms, np.flatnonzero(hot), chosen[which[hot]], 0.5)
        count = int(p["sub_share"] * len(subs))
        trend_of = rng.integers(0, trends, count)
        when = np.clip(centres[trend_of] + (rng.random(count) - 0.5) * width, 0, 1)
        arrive_at = (start + when * span).astype(np.int64).clip(start, n - 1)
        base = _copies(subs, rng, count, first_id)
        arrivals = base
        arrivals.terms = with_term(base.terms, np.arange(count), chosen[trend_of], 1.0)
        leave_at = arrive_at + int(p["lifetime"] * span)
        leave_at[leave_at >= n] = -1
    elif kind == "flip":
        x0, x1 = np.percentile(msgs.x, [1, 99])
        y0, y1 = np.percentile(msgs.y, [1, 99])
        gx = np.clip(((msgs.x - x0) / max(x1 - x0, 1e-9) * 10).astype(int), 0, 9)
        gy = np.clip(((msgs.y - y0) / max(y1 - y0, 1e-9) * 10).astype(int), 0, 9)
        busiest = np.argsort(-np.bincount(gy * 10 + gx, minlength=100), kind="stable")[:10]
        info["regions"] = busiest.tolist()
        df = workload.vocabulary.document_frequency(np.arange(workload.vocabulary.num_known))
        ranked = np.argsort(-df, kind="stable")
        frequent, rare = ranked[: max(1, len(ranked) // 100)], ranked[len(ranked) // 2:]
        periods = int(p["periods"])
        per = max(1, int(p["sub_share"] * len(subs)) // (len(busiest) * periods))
        parts, arrive, leave, next_id = [], [], [], first_id
        for period in range(periods):
            at = start + period * span // periods
            end = start + (period + 1) * span // periods
            for j, region in enumerate(busiest):
                q1 = (j + period) % 2 == 0
                rx = x0 + (region % 10 + rng.random(per)) * (x1 - x0) / 10
                ry = y0 + (region // 10 + rng.random(per)) * (y1 - y0) / 10
                pool = frequent if q1 else rare
                rows = [sorted(set(rng.choice(pool, size=int(rng.integers(1, 4))).tolist())) for _ in range(per)]
                parts.append(_subs_with_terms(workload.vocabulary, rows, rx, ry, rng, next_id, int(subs.k[0]) if len(subs) else 20))
                next_id += per
                arrive.append(np.full(per, at))
                leave.append(np.full(per, end if end < n else -1))
        if parts:
            arrivals = concat_subscriptions(parts)
            arrive_at, leave_at = np.concatenate(arrive).astype(np.int64), np.concatenate(leave).astype(np.int64)
    elif kind == "inject":
        r1, r2 = rng.integers(0, n, 2)
        info["regions"] = [[float(msgs.x[r1]), float(msgs.y[r1])], [float(msgs.x[r2]), float(msgs.y[r2])]]
        hot = (prog >= 1 / 3) & (np.arange(n) >= start) & (rng.random(n) < p["share"])
        x[hot] = msgs.x[r1] + rng.normal(0, p["radius"], hot.sum())
        y[hot] = msgs.y[r1] + rng.normal(0, p["radius"], hot.sum())
        count = int(p["sub_share"] * len(subs))
        arrivals = _copies(subs, rng, count, first_id)
        arrivals.x, arrivals.y = _clip(msgs.x[r2] + rng.normal(0, p["radius"], count),
                                       msgs.y[r2] + rng.normal(0, p["radius"], count), bounds)
        arrive_at = np.full(count, min(n - 1, start + span * 2 // 3), np.int64)
        leave_at = np.full(count, -1, np.int64)
    x, y = _clip(x, y, bounds)
    drifted = MessageBatch(msgs.ids, x, y, msgs.t, terms)
    return DriftStream(kind, drifted, arrivals, arrive_at, leave_at, start, info)

