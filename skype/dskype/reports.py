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
:func:`net_changes` nets a batch's engine change logs per (subscription, message), what the
``DELTA`` rows are made of.

**Events.**  One row per subscription whose merged top-k changed in the batch (or that was created
or removed): ``entered`` (id, score, seq), ``left`` (ids), ``created``, ``removed``.  ``upto`` is
the number of messages the batch's results cover (its high-water sequence number + 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from skype.dskype import codec
from skype.errors import InputError

if TYPE_CHECKING:
    from skype.api import ChangeLog

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


def _concat_ptrs(parts: list, name: str) -> np.ndarray:
    """The CSR row pointers ``name`` of several parts, concatenated (each shifted by the rows before)."""
    out, base = [np.zeros(1, np.int64)], 0
    for part in parts:
        ptr = getattr(part, name)
        out.append(ptr[1:] + base)
        base += int(ptr[-1])
    return np.concatenate(out)


def csr_take(ptr: np.ndarray, cols: tuple[np.ndarray, ...], rows: np.ndarray) -> tuple[np.ndarray, tuple]:
    """Rows of a CSR structure (``ptr`` + aligned entry columns), in the order given."""
    rows = np.asarray(rows, np.int64)
    lengths = (ptr[1:] - ptr[:-1])[rows]
    out_ptr = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(lengths, out=out_ptr[1:])
    gather = np.repeat(ptr[:-1][rows] - out_ptr[:-1], lengths) + np.arange(out_ptr[-1], dtype=np.int64)
    return out_ptr, tuple(c[gather] for c in cols)


EMPTY_LIST = (np.zeros(0, np.int64), np.zeros(0, np.float64), np.zeros(0, np.int64))
_ROW_FIELDS = (("sub", np.int64), ("kind", np.int8), ("before_hosted", bool), ("before_nrep", np.int32),
               ("after_hosted", bool), ("after_nrep", np.int32), ("k", np.int64))


@dataclass
class ReportRows:
    """Report rows column-wise: the per-row fields plus the ``a`` and ``b`` entry lists (CSR)."""

    row: dict[str, np.ndarray]
    a_ptr: np.ndarray
    a: tuple[np.ndarray, ...]  # id, score, seq
    b_ptr: np.ndarray
    b: tuple[np.ndarray, ...]

    def __len__(self) -> int:
        return len(self.row["sub"])

    @classmethod
    def empty(cls) -> ReportRows:
        z = np.zeros(1, np.int64)
        return cls({name: np.zeros(0, dt) for name, dt in _ROW_FIELDS}, z, EMPTY_LIST, z.copy(), EMPTY_LIST)

    def take(self, rows: np.ndarray) -> ReportRows:
        a_ptr, a = csr_take(self.a_ptr, self.a, rows)
        b_ptr, b = csr_take(self.b_ptr, self.b, rows)
        return ReportRows({k: v[rows] for k, v in self.row.items()}, a_ptr, a, b_ptr, b)

    @classmethod
    def concat(cls, parts: list[ReportRows]) -> ReportRows:
        parts = [p for p in parts if len(p)]
        if not parts:
            return cls.empty()
        return cls({k: np.concatenate([p.row[k] for p in parts]) for k in parts[0].row},
                   _concat_ptrs(parts, "a_ptr"), tuple(np.concatenate([p.a[i] for p in parts]) for i in range(3)),
                   _concat_ptrs(parts, "b_ptr"), tuple(np.concatenate([p.b[i] for p in parts]) for i in range(3)))

    def pack(self, partition: int, upto: int) -> bytes:
        return codec.pack(
            upto=np.array([upto], np.int64), partition=np.full(len(self), partition, np.int32),
            **{k: v.astype(dt, copy=False) for (k, dt), v in zip(_ROW_FIELDS, (self.row[k] for k, _ in _ROW_FIELDS))},
            a_ptr=self.a_ptr, a_id=self.a[0].astype(np.int64, copy=False), a_score=self.a[1].astype(np.float64, copy=False),
            a_seq=self.a[2].astype(np.int64, copy=False), b_ptr=self.b_ptr, b_id=self.b[0].astype(np.int64, copy=False),
            b_score=self.b[1].astype(np.float64, copy=False), b_seq=self.b[2].astype(np.int64, copy=False),
        )


