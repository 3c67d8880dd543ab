"""Data model: subscriptions, messages, results, space bounds, and columnar batches.

Scoring (``skype-spec.md`` §1):

    ST(s, m) = alpha * SSim + (1 - alpha) * TSim
    SSim     = 1 - d(s, m) / MaxDist       d Euclidean, MaxDist = diagonal of the bounds
    TSim     = sum over common terms (ascending term id) of w(t, s) * w(t, m)

with unit-length weight vectors.  A message that shares no term with a subscription does not
score at all.  Ranking: score descending, then the newer message (later arrival) first.
:func:`score` computes ST operation by operation as the core does (the brute-force engines and
the test oracles call it).

Records (:class:`Subscription`, :class:`Message`) carry text or explicit ``{term: weight}`` and are
what users write.  Batches (:class:`SubscriptionBatch`, :class:`MessageBatch`) carry the same data
column-wise with terms resolved to integer ids of one :class:`~skype.text.Vocabulary` (CSR
:class:`TermMatrix`), which is what the engines and the generators exchange.  A batch's result
changes come back column-wise too (:class:`ChangeLog`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Iterator, Mapping

import numpy as np

from skype.errors import InputError


@dataclass(frozen=True)
class Bounds:
    """The data space ``[minx, maxx] x [miny, maxy]`` (x = longitude, y = latitude)."""

    minx: float = -180.0
    miny: float = -90.0
    maxx: float = 180.0
    maxy: float = 90.0

    def __post_init__(self) -> None:
        vals = (self.minx, self.miny, self.maxx, self.maxy)
        if not all(math.isfinite(v) for v in vals) or self.minx >= self.maxx or self.miny >= self.maxy:
            raise InputError("E014", value=vals)

    @property
    def max_dist(self) -> float:
        """MaxDist: the diagonal of the space, so that SSim and every bound lie in [0, 1]."""
        return math.sqrt((self.maxx - self.minx) ** 2 + (self.maxy - self.miny) ** 2)

    def contains(self, x: float, y: float) -> bool:
        return self.minx <= x <= self.maxx and self.miny <= y <= self.maxy

    def as_tuple(self) -> tuple[float, float, float, float]:
        return (self.minx, self.miny, self.maxx, self.maxy)

    @classmethod
    def parse(cls, text: str) -> Bounds:
        """Parse ``"minx,miny,maxx,maxy"``."""
        try:
            parts = [float(p) for p in text.split(",")]
        except ValueError:
            raise InputError("E014", value=text) from None
        if len(parts) != 4:
            raise InputError("E014", value=text)
        return cls(*parts)

    def __str__(self) -> str:
        return f"{self.minx:g},{self.miny:g},{self.maxx:g},{self.maxy:g}"


DEFAULT_BOUNDS = Bounds()


@dataclass(frozen=True)
class Subscription:
    """A continuous top-k spatial-keyword query (kind ``"topk"``).  ``until``: a timestamp after
    which the subscription ends by itself (its results leave); None for no end.  The other kinds
    are in :mod:`skype.queries`.

    >>> Subscription(id=1, x=2.35, y=48.86, k=5, alpha=0.3, text="coffee croissant")
    Subscription(id=1, x=2.35, y=48.86, k=5, alpha=0.3, text='coffee croissant', terms=None, until=None)
    """

    id: int
    x: float
    y: float
    k: int = 20
    alpha: float = 0.5
    text: str | None = None
    terms: Mapping[str, float] | None = None
    until: float | None = None
    kind: ClassVar[str] = "topk"


@dataclass(frozen=True)
class Message:
    """A geo-tagged message.  ``t`` defaults to the message's arrival index.

    >>> Message(id=7, x=2.35, y=48.86, text="fresh croissant and coffee")
    Message(id=7, x=2.35, y=48.86, t=None, text='fresh croissant and coffee', terms=None)
    """

    id: int
    x: float
    y: float
    t: float | None = None
    text: str | None = None
    terms: Mapping[str, float] | None = None


@dataclass(frozen=True, order=True)
class Match:
    """One entry of a top-k result: a message id and its score."""

    id: int
    score: float


@dataclass(frozen=True)
class ResultChange:
    """How one subscription's top-k changed: the messages that entered and that left it."""

    sub_id: int
    entered: tuple[int, ...] = ()
    left: tuple[int, ...] = ()


