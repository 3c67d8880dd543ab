"""Routings: which partitions each record of a batch goes to, in CSR form, and the id hash.

A :class:`Routing` answers "where does row i go" for a whole batch at once: row i goes to
``partitions[indptr[i]:indptr[i+1]]``.  Invariants (every constructor keeps them):

* ``indptr`` is int64, non-decreasing, ``indptr[0] == 0``, ``len(indptr) == rows + 1``;
* ``partitions`` is int32; within a row the partitions are **strictly ascending** (no
  duplicates), so ``counts()`` is the number of distinct copies of the row.

It holds plain numpy arrays only, so it pickles and ships to Spark executors as is.

:func:`splitmix64` is the one hash of the layer (hash method, Eq. 14, and the tie-breaks of the
KD split): a fixed, platform-independent mix of the 64-bit id, so routing never depends on
Python's salted ``hash``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def splitmix64(ids: np.ndarray) -> np.ndarray:
    """The SplitMix64 finaliser of each int64 id, as uint64 (wrapping arithmetic).

    >>> splitmix64(np.array([0, 1])).tolist()
    [16294208416658607535, 10451216379200822465]
    """
    z = np.asarray(ids, dtype=np.int64).astype(np.uint64) + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def _indptr_from_rows(rows: np.ndarray, num_rows: int) -> np.ndarray:
    indptr = np.zeros(num_rows + 1, dtype=np.int64)
    if len(rows):
        np.cumsum(np.bincount(rows, minlength=num_rows), out=indptr[1:])
    return indptr


@dataclass
class Routing:
    """Row i goes to ``partitions[indptr[i]:indptr[i+1]]`` (ascending, distinct).

    >>> r = Routing.from_pairs(np.array([0, 0, 2, 0]), np.array([3, 1, 0, 3]), num_rows=3)
    >>> r.indptr.tolist(), r.partitions.tolist(), r.counts().tolist()
    ([0, 2, 2, 3], [1, 3, 0], [2, 0, 1])
    >>> [a.tolist() for a in r.pairs()]
    [[0, 0, 2], [1, 3, 0]]
    """

    indptr: np.ndarray
    partitions: np.ndarray

    def __post_init__(self) -> None:
        self.indptr = np.ascontiguousarray(self.indptr, dtype=np.int64)
        self.partitions = np.ascontiguousarray(self.partitions, dtype=np.int32)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def empty(cls, num_rows: int) -> Routing:
        """Every row goes nowhere."""
        return cls(np.zeros(num_rows + 1, np.int64), np.zeros(0, np.int32))

    @classmethod
    def broadcast(cls, num_rows: int, num_partitions: int) -> Routing:
        """Every row goes to every partition."""
        indptr = np.arange(num_rows + 1, dtype=np.int64) * num_partitions
        return cls(indptr, np.tile(np.arange(num_partitions, dtype=np.int32), num_rows))

    @classmethod
    def one_each(cls, partitions: np.ndarray) -> Routing:
        """Row i goes to ``partitions[i]`` only."""
        return cls(np.arange(len(partitions) + 1, dtype=np.int64), partitions)

    @classmethod
    def from_pairs(cls, rows: np.ndarray, partitions: np.ndarray, num_rows: int) -> Routing:
        """From (row, partition) pairs in any order, duplicates allowed."""
        rows = np.asarray(rows, dtype=np.int64)
        partitions = np.asarray(partitions, dtype=np.int64)
        if len(rows) == 0:
            return cls.empty(num_rows)
        width = int(partitions.max()) + 1
        key = np.sort(rows * width + partitions)  # sort + adjacent test: faster than np.unique here
        key = key[np.r_[True, key[1:] != key[:-1]]]
        urows, uparts = np.divmod(key, width)
        return cls(_indptr_from_rows(urows, num_rows), uparts)

    @classmethod
    def from_sorted_pairs(cls, rows: np.ndarray, partitions: np.ndarray, num_rows: int) -> Routing:
        """From pairs already sorted by (row, partition), duplicates allowed (no sort: O(n))."""
        if len(rows) == 0:
            return cls.empty(num_rows)
        keep = np.empty(len(rows), dtype=bool)
        keep[0] = True
        np.not_equal(rows[1:], rows[:-1], out=keep[1:])
        keep[1:] |= partitions[1:] != partitions[:-1]
        return cls(_indptr_from_rows(rows[keep], num_rows), partitions[keep])

    # ------------------------------------------------------------------ access
    @property
    def rows(self) -> int:
        return len(self.indptr) - 1

    def __len__(self) -> int:
        return self.rows

    def counts(self) -> np.ndarray:
        """Number of partitions (copies) of each row."""
        return np.diff(self.indptr)

    def row(self, i: int) -> np.ndarray:
        return self.partitions[self.indptr[i]:self.indptr[i + 1]]

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """(row, partition) arrays, one entry per copy, sorted by row then partition."""
        rows = np.repeat(np.arange(self.rows, dtype=np.int64), self.counts())
        return rows, self.partitions

    def partition_sizes(self, num_partitions: int) -> np.ndarray:
        """How many rows each partition receives."""
        return np.bincount(self.partitions, minlength=num_partitions).astype(np.int64)

    def by_partition(self, num_partitions: int) -> Routing:
        """The transpose: row p of the result lists the rows sent to partition p (ascending)."""
        rows, parts = self.pairs()
        order = np.argsort(parts, kind="stable")
        return Routing(_indptr_from_rows(parts[order], num_partitions), rows[order].astype(np.int32))

    def union(self, other: Routing) -> Routing:
        """Row-wise union of two routings of the same rows."""
        if other.rows != self.rows:
            raise ValueError(f"cannot unite routings of {self.rows} and {other.rows} rows")
        r1, p1 = self.pairs()
        r2, p2 = other.pairs()
        return Routing.from_pairs(np.concatenate([r1, r2]), np.concatenate([p1, p2]), self.rows)

    def meets(self, other: Routing, rows_self: np.ndarray, rows_other: np.ndarray) -> np.ndarray:
        """For each pair (rows_self[j], rows_other[j]): do the two rows share a partition?"""
        rows_self = np.asarray(rows_self, dtype=np.int64)
        rows_other = np.asarray(rows_other, dtype=np.int64)
        out = np.zeros(len(rows_self), dtype=bool)
        if len(rows_self) == 0 or len(self.partitions) == 0 or len(other.partitions) == 0:
            return out
        width = int(max(self.partitions.max(), other.partitions.max())) + 1
        pair_id = np.arange(len(rows_self), dtype=np.int64)
        # expand each pair by the partitions of its left row, then test membership on the right
        a_cnt = self.counts()[rows_self]
        a_pair = np.repeat(pair_id, a_cnt)
        a_pos = np.repeat(self.indptr[rows_self] - np.cumsum(a_cnt) + a_cnt, a_cnt) + np.arange(a_cnt.sum())
        a_key = np.repeat(rows_other, a_cnt) * width + self.partitions[a_pos]
        o_rows, o_parts = other.pairs()
        o_key = np.sort(o_rows * width + o_parts)
        hit = np.zeros(len(a_key), dtype=bool)
        if len(o_key):
            idx = np.searchsorted(o_key, a_key).clip(0, len(o_key) - 1)
            hit = o_key[idx] == a_key
        out[a_pair[hit]] = True
        return out