@dataclass
class ReportBuilder:
    """Collects report rows one by one (commands' ``STATE`` rows)."""

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

    def rows(self) -> ReportRows:
        a_ptr, *a = _csr(self.a)
        b_ptr, *b = _csr(self.b)
        row = {name: np.array(getattr(self, name), dt) for name, dt in _ROW_FIELDS}
        return ReportRows(row, a_ptr, tuple(a), b_ptr, tuple(b))


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

    def rows(self) -> ReportRows:
        c = self.cols
        return ReportRows({name: c[name] for name, _ in _ROW_FIELDS}, c["a_ptr"], (c["a_id"], c["a_score"], c["a_seq"]),
                          c["b_ptr"], (c["b_id"], c["b_score"], c["b_seq"]))


# --------------------------------------------------------------------------- events


@dataclass
class EventRows:
    """Result-change events column-wise: ``sub``, ``created``, ``removed``, entered entries (CSR
    id/score/seq) and left ids (CSR)."""

    sub: np.ndarray
    created: np.ndarray
    removed: np.ndarray
    e_ptr: np.ndarray
    entered: tuple[np.ndarray, ...]
    l_ptr: np.ndarray
    left: np.ndarray

    def __len__(self) -> int:
        return len(self.sub)

    @classmethod
    def concat(cls, parts: list[EventRows]) -> EventRows:
        parts = [p for p in parts if len(p)]
        if not parts:
            return EventBuilder(0).rows()
        return cls(np.concatenate([p.sub for p in parts]), np.concatenate([p.created for p in parts]),
                   np.concatenate([p.removed for p in parts]), _concat_ptrs(parts, "e_ptr"),
                   tuple(np.concatenate([p.entered[i] for p in parts]) for i in range(3)), _concat_ptrs(parts, "l_ptr"),
                   np.concatenate([p.left for p in parts]))

    def pack(self, upto: int) -> bytes:
        return codec.pack(upto=np.array([upto], np.int64), sub=self.sub.astype(np.int64, copy=False),
                          created=self.created.astype(bool, copy=False), removed=self.removed.astype(bool, copy=False),
                          e_ptr=self.e_ptr, e_id=self.entered[0].astype(np.int64, copy=False),
                          e_score=self.entered[1].astype(np.float64, copy=False),
                          e_seq=self.entered[2].astype(np.int64, copy=False), l_ptr=self.l_ptr,
                          l_id=self.left.astype(np.int64, copy=False))


@dataclass
class EventBuilder:
    """Collects events one by one (subscriptions whose replicas or hosting changed)."""

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

    def rows(self) -> EventRows:
        e_ptr, e_id, e_score, e_seq = _csr(self.entered)
        l_ptr, l_id, _, _ = _csr([(ids, np.zeros(len(ids)), np.zeros(len(ids), np.int64)) for ids in self.left])
        return EventRows(np.array(self.sub, np.int64), np.array(self.created, bool), np.array(self.removed, bool),
                         e_ptr, (e_id, e_score, e_seq), l_ptr, l_id)


# --------------------------------------------------------------------------- final results


def pack_results(sub_ids: list[int], lists: list[tuple]) -> bytes:
    """Final top-k lists (ranking order) of subscriptions given by ascending id."""
    ptr, ids, scores, _ = _csr(lists)
    return codec.pack(sub=np.array(sub_ids, np.int64), ptr=ptr, id=ids, score=scores)