# --------------------------------------------------------------------------- columnar batches


def _as_array(values: object, dtype: type) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(values, dtype=dtype))


@dataclass
class TermMatrix:
    """Term vectors in CSR form: row i has ``ids[indptr[i]:indptr[i+1]]`` (ascending, unique)
    with unit-length ``weights``."""

    indptr: np.ndarray
    ids: np.ndarray
    weights: np.ndarray

    def __post_init__(self) -> None:
        self.indptr = _as_array(self.indptr, np.int64)
        self.ids = _as_array(self.ids, np.int64)
        self.weights = _as_array(self.weights, np.float64)

    @property
    def rows(self) -> int:
        return len(self.indptr) - 1

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        a, b = self.indptr[i], self.indptr[i + 1]
        return self.ids[a:b], self.weights[a:b]

    def lengths(self) -> np.ndarray:
        return np.diff(self.indptr)

    def take(self, rows: np.ndarray) -> TermMatrix:
        rows = np.asarray(rows, dtype=np.int64)
        lens = self.lengths()[rows]
        indptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lens, out=indptr[1:])
        starts = self.indptr[rows]
        gather = np.repeat(starts - indptr[:-1], lens) + np.arange(indptr[-1], dtype=np.int64)
        return TermMatrix(indptr, self.ids[gather], self.weights[gather])

    @classmethod
    def from_rows(cls, rows: list[tuple[np.ndarray, np.ndarray]]) -> TermMatrix:
        indptr = np.zeros(len(rows) + 1, dtype=np.int64)
        if rows:
            np.cumsum([len(r[0]) for r in rows], out=indptr[1:])
            ids = np.concatenate([np.asarray(r[0], dtype=np.int64) for r in rows])
            weights = np.concatenate([np.asarray(r[1], dtype=np.float64) for r in rows])
        else:
            ids, weights = np.zeros(0, np.int64), np.zeros(0, np.float64)
        return cls(indptr, ids, weights)

    @classmethod
    def concat(cls, parts: list[TermMatrix]) -> TermMatrix:
        if not parts:
            return cls(np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0))
        offsets = np.cumsum([0] + [p.indptr[-1] for p in parts[:-1]])
        indptr = np.concatenate([[0]] + [p.indptr[1:] + off for p, off in zip(parts, offsets)])
        return cls(indptr, np.concatenate([p.ids for p in parts]), np.concatenate([p.weights for p in parts]))


@dataclass
class MessageBatch:
    """Messages column-wise.  ``t`` must be non-decreasing."""

    ids: np.ndarray
    x: np.ndarray
    y: np.ndarray
    t: np.ndarray
    terms: TermMatrix

    def __post_init__(self) -> None:
        self.ids = _as_array(self.ids, np.int64)
        self.x = _as_array(self.x, np.float64)
        self.y = _as_array(self.y, np.float64)
        self.t = _as_array(self.t, np.float64)

    def __len__(self) -> int:
        return len(self.ids)

    def slice(self, start: int, stop: int) -> MessageBatch:
        rows = np.arange(start, min(stop, len(self)), dtype=np.int64)
        return self.take(rows)

    def take(self, rows: np.ndarray) -> MessageBatch:
        return MessageBatch(self.ids[rows], self.x[rows], self.y[rows], self.t[rows], self.terms.take(rows))

    @classmethod
    def concat(cls, parts: list[MessageBatch]) -> MessageBatch:
        return cls(
            np.concatenate([p.ids for p in parts]) if parts else np.zeros(0, np.int64),
            np.concatenate([p.x for p in parts]) if parts else np.zeros(0),
            np.concatenate([p.y for p in parts]) if parts else np.zeros(0),
            np.concatenate([p.t for p in parts]) if parts else np.zeros(0),
            TermMatrix.concat([p.terms for p in parts]),
        )

    def batches(self, size: int) -> Iterator[MessageBatch]:
        for start in range(0, len(self), size):
            yield self.slice(start, start + size)


