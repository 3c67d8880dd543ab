"""Packed columns: how the Spark runtime moves and stores batches of records as single blobs.

A *blob* is a named set of 1-D numpy arrays serialised into one ``bytes`` value:

    b"SKC1" | uint32 header length | header (JSON: [[name, dtype, length], ...]) | buffers

Buffers follow the header in order, each padded to 8 bytes, so :func:`unpack` returns zero-copy,
read-only views (``np.frombuffer``).  Only fixed-width numeric dtypes are allowed (no objects, no
pickle): a blob read back from the state store can never execute code.

Why blobs: the runtime ships a micro-batch's messages to a partition, a partition's reports to a
merge bucket, and a partition's window segment to the state store as *one* Spark value each.  Per
record Spark rows would cost a Python object per record on both sides of every shuffle and one
state-store round trip per record; a blob costs one of each per (batch, partition).

The record layouts (which arrays a blob holds) are defined by the helpers below:

* messages: ``ids, seq, t, x, y`` + CSR terms ``indptr, terms, weights``
  (:func:`pack_messages`, :func:`unpack_messages`);
* commands: ``cseq, at, op, ids, x, y, k, alpha, nrep`` + CSR terms (:func:`pack_commands`);
  ``at = -1`` means "apply at the start of the batch it arrives in"; ``op`` is :data:`OP_SUB`,
  :data:`OP_UNSUB`, :data:`OP_DROP`, :data:`OP_RESULTS` (a results request: no subscription,
  every partition) or :data:`OP_QUERY` (a snapshot query: ``id`` its ordinal, ``spec`` the query); ``nrep`` is the number of partitions the subscription was placed on.
"""

from __future__ import annotations

import json
import struct

import numpy as np

from skype.errors import InputError
from skype.model import MessageBatch, SubscriptionBatch, TermMatrix

MAGIC = b"SKC1"
_ALLOWED = {"int8", "uint8", "int32", "int64", "uint32", "uint64", "float64", "bool"}

OP_SUB = 1
OP_UNSUB = 2
OP_DROP = 3  # "remove if hosted": a subscribe's notice to the partitions outside its placement
OP_RESULTS = 4  # "send the current top-k of every subscription": a producer's results request
OP_QUERY = 5  # a snapshot query (no subscription): answered at its position (skype.dskype.snapshots)
NO_POSITION = -1  # a command without ``at``: applied at the start of the batch it arrives in


def pack(**arrays: np.ndarray) -> bytes:
    """Serialise named 1-D arrays into one blob.

    >>> blob = pack(a=np.arange(3), b=np.array([0.5]))
    >>> {k: v.tolist() for k, v in unpack(blob).items()}
    {'a': [0, 1, 2], 'b': [0.5]}
    """
    header = []
    chunks = []
    for name, values in arrays.items():
        arr = np.ascontiguousarray(values)
        if arr.ndim != 1 or arr.dtype.name not in _ALLOWED:
            raise InputError("E026", detail=f"blob column {name!r} must be a 1-D array of {sorted(_ALLOWED)}, "
                                            f"got {arr.dtype} with shape {arr.shape}")
        header.append([name, arr.dtype.name, len(arr)])
        raw = arr.tobytes()
        chunks.append(raw + b"\0" * (-len(raw) % 8))
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-(len(head) + 8) % 8)
    return b"".join([MAGIC, struct.pack("<I", len(head)), head, *chunks])


def unpack(blob: bytes | memoryview) -> dict[str, np.ndarray]:
    """The arrays of a blob (read-only views into it)."""
    buf = memoryview(blob)
    if bytes(buf[:4]) != MAGIC:
        raise InputError("E026", detail="not a packed blob (bad magic)")
    (head_len,) = struct.unpack("<I", buf[4:8])
    header = json.loads(bytes(buf[8:8 + head_len]))
    out: dict[str, np.ndarray] = {}
    pos = 8 + head_len
    for name, dtype, length in header:
        dt = np.dtype(dtype)
        nbytes = dt.itemsize * length
        out[name] = np.frombuffer(buf, dtype=dt, count=length, offset=pos)
        pos += nbytes + (-nbytes % 8)
    return out


