"""Replica reports (partition -> merge bucket) and result-change events (merge bucket -> sink).

**Reports.**  At the end of a batch a partition reports, for every subscription whose local top-k
or hosting changed, one row:

* ``DELTA`` (the common case): the subscription has exactly one replica (``nrep == 1``), it was
  hosted here before and after the batch, and the batch changed its top-k.  The local top-k *is*
  the global one, so the row carries the net change itself: ``a`` = entries that entered (id,
  score, seq), ``b`` = ids that left.  The merge bucket passes it through.
* ``STATE``: a replicated subscription's local list changed, or a subscribe/unsubscribe changed
  the subscription's hosting here.  ``before_hosted/before_nrep`` and ``after_hosted/after_nrep``
  describe the replica at the start and the end of the batch; ``a`` = the local top-k at the end
  (when hosted), ``b`` = the local top-k at the start, sent only when the old instance had one
  replica (the merge bucket keeps no state for single-replica subscriptions, so it needs that list
  to compute the change).

Entry lists are CSR (``a_ptr``/``b_ptr`` + ``*_id``, ``*_score``, ``*_seq``) in ranking order.

**Events.**  One row per subscription whose merged top-k changed in the batch (or that was created
or removed): ``entered`` (id, score, seq), ``left`` (ids), ``created``, ``removed``.  ``upto`` is
the number of messages the batch's results cover (its high-water sequence number + 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from skype.spark import codec

DELTA = 1
STATE = 2


def _csr(lists: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> tuple[np.ndarray, ...]:
    lengths = np.array([len(ids) for ids, _, _ in lists], dtype=np.int64)
    ptr = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum(lengths, out=ptr[1:])
    if lists and ptr[-1]:
        ids = np.concatenate([np.asarray(i, np.int64) for i, _, _ in lists])
        scores = np.concatenate([np.asarray(s, np.float64) for _, s, _ in lists])
        seqs = np.concatenate([np.asarray(q, np.int64) for _, _, q in lists])
    else:
        ids, scores, seqs = np.zeros(0, np.int64), np.zeros(0, np.float64), np.zeros(0, np.int64)
    return ptr, ids, scores, seqs


EMPTY_LIST = (np.zeros(0, np.int64), np.zeros(0, np.float64), np.zeros(0, np.int64))


@dataclass
class ReportBuilder:
    """Collects report rows of one partition for one merge bucket."""

    partition: int
    sub: list[int] = field(default_factory=list)
    kind: list[int] = field(default_factory=list)
    before_hosted: list[bool] = field(default_factory=list)
    before_nrep: list[int] = field(default_factory=list)
    after_hosted: list[bool] = field(default_factory=list)
    after_nrep: list[int] = field(default_factory=list)
    k: list[int] = field(default_factory=list)
    a: list[tuple] = field(default_factory=list)
    b: list[tuple] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.sub)

    def add(self, sub: int, kind: int, before: tuple[bool, int], after: tuple[bool, int], k: int,
            a: tuple = EMPTY_LIST, b: tuple = EMPTY_LIST) -> None:
        self.sub.append(int(sub))
        self.kind.append(kind)
        self.before_hosted.append(bool(before[0]))
        self.before_nrep.append(int(before[1]))
        self.after_hosted.append(bool(after[0]))
        self.after_nrep.append(int(after[1]))
        self.k.append(int(k))
        self.a.append(a)
        self.b.append(b)

    def pack(self, upto: int) -> bytes:
        a_ptr, a_id, a_score, a_seq = _csr(self.a)
        b_ptr, b_id, b_score, b_seq = _csr(self.b)
        return codec.pack(
            upto=np.array([upto], np.int64), partition=np.full(len(self.sub), self.partition, np.int32),
            sub=np.array(self.sub, np.int64), kind=np.array(self.kind, np.int8),
            before_hosted=np.array(self.before_hosted, bool), before_nrep=np.array(self.before_nrep, np.int32),
            after_hosted=np.array(self.after_hosted, bool), after_nrep=np.array(self.after_nrep, np.int32),
            k=np.array(self.k, np.int64), a_ptr=a_ptr, a_id=a_id, a_score=a_score, a_seq=a_seq,
            b_ptr=b_ptr, b_id=b_id, b_score=b_score, b_seq=b_seq,
        )


class Reports:
    """Report rows of one or more blobs, column-wise (see module docstring)."""

    def __init__(self, cols: dict[str, np.ndarray]) -> None:
        self.cols = cols
        self.upto = int(cols["upto"][0]) if len(cols["upto"]) else -1

    def __len__(self) -> int:
        return len(self.cols["sub"])

    @classmethod
    def unpack(cls, blob: bytes) -> Reports:
        return cls(codec.unpack(blob))

    def list_a(self, row: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        c = self.cols
        lo, hi = c["a_ptr"][row], c["a_ptr"][row + 1]
        return c["a_id"][lo:hi], c["a_score"][lo:hi], c["a_seq"][lo:hi]

    def list_b(self, row: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        c = self.cols
        lo, hi = c["b_ptr"][row], c["b_ptr"][row + 1]
        return c["b_id"][lo:hi], c["b_score"][lo:hi], c["b_seq"][lo:hi]


# --------------------------------------------------------------------------- events


@dataclass
class EventBuilder:
    """Result-change events of one merge bucket for one batch."""

    upto: int
    sub: list[int] = field(default_factory=list)
    created: list[bool] = field(default_factory=list)
    removed: list[bool] = field(default_factory=list)
    entered: list[tuple] = field(default_factory=list)
    left: list[np.ndarray] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.sub)

    def add(self, sub: int, entered: tuple, left: np.ndarray, created: bool = False, removed: bool = False) -> None:
        self.sub.append(int(sub))
        self.created.append(bool(created))
        self.removed.append(bool(removed))
        self.entered.append(entered)
        self.left.append(np.asarray(left, np.int64))

    def pack(self) -> bytes:
        e_ptr, e_id, e_score, e_seq = _csr(self.entered)
        l_ptr, l_id, _, _ = _csr([(ids, np.zeros(len(ids)), np.zeros(len(ids), np.int64)) for ids in self.left])
        return codec.pack(upto=np.array([self.upto], np.int64), sub=np.array(self.sub, np.int64),
                          created=np.array(self.created, bool), removed=np.array(self.removed, bool),
                          e_ptr=e_ptr, e_id=e_id, e_score=e_score, e_seq=e_seq, l_ptr=l_ptr, l_id=l_id)


def events_to_arrow(blob: bytes):
    """An events blob as a pyarrow RecordBatch of the public event schema (without ``batch``):
    ``upto, sub, entered: list<struct<id, score, seq>>, left: list<id>, created, removed``."""
    import pyarrow as pa

    c = codec.unpack(blob)
    n = len(c["sub"])
    upto = int(c["upto"][0]) if len(c["upto"]) else -1
    entries = pa.StructArray.from_arrays([pa.array(c["e_id"]), pa.array(c["e_score"]), pa.array(c["e_seq"])],
                                         names=["id", "score", "seq"])
    entered = pa.ListArray.from_arrays(pa.array(c["e_ptr"].astype(np.int32)), entries)
    left = pa.ListArray.from_arrays(pa.array(c["l_ptr"].astype(np.int32)), pa.array(c["l_id"]))
    return pa.RecordBatch.from_arrays(
        [pa.array(np.full(n, upto, np.int64)), pa.array(c["sub"]), entered, left, pa.array(c["created"]),
         pa.array(c["removed"])],
        names=["upto", "sub", "entered", "left", "created", "removed"],
    )


EVENT_SCHEMA_DDL = ("upto long, sub long, entered array<struct<id: long, score: double, seq: long>>, "
                    "left array<long>, created boolean, removed boolean")
