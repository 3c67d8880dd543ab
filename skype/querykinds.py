"""The query kinds beside topk behind one interface, and its implementation on the Cython core.

:class:`QueryKinds` is what :class:`~skype.api.EngineBase` dispatches ``range``, ``knn`` and
``terms`` subscriptions and every snapshot query to; the top-k core never sees them.  Two
implementations: :class:`CoreQueryKinds` here (``skype._core.querycore`` and
``skype._core.querysnapshots``: a query window with its message index and the kinds' own
objects, ``rangequery``, ``knnquery`` and ``termsquery``, which this facade calls directly for
subscriptions and results; snapshot walks) and
:class:`skype.reference_queries.ReferenceQueryKinds` (brute force).

Change logs of ``terms`` subscriptions carry vocabulary term ids in the ``msg`` column.
Predicates arrive compiled (:class:`~skype.queries.QuerySpec`); the core shifts term ids by one
(its term 0 is held by every message), which :func:`_shift` does once here.
"""

from __future__ import annotations

import abc
import bisect
import math
import time

import numpy as np

from skype.model import Bounds, ChangeLog, Match, MessageBatch, TermMatrix
from skype.queries import Neighbor, QuerySpec, TermCount
from skype.text import Vocabulary


class QueryKinds(abc.ABC):
    """Continuous range/knn/terms subscriptions and snapshot queries over one window."""

    @abc.abstractmethod
    def subscribe(self, spec: QuerySpec) -> object:
        """Register; returns a handle for the other calls."""

    @abc.abstractmethod
    def unsubscribe(self, kind: str, handle: object) -> None: ...

    def prepare(self) -> None:
        """Called after a bulk registration (``subscribe_batch`` of records): settle the indexes."""

    @abc.abstractmethod
    def publish(self, batch: MessageBatch) -> ChangeLog: ...

    @abc.abstractmethod
    def advance(self, t: float) -> ChangeLog: ...

    @abc.abstractmethod
    def result(self, kind: str, handle: object) -> list: ...

    @abc.abstractmethod
    def result_entries(self, kind: str, handle: object) -> list[int]:
        """The result as change-log entries: message ids, or term ids for ``terms``."""

    @abc.abstractmethod
    def snapshot(self, spec: QuerySpec, now: float) -> list: ...

    @abc.abstractmethod
    def stats(self) -> dict: ...