def results_lines(blobs: list[bytes]) -> list[str]:
    """Final-results blobs -> JSON lines of the results format (``{"id", "topk": [{"id",
    "score"}]}``), by ascending subscription id."""
    import json

    rows = []
    for blob in blobs:
        c = codec.unpack(blob)
        ptr = c["ptr"]
        for r, sid in enumerate(c["sub"].tolist()):
            topk = [{"id": int(m), "score": float(s)} for m, s in zip(c["id"][ptr[r]:ptr[r + 1]].tolist(),
                                                                      c["score"][ptr[r]:ptr[r + 1]].tolist())]
            rows.append((int(sid), json.dumps({"id": int(sid), "topk": topk}, allow_nan=False)))
    rows.sort(key=lambda row: row[0])
    return [line for _, line in rows]


def events_schema():
    import pyarrow as pa

    entry = pa.struct([("id", pa.int64()), ("score", pa.float64()), ("seq", pa.int64())])
    return pa.schema([("upto", pa.int64()), ("sub", pa.int64()), ("entered", pa.list_(entry)),
                      ("left", pa.list_(pa.int64())), ("created", pa.bool_()), ("removed", pa.bool_())])


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
        schema=events_schema(),
    )


EVENT_SCHEMA_DDL = ("upto long, sub long, entered array<struct<id: long, score: double, seq: long>>, "
                    "left array<long>, created boolean, removed boolean")


# --------------------------------------------------------------------------- netting a batch


def pair_keys(sub: np.ndarray, msg: np.ndarray) -> np.ndarray | None:
    """One int64 key per (subscription, message) pair when both fit (ids in [0, 2^31) and
    [0, 2^32)); ``None`` otherwise."""
    if len(sub) and (sub.min() < 0 or sub.max() >= 1 << 31 or msg.min() < 0 or msg.max() >= 1 << 32):
        return None
    return (sub.astype(np.int64) << 32) | msg.astype(np.int64)