# --------------------------------------------------------------------------- messages


def pack_messages(batch: MessageBatch, seq: np.ndarray) -> bytes:
    """A message batch with each message's global sequence number."""
    return pack(ids=batch.ids, seq=np.asarray(seq, np.int64), t=batch.t, x=batch.x, y=batch.y,
                indptr=batch.terms.indptr, terms=batch.terms.ids, weights=batch.terms.weights)


def messages_from_columns(cols: dict[str, np.ndarray]) -> tuple[MessageBatch, np.ndarray]:
    terms = TermMatrix(cols["indptr"], cols["terms"], cols["weights"])
    return MessageBatch(cols["ids"], cols["x"], cols["y"], cols["t"], terms), np.asarray(cols["seq"], np.int64)


def unpack_messages(blob: bytes) -> tuple[MessageBatch, np.ndarray]:
    """(messages, their sequence numbers) of a blob from :func:`pack_messages`."""
    return messages_from_columns(unpack(blob))


def concat_messages(parts: list[tuple[MessageBatch, np.ndarray]]) -> tuple[MessageBatch, np.ndarray]:
    """Concatenate (batch, seq) parts and order the result by sequence number."""
    if not parts:
        return empty_messages(), np.zeros(0, np.int64)
    batch = MessageBatch.concat([b for b, _ in parts])
    seq = np.concatenate([s for _, s in parts])
    if len(seq) > 1 and (np.diff(seq) < 0).any():
        order = np.argsort(seq, kind="stable")
        batch, seq = batch.take(order), seq[order]
    return batch, seq


def empty_messages() -> MessageBatch:
    z = np.zeros(0)
    return MessageBatch(np.zeros(0, np.int64), z, z, z, TermMatrix(np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0)))


# --------------------------------------------------------------------------- commands


def pack_commands(cseq: np.ndarray, at: np.ndarray, op: np.ndarray, subs: SubscriptionBatch,
                  nrep: np.ndarray, spec: np.ndarray | None = None) -> bytes:
    """Subscription commands.  ``subs`` holds one row per command (for an unsubscribe only the id
    is meaningful; its other columns are zeros and its term row is empty); ``spec`` (optional)
    the compiled query of range/knn/terms subscribes, packed by :func:`spec_columns`."""
    return pack(cseq=np.asarray(cseq, np.int64), at=np.asarray(at, np.int64), op=np.asarray(op, np.int8),
                ids=subs.ids, x=subs.x, y=subs.y, k=subs.k, alpha=subs.alpha,
                nrep=np.asarray(nrep, np.int32), indptr=subs.terms.indptr, terms=subs.terms.ids,
                weights=subs.terms.weights, **spec_columns(spec))


def spec_columns(spec: np.ndarray | None) -> dict[str, np.ndarray]:
    """Per-command strings (None: none) as UTF-8 bytes with row pointers; nothing if all are None."""
    if spec is None or all(s is None for s in spec):
        return {}
    raw = [s.encode("utf-8") if s is not None else b"" for s in spec]
    ptr = np.zeros(len(raw) + 1, np.int64)
    np.cumsum([len(r) for r in raw], out=ptr[1:])
    return {"spec_ptr": ptr, "spec_bytes": np.frombuffer(b"".join(raw), np.uint8).copy(),
            "spec_set": np.array([s is not None for s in spec], bool)}


def unpack_specs(cols: dict[str, np.ndarray]) -> np.ndarray | None:
    if "spec_ptr" not in cols:
        return None
    ptr, raw, present = cols["spec_ptr"], cols["spec_bytes"].tobytes(), cols["spec_set"]
    return np.array([raw[ptr[i]:ptr[i + 1]].decode("utf-8") if present[i] else None for i in range(len(present))],
                    object)