class NameLabels:
    """32-bit labels in the order of the term names (code point order, which is UTF-8 byte
    order), for ids 0, 1, ...: a new name takes the middle of the gap between its neighbours;
    when a gap is used up (or many names come at once) every name is relabelled evenly.

    >>> labels = NameLabels()
    >>> labels.add(["pear", "apple"]), labels.add(["fig"])
    (False, False)
    >>> sorted(range(3), key=labels.by_id.__getitem__)
    [1, 2, 0]
    """

    SPACE = 2**32

    def __init__(self) -> None:
        self.by_id: list[int] = []
        self._names_by_id: list[str] = []
        self._sorted_names: list[str] = []
        self._sorted_labels: list[int] = []

    def add(self, names: list[str]) -> bool:
        """Label the next ids; True when existing labels changed."""
        self._names_by_id.extend(names)
        if len(names) > 64 + len(self._sorted_names) // 16:
            self._relabel()
            return True
        for name in names:
            pos = bisect.bisect_left(self._sorted_names, name)
            lo = self._sorted_labels[pos - 1] if pos else 0
            hi = self._sorted_labels[pos] if pos < len(self._sorted_names) else self.SPACE
            if hi - lo < 2:
                self._relabel()
                return True
            self.by_id.append((lo + hi) // 2)
            self._sorted_names.insert(pos, name)
            self._sorted_labels.insert(pos, (lo + hi) // 2)
        return False

    def _relabel(self) -> None:
        names = self._names_by_id
        order = sorted(range(len(names)), key=names.__getitem__)
        step = self.SPACE // (len(names) + 1)
        self.by_id = [0] * len(names)
        for rank, i in enumerate(order):
            self.by_id[i] = step * (rank + 1)
        self._sorted_names = [names[i] for i in order]
        self._sorted_labels = [step * (rank + 1) for rank in range(len(names))]


def _shift(codes: np.ndarray) -> np.ndarray:
    """Term ids (>= 0) + 1; operators (< 0) unchanged."""
    return np.ascontiguousarray(np.where(codes >= 0, codes + 1, codes), dtype=np.int64)


def _last(spec: QuerySpec) -> float:
    return spec.last if spec.last is not None else 0.0


class CoreQueryKinds(QueryKinds):
    """:class:`QueryKinds` on ``skype._core.querysnapshots.SnapshotCore`` (a ``QueryCore``).

    The class constants below choose the core's designs; the defaults are the product's, and no
    engine option changes them.  The other values are bench switches (set on the class by a
    bench, ``bench/test_queries.py``, ``bench/range_fast.py``), each kept because a test holds
    it equal to the reference as well: ``TERMS_GRID = 0`` is the terms kind's first design
    (bounded walks with bounds remembered in ``termsquery``'s ``MEMO`` slots, no shared counts;
    ``tests/test_queries.py``), ``KNN_INDEX = False`` the kNN candidates from per-term lists
    (``tests/test_queries.py``), ``RANGE_INDEX = "grid"`` the range subscriptions in per-term
    lists of one grid (``tests/test_range_index.py``).
    """

    KNN_INDEX = True  # knn candidates from the grid of k-th distance boxes (False: per cover term lists)
    TERMS_GRID = 64   # terms: cells per side of the shared per-cell term counts (0: design 1 alone)
    TERMS_GRID_TABLES = (32, 16)  # a term has a table of counts from 32 window messages until below 16
    # snapshot terms: count tables of (cells per side, a table from this many window messages, until below
    # this) over the whole window, built at the first snapshot terms query ((0, 0, 0): count every message);
    # 64 cells: 30% fewer walks than 32 for 4x the memory (356 MB of tables at 1M tweets; results 2026-11-29)
    SNAPSHOT_TERMS_GRID = (64, 32, 16)
    # terms: "blocks" (design 3: lanes in blocks of 64, shared rows, a threshold per lane) or "buffers"
    # (design 1/2: a buffer of 2k exact counts per subscription)
    TERMS_DESIGN = "blocks"
    # design 3: (cells per side of the index of blocks, cells per side grouping lanes by centre, a lane's
    # gate at its (g * k)-th term, f * k terms tracked after a refill)
    TERMS_BLOCKS = (64, 64, 2, 4)
    RANGE_INDEX = "keyword"  # range subscriptions keyword first ("grid": the per-term lists of one grid)

    def __init__(self, bounds: Bounds, vocabulary: Vocabulary, window: int | None, window_seconds: float | None,
                 *, grid: int = 64, knn_factor: int = 2, leaf_capacity: int = 64, term_trees: str = "lazy") -> None:
        from skype._core.querysnapshots import SnapshotCore

        self.vocabulary = vocabulary
        self._labels = NameLabels()
        self._core = SnapshotCore(bounds.minx, bounds.miny, bounds.maxx, bounds.maxy, bounds.max_dist,
                               window or 0, window_seconds or 0.0, grid, knn_factor, leaf_capacity,
                               knn_index=self.KNN_INDEX, range_keyword=self.RANGE_INDEX == "keyword")
        # the kinds' own objects (skype._core.rangequery, knnquery, termsquery), siblings in the core
        self._kinds = {"range": self._core.range_kind, "knn": self._core.knn_kind, "terms": self._core.terms_kind}
        self._kinds["terms"].set_blocks(self.TERMS_DESIGN == "blocks", *self.TERMS_BLOCKS)
        self._kinds["terms"].set_grid(self.TERMS_GRID, *self.TERMS_GRID_TABLES)
        self._core.set_snapshot_grid(*self.SNAPSHOT_TERMS_GRID)
        self._publish_s = 0.0  # wall time of publish(): the core's steps and the glue around them
        if term_trees == "eager":
            self._core.need_term_trees()

    def _sync_names(self) -> None:
        have = self._core.name_count()
        if have < len(self.vocabulary):
            new = [self.vocabulary.term(i) for i in range(have, len(self.vocabulary))]
            self._core.add_names([name.encode("utf-8") for name in new])
            relabel = self._labels.add(new)
            self._kinds["terms"].set_labels(np.asarray(self._labels.by_id, dtype=np.uint32), relabel)

    def subscribe(self, spec: QuerySpec) -> object:
        self._sync_names()
        if spec.kind == "range":
            return self._kinds["range"].subscribe(spec.id, spec.rect, _shift(spec.program), _shift(spec.cover))
        if spec.kind == "knn":
            return self._kinds["knn"].subscribe(spec.id, spec.x, spec.y, spec.k, _shift(spec.program),
                                                _shift(spec.cover))
        return self._kinds["terms"].subscribe(spec.id, spec.rect, spec.k)

    def unsubscribe(self, kind: str, handle: object) -> None:
        self._kinds[kind].unsubscribe(handle)

    def prepare(self) -> None:
        self._core.prepare()

    def publish(self, batch: MessageBatch) -> ChangeLog:
        t0 = time.perf_counter()
        self._sync_names()
        t = batch.terms
        log = ChangeLog(*self._core.publish_batch(batch.ids, batch.x, batch.y, batch.t, t.indptr,
                                                  t.ids.astype(np.uint32), t.weights))
        self._publish_s += time.perf_counter() - t0
        return log

    def advance(self, t: float) -> ChangeLog:
        return ChangeLog(*self._core.advance(t))

    def result(self, kind: str, handle: object) -> list:
        if kind == "range":
            return [int(i) for i in self._kinds["range"].result(handle)]
        if kind == "knn":
            ids, dist = self._kinds["knn"].result(handle)
            return [Neighbor(int(i), float(d)) for i, d in zip(ids, dist)]
        ids, counts = self._kinds["terms"].result(handle)
        return [TermCount(self.vocabulary.term(int(i)), int(c)) for i, c in zip(ids, counts)]

    def result_entries(self, kind: str, handle: object) -> list[int]:
        result = self._kinds[kind].result(handle)    # range: ids; knn and terms: (ids, values)
        return [int(i) for i in (result if kind == "range" else result[0])]

    def snapshot(self, spec: QuerySpec, now: float) -> list:
        self._sync_names()
        now = now if math.isfinite(now) else 0.0
        last = _last(spec)
        if spec.kind == "range":
            ids = self._core.snapshot_range(spec.rect, _shift(spec.program), _shift(spec.cover), now, last)
            return [int(i) for i in ids]
        if spec.kind == "knn":
            ids, dist = self._core.snapshot_knn(spec.x, spec.y, spec.k, _shift(spec.program), _shift(spec.cover),
                                                now, last)
            return [Neighbor(int(i), float(d)) for i, d in zip(ids, dist)]
        if spec.kind == "terms":
            ids, counts = self._core.snapshot_terms(spec.rect, spec.k, now, last)
            return [TermCount(self.vocabulary.term(int(i)), int(c)) for i, c in zip(ids, counts)]
        ids, scores = self._core.snapshot_topk(spec.x, spec.y, spec.k, spec.alpha,
                                               np.ascontiguousarray(spec.term_ids, np.int64),
                                               np.ascontiguousarray(spec.weights, np.float64), now, last)
        return [Match(int(i), float(s)) for i, s in zip(ids, scores)]

    def window_has(self, ids: np.ndarray) -> np.ndarray:
        return self._core.query_window().window_has(ids)

    def window_ids(self) -> np.ndarray:
        return self._core.query_window().window_ids()

    def window_batch(self) -> MessageBatch:
        """The window's messages, oldest first (vocabulary term ids, raw weights)."""
        ids, x, y, t, indptr, terms, weights = self._core.query_window().window_arrays()
        return MessageBatch(ids, x, y, t, TermMatrix(indptr, terms.astype(np.int64), weights))

    def stats(self) -> dict:
        s = self._core.stats()
        s["query_window_size"] = self._core.window_size()
        s["publish_s"] = self._publish_s
        s["snapshots"] = self._core.snapshot_stats()
        return s
