"""The durable state layout of the two stateful stages, and the compaction rule.

Per grouping key (a subscription partition or a merge bucket), in Spark's state store:

* ``meta`` (ValueState, one blob): ``version`` and ``tag`` of the committed state, the high-water
  mark, the ids and sizes of the log entries and window segments, the next free id;
* ``log`` (MapState id -> blob): a snapshot followed by deltas, one per batch that changed the
  logged part (partition: the subscription commands received; merge bucket: the replica-list
  rows).  Replaying the log in id order rebuilds the logged part.  An entry larger than a few
  megabytes is stored as several values (``log_ids`` holds ``-k - 1`` for a further piece ``k``;
  :func:`join_pieces`), since Spark's state server copies each value into
  one buffer on the JVM heap;
* ``segments`` (MapState id -> blob, partitions only): the window messages routed to the
  partition, one segment per batch; a segment is removed once its newest message has expired.

**What a partition's batch writes** (:func:`commit_partition_log`, :func:`commit_segments`; the
adapter gives them its state as a :class:`BlobStore`): an adaptive partition's switch entry
first, then the batch's commands (:func:`command_log_entry`), then the prefix replicas' sleeps
and wakes, each appended unless the deltas since the snapshot outweigh it, in which case a fresh
snapshot of the partition (asked of its engine host) replaces the log; then the batch's window
segment and its backfill, and the removal of the segments whose newest message has expired.

**Writes per batch are proportional to the batch.**  A batch writes its own segment (the
messages it brought), its own log delta (the commands or replica lists it changed), the removal of
expired segments and the small ``meta``.  Nothing proportional to the number of hosted
subscriptions is rewritten, except the snapshot, written when the deltas logged since the last
snapshot outweigh it (:func:`wants_snapshot`): each snapshot write is then paid for by at least
as many delta bytes, so the amortised bytes per batch stay within twice the deltas, and a rebuild
reads at most about twice the snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

from skype.dskype import codec
from skype.dskype.codec import Commands, command_columns
from skype.dskype.window import WindowSpec

MIN_SNAPSHOT_BYTES = 1 << 16  # do not compact tiny logs


@dataclass
class Meta:
    version: int = 0
    tag: int = 0
    hwm_seq: int = -1
    hwm_t: float = float("-inf")
    next_id: int = 0
    log_ids: list[int] = field(default_factory=list)
    log_bytes: int = 0  # delta bytes logged since the snapshot
    snapshot_bytes: int = 0
    seg_ids: list[int] = field(default_factory=list)
    seg_last: list[float] = field(default_factory=list)  # engine time of each segment's newest message

    def to_blob(self) -> bytes:
        return codec.pack(
            scalars=np.array([self.version, self.tag, self.hwm_seq, self.next_id, self.log_bytes, self.snapshot_bytes],
                             np.int64),
            hwm_t=np.array([self.hwm_t], np.float64), log_ids=np.array(self.log_ids, np.int64),
            seg_ids=np.array(self.seg_ids, np.int64), seg_last=np.array(self.seg_last, np.float64),
        )

    @classmethod
    def from_blob(cls, blob: bytes | None) -> Meta:
        if blob is None:
            return cls()
        c = codec.unpack(blob)
        version, tag, hwm_seq, next_id, log_bytes, snapshot_bytes = (int(v) for v in c["scalars"])
        return cls(version, tag, hwm_seq, float(c["hwm_t"][0]), next_id, c["log_ids"].tolist(), log_bytes,
                   snapshot_bytes, c["seg_ids"].tolist(), c["seg_last"].tolist())

    def take_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    @property
    def committed(self) -> tuple[int, int]:
        return (self.version, self.tag)


def wants_snapshot(meta: Meta, delta_bytes: int) -> bool:
    """Compact when the deltas since the snapshot, this batch's included, outweigh it."""
    pending = meta.log_bytes + delta_bytes
    return pending > max(meta.snapshot_bytes, MIN_SNAPSHOT_BYTES)


def command_log_entry(cmds: Commands, lo: int, hwm_seq: int) -> bytes:
    """The durable log entry of one batch: the commands it brought, with the batch's first and
    last sequence numbers (what :func:`skype.dskype.hosted.plan_commands` needs to replay it)."""
    return codec.pack(lo=np.array([lo], np.int64), hwm_seq=np.array([hwm_seq], np.int64), **command_columns(cmds))


# --------------------------------------------------------------------------- log and segments


class BlobStore(Protocol):
    """The adapter's map state of blobs by id (``log`` or ``segments``)."""

    def put(self, key: int, blob: bytes) -> None: ...

    def remove(self, key: int) -> None: ...


# Spark's state server copies a value into one row buffer on the JVM heap: a value of hundreds of
# megabytes (a snapshot of 100k subscriptions' replica lists) ran a 1 GB driver out of memory.
VALUE_PIECE_BYTES = 4 << 20


