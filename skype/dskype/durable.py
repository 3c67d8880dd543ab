"""The durable state layout of the two stateful stages, and the compaction rule.

Per grouping key (a subscription partition or a merge bucket), in Spark's state store:

* ``meta`` (ValueState, one blob): ``version`` and ``tag`` of the committed state, the high-water
  mark, the ids and sizes of the log entries and window segments, the next free id;
* ``log`` (MapState id -> blob): a snapshot followed by deltas, one per batch that changed the
  logged part (partition: the subscription commands received; merge bucket: the replica-list
  rows).  Replaying the log in id order rebuilds the logged part.  An entry larger than a few
  megabytes is stored as several values (``log_ids`` holds ``-k - 1`` for a further piece ``k``;
  :func:`skype.spark.processors.join_pieces`), since Spark's state server copies each value into
  one buffer on the JVM heap;
* ``segments`` (MapState id -> blob, partitions only): the window messages routed to the
  partition, one segment per batch; a segment is removed once its newest message has expired.

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

import numpy as np

from skype.dskype import codec
from skype.dskype.codec import Commands, command_columns

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