@dataclass
class SubscriptionBatch:
    """Subscriptions column-wise."""

    ids: np.ndarray
    x: np.ndarray
    y: np.ndarray
    k: np.ndarray
    alpha: np.ndarray
    terms: TermMatrix
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.ids = _as_array(self.ids, np.int64)
        self.x = _as_array(self.x, np.float64)
        self.y = _as_array(self.y, np.float64)
        self.k = _as_array(self.k, np.int64)
        self.alpha = _as_array(self.alpha, np.float64)

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, rows: np.ndarray) -> SubscriptionBatch:
        return SubscriptionBatch(
            self.ids[rows], self.x[rows], self.y[rows], self.k[rows], self.alpha[rows], self.terms.take(rows)
        )

    def slice(self, start: int, stop: int) -> SubscriptionBatch:
        return self.take(np.arange(start, min(stop, len(self)), dtype=np.int64))


def score(s_terms, s_alpha, s_x, s_y, m_terms, m_x, m_y, max_dist):
    """ST(s, m), or None when s and m share no term.

    The operation order is the contract with the core (``csrc/skype/_core/scoring.pxd``):
    TSim summed over common terms in ascending term id, SSim = 1 - sqrt(dx*dx + dy*dy) / MaxDist.
    """
    tsim = 0.0
    shared = False
    for term, ws in s_terms:
        wm = m_terms.get(term)
        if wm is not None:
            tsim += ws * wm
            shared = True
    if not shared:
        return None
    dx = m_x - s_x
    dy = m_y - s_y
    ssim = 1.0 - math.sqrt(dx * dx + dy * dy) / max_dist
    return s_alpha * ssim + (1.0 - s_alpha) * tsim


@dataclass
class ChangeLog:
    """Result changes of a batch, column-wise: row r says that message ``msg[r]`` entered
    (``entered[r]``) or left the top-k of subscription ``sub[r]`` while the batch's message
    number ``at[r]`` was processed.  Rows are ordered by ``at``."""

    at: np.ndarray
    sub: np.ndarray
    msg: np.ndarray
    entered: np.ndarray

    @classmethod
    def empty(cls) -> ChangeLog:
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, bool))

    @classmethod
    def from_rows(cls, rows: list[tuple[int, int, int, bool]]) -> ChangeLog:
        """From ``(at, sub, msg, entered)`` rows, in order (the brute-force engines build these)."""
        if not rows:
            return cls.empty()
        at, sub, msg, ent = zip(*rows)
        return cls(np.array(at, np.int64), np.array(sub, np.int64), np.array(msg, np.int64),
                   np.array(ent, bool))

    @classmethod
    def concat(cls, logs: list[ChangeLog], offsets: list[int] | None = None) -> ChangeLog:
        if not logs:
            return cls.empty()
        offsets = offsets or [0] * len(logs)
        return cls(
            np.concatenate([log.at + off for log, off in zip(logs, offsets)]),
            np.concatenate([log.sub for log in logs]),
            np.concatenate([log.msg for log in logs]),
            np.concatenate([log.entered for log in logs]),
        )

    def __len__(self) -> int:
        return len(self.at)

    def changes(self) -> list[ResultChange]:
        """Group into one :class:`ResultChange` per (message, subscription), in order."""
        out: list[ResultChange] = []
        if len(self.at) == 0:
            return out
        order = np.lexsort((self.msg, self.sub, self.at))
        at, sub, msg, ent = self.at[order], self.sub[order], self.msg[order], self.entered[order]
        starts = np.flatnonzero(np.r_[True, (at[1:] != at[:-1]) | (sub[1:] != sub[:-1])])
        ends = np.r_[starts[1:], len(at)]
        for a, b in zip(starts, ends):
            e, m = ent[a:b], msg[a:b]
            out.append(ResultChange(int(sub[a]), tuple(int(i) for i in m[e]), tuple(int(i) for i in m[~e])))
        return out