def net_changes(logs: list[ChangeLog], exclude: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Net the change logs of a batch per (subscription, message): +1 entered, -1 left, 0 both.

    Returns (sub, msg, net) of the pairs with a non-zero net, sorted by (sub, msg), subscriptions
    in ``exclude`` left out.
    """
    logs = [log for log in logs if len(log)]
    z = np.zeros(0, np.int64)
    if not logs:
        return z, z, z
    sub = np.concatenate([log.sub for log in logs])
    msg = np.concatenate([log.msg for log in logs])
    sign = np.where(np.concatenate([log.entered for log in logs]), 1, -1).astype(np.int64)
    if len(exclude):
        keep = ~np.isin(sub, exclude)
        sub, msg, sign = sub[keep], msg[keep], sign[keep]
    if len(sub) == 0:
        return z, z, z
    if sub.min() >= 0 and sub.max() < 1 << 31 and msg.min() >= 0 and msg.max() < 1 << 32:
        # one sort of (sub, msg, entered) packed in a uint64: no argsort and gathers
        key = ((sub.astype(np.uint64) << np.uint64(33)) | (msg.astype(np.uint64) << np.uint64(1))
               | (sign > 0).astype(np.uint64))
        key.sort()
        pair = key >> np.uint64(1)
        first = np.r_[True, pair[1:] != pair[:-1]]
        group = np.cumsum(first) - 1
        net = np.bincount(group, weights=np.where(key & np.uint64(1), 1.0, -1.0)).astype(np.int64)
        nz = net != 0
        heads = pair[first][nz]
        return ((heads >> np.uint64(32)).astype(np.int64), (heads & np.uint64(0xFFFFFFFF)).astype(np.int64),
                net[nz])
    keys = pair_keys(sub, msg)
    order = np.argsort(keys) if keys is not None else np.lexsort((msg, sub))
    sub, msg, sign = sub[order], msg[order], sign[order]
    first = np.r_[True, (sub[1:] != sub[:-1]) | (msg[1:] != msg[:-1])]
    group = np.cumsum(first) - 1
    net = np.bincount(group, weights=sign).astype(np.int64)
    nz = net != 0
    return sub[first][nz], msg[first][nz], net[nz]


def pack_by_bucket(rows: ReportRows, buckets: np.ndarray, partition: int, upto: int) -> dict[int, bytes]:
    """A partition's report rows as one blob per merge bucket (``buckets``: each row's)."""
    order = np.argsort(buckets, kind="stable")
    cuts = np.flatnonzero(np.r_[True, buckets[order][1:] != buckets[order][:-1], True])
    return {int(buckets[order[lo]]): rows.take(order[lo:hi]).pack(partition, upto)
            for lo, hi in zip(cuts[:-1], cuts[1:])}


def change_rows(sub: np.ndarray, msg: np.ndarray, net: np.ndarray, touched: np.ndarray,
                arrays: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], nrep: np.ndarray,
                k: np.ndarray) -> ReportRows:
    """DELTA rows (single replica: netted entered entries and left ids) and STATE rows
    (replicated: the whole local list) of the subscriptions with a non-zero net change.

    ``(sub, msg, net)``: the batch's net changes sorted by (sub, msg) (:func:`net_changes`);
    ``touched``: the distinct ``sub``; ``arrays``: their current local results as CSR
    ``(indptr, ids, scores, seqs)``; ``nrep``/``k``: each one's replicas and k."""
    starts = np.flatnonzero(np.r_[True, sub[1:] != sub[:-1]])
    pair_row = np.repeat(np.arange(len(touched)), np.diff(np.r_[starts, len(sub)]))
    indptr, ids, scores, seqs = arrays
    entry_row = np.repeat(np.arange(len(touched)), np.diff(indptr))
    single = nrep == 1
    # entered pairs of single-replica rows, found among the top-k entries (dense message ids)
    entered = (net > 0) & single[pair_row]
    entry_keys = pair_keys(entry_row, ids)
    wanted = pair_keys(pair_row[entered], msg[entered])  # ascending: pairs come sorted by (sub, msg)
    if entry_keys is None or wanted is None:  # large ids: dense message numbers instead
        uniq, inverse = np.unique(np.concatenate([ids, msg[entered]]), return_inverse=True)
        width = np.int64(len(uniq))
        entry_keys = entry_row * width + inverse[:len(ids)]
        wanted = np.sort(pair_row[entered] * width + inverse[len(ids):])
    at = np.searchsorted(wanted, entry_keys).clip(0, max(len(wanted) - 1, 0))
    pick = (wanted[at] == entry_keys if len(wanted) else np.zeros(len(ids), bool)) & single[entry_row]
    if int(pick.sum()) != int(entered.sum()):
        raise InputError("E026", detail="a message netted as entered is not in its subscription's top-k")
    keep_entry = pick | ~single[entry_row]  # DELTA: entered entries; STATE: the whole list
    a_ptr = np.zeros(len(touched) + 1, np.int64)
    np.cumsum(np.bincount(entry_row[keep_entry], minlength=len(touched)), out=a_ptr[1:])
    left = (net < 0) & single[pair_row]
    b_ptr = np.zeros(len(touched) + 1, np.int64)
    np.cumsum(np.bincount(pair_row[left], minlength=len(touched)), out=b_ptr[1:])
    n_left = int(left.sum())
    row = {"sub": touched, "kind": np.where(single, DELTA, STATE).astype(np.int8),
           "before_hosted": np.ones(len(touched), bool), "before_nrep": nrep,
           "after_hosted": np.ones(len(touched), bool), "after_nrep": nrep, "k": k}
    return ReportRows(row, a_ptr, (ids[keep_entry], scores[keep_entry], seqs[keep_entry]), b_ptr,
                      (msg[left], np.zeros(n_left), np.zeros(n_left, np.int64)))