def split_pieces(blob: bytes, size: int | None = None) -> list[bytes]:
    """A log entry as the values it is stored in (one, unless it is larger than ``size``).

    >>> split_pieces(b"abcde", 2), split_pieces(b"", 2)
    ([b'ab', b'cd', b'e'], [b''])
    """
    size = size or VALUE_PIECE_BYTES
    return [blob[i:i + size] for i in range(0, len(blob), size)] or [blob]


def piece_id(logged: int) -> int:
    """The state key of a logged id: ``meta.log_ids`` holds an entry's first piece as its key
    ``k`` and each further piece as ``-k - 1``."""
    return logged if logged >= 0 else -logged - 1


def log_entry_count(log_ids: list[int]) -> int:
    """The log entries ``meta.log_ids`` holds (its further pieces, ``< 0``, are not entries).

    >>> log_entry_count([0, -2, -3, 3])
    2
    """
    return sum(1 for logged in log_ids if logged >= 0)


def join_pieces(log_ids: list[int], values: dict[int, bytes]) -> list[bytes]:
    """The log entries from their stored pieces, in log order.

    >>> join_pieces([0, -2, -3, 3], {0: b"ab", 1: b"cd", 2: b"e", 3: b"x"})
    [b'abcde', b'x']
    """
    entries: list[bytes] = []
    for logged in log_ids:
        if logged >= 0:
            entries.append(values[logged])
        else:
            entries[-1] += values[piece_id(logged)]
    return entries


def put_pieces(meta: Meta, store: BlobStore, blob: bytes) -> list[int]:
    """Write one log entry as pieces of at most ``VALUE_PIECE_BYTES`` (:func:`split_pieces`);
    returns their ``log_ids``."""
    ids = []
    for i, piece in enumerate(split_pieces(blob)):
        pid = meta.take_id()
        store.put(pid, piece)
        ids.append(pid if i == 0 else -pid - 1)
    return ids


def write_log(meta: Meta, store: BlobStore, delta: bytes | None, snapshot: bytes | None) -> int:
    """Write a batch's log delta, or the snapshot that replaces the log; returns the bytes."""
    if snapshot is not None:
        for old in meta.log_ids:
            store.remove(piece_id(old))
        meta.log_ids, meta.log_bytes, meta.snapshot_bytes = put_pieces(meta, store, snapshot), 0, len(snapshot)
        return len(snapshot)
    if delta is not None:
        meta.log_ids += put_pieces(meta, store, delta)
        meta.log_bytes += len(delta)
        return len(delta)
    return 0


def commit_partition_log(meta: Meta, store: BlobStore, delta: bytes | None, snapshot: bytes | None,
                         switch: bytes | None, activation: bytes | None,
                         take_snapshot: Callable[[], bytes | None]) -> tuple[int, bytes | None]:
    """A partition batch's log writes (module docstring): ``delta`` its commands' entry,
    ``snapshot`` the snapshot the host took with the batch (asked when the delta alone outweighed
    the log), ``switch``/``activation`` the entries before and after the commands;
    ``take_snapshot()`` asks the host for one more (None: it could not).  Returns the bytes and
    the snapshot that replaced the log before the commands' entry, if any."""
    written = 0
    if switch is not None and snapshot is None:
        if wants_snapshot(meta, len(switch) + (len(delta) if delta is not None else 0)):
            snapshot = take_snapshot()
        if snapshot is None:  # logged before the batch's commands
            written += write_log(meta, store, switch, None)
    written += write_log(meta, store, delta, snapshot)
    if activation is not None and snapshot is None:
        # prefix replicas that slept or woke (skype.dskype.activation): logged after the commands
        compacted = take_snapshot() if wants_snapshot(meta, len(activation)) else None
        written += write_log(meta, store, None if compacted is not None else activation, compacted)
    return written, snapshot


def commit_segments(meta: Meta, store: BlobStore, segments: list, spec: WindowSpec, clock: float) -> int:
    """Store a batch's window segments ``[(blob, messages, seq)]`` and remove those whose newest
    message left the window at ``clock``; returns the bytes written."""
    written = 0
    for segment, batch, batch_seq in segments:
        sid = meta.take_id()
        store.put(sid, segment)
        meta.seg_ids.append(sid)
        meta.seg_last.append(float(spec.engine_times(batch_seq, batch.t).max()))
        written += len(segment)
    keep_ids, keep_last = [], []
    for sid, last in zip(meta.seg_ids, meta.seg_last):
        if spec.live(np.array([last]), clock)[0]:
            keep_ids.append(sid)
            keep_last.append(last)
        else:
            store.remove(sid)
    meta.seg_ids, meta.seg_last = keep_ids, keep_last
    return written