class Commands:
    """Commands column-wise (see :func:`pack_commands`), ordered by ``cseq``."""

    def __init__(self, cseq, at, op, subs: SubscriptionBatch, nrep, spec=None) -> None:
        self.cseq = np.asarray(cseq, np.int64)
        self.at = np.asarray(at, np.int64)
        self.op = np.asarray(op, np.int8)
        self.subs = subs
        self.nrep = np.asarray(nrep, np.int32)
        # the compiled query of a range/knn/terms subscribe (skype.dskype.kinds), None for topk
        self.spec = np.array([None] * len(self.cseq), object) if spec is None else np.asarray(spec, object)

    def __len__(self) -> int:
        return len(self.cseq)

    @classmethod
    def empty(cls) -> Commands:
        return cls([], [], [], empty_subscriptions(), [])

    @classmethod
    def from_columns(cls, cols: dict[str, np.ndarray]) -> Commands:
        subs = SubscriptionBatch(cols["ids"], cols["x"], cols["y"], cols["k"], cols["alpha"],
                                 TermMatrix(cols["indptr"], cols["terms"], cols["weights"]))
        return cls(cols["cseq"], cols["at"], cols["op"], subs, cols["nrep"], unpack_specs(cols))

    @classmethod
    def unpack(cls, blob: bytes) -> Commands:
        return cls.from_columns(unpack(blob))

    def pack(self) -> bytes:
        return pack_commands(self.cseq, self.at, self.op, self.subs, self.nrep, self.spec)

    def drops(self) -> Commands:
        """A ``DROP`` notice for every command: same ``cseq``, ``at`` and id, no record."""
        n = len(self)
        z = np.zeros(n)
        subs = SubscriptionBatch(self.subs.ids, z, z, np.zeros(n, np.int64), z, TermMatrix(np.zeros(n + 1, np.int64), np.zeros(0, np.int64), np.zeros(0)))
        return Commands(self.cseq, self.at, np.full(n, OP_DROP, np.int8), subs, np.zeros(n, np.int32))

    def take(self, rows: np.ndarray) -> Commands:
        rows = np.asarray(rows, np.int64)
        return Commands(self.cseq[rows], self.at[rows], self.op[rows], self.subs.take(rows), self.nrep[rows],
                        self.spec[rows])

    @classmethod
    def stack(cls, parts: list[Commands]) -> Commands:
        """Concatenate as they are (no reordering, no deduplication)."""
        parts = [p for p in parts if len(p)]
        if not parts:
            return cls.empty()
        subs = SubscriptionBatch(
            np.concatenate([p.subs.ids for p in parts]), np.concatenate([p.subs.x for p in parts]),
            np.concatenate([p.subs.y for p in parts]), np.concatenate([p.subs.k for p in parts]),
            np.concatenate([p.subs.alpha for p in parts]), TermMatrix.concat([p.subs.terms for p in parts]),
        )
        return cls(np.concatenate([p.cseq for p in parts]), np.concatenate([p.at for p in parts]),
                   np.concatenate([p.op for p in parts]), subs, np.concatenate([p.nrep for p in parts]),
                   np.concatenate([p.spec for p in parts]))

    @classmethod
    def concat(cls, parts: list[Commands]) -> Commands:
        """Concatenate and order by ``cseq`` (duplicates of one ``cseq`` are kept once)."""
        out = cls.stack(parts)
        order = np.argsort(out.cseq, kind="stable")
        keep = order[np.r_[True, out.cseq[order][1:] != out.cseq[order][:-1]]] if len(order) else order
        return out.take(keep)


def empty_subscriptions() -> SubscriptionBatch:
    z = np.zeros(0)
    return SubscriptionBatch(np.zeros(0, np.int64), z, z, np.zeros(0, np.int64), z, TermMatrix(np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0)))


def command_columns(cmds: Commands, prefix: str = "") -> dict[str, np.ndarray]:
    """The columns of a command batch for :func:`pack`, names prefixed (the inverse of
    :meth:`Commands.from_columns`)."""
    s = cmds.subs
    cols: dict[str, np.ndarray] = {
        "cseq": cmds.cseq, "at": cmds.at, "op": cmds.op, "ids": s.ids, "x": s.x, "y": s.y, "k": s.k, "alpha": s.alpha,
        "nrep": cmds.nrep, "indptr": s.terms.indptr, "terms": s.terms.ids, "weights": s.terms.weights,
        **spec_columns(cmds.spec)}
    return {prefix + k: v for k, v in cols.items()}
