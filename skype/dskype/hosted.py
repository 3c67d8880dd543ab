"""The subscriptions a partition hosts, and the replay of the command log onto them.

:class:`Hosted` maps a subscription id to its record (nrep, x, y, k, alpha, term ids, weights,
spec): what a partition's engine holds (:mod:`skype.dskype.partition`; an adaptive partition's
hand-overs move its rows, :mod:`skype.dskype.handover`).  Invariant: ``inverse``
is the sum of ``1 / nrep`` over the rows, kept with every add and remove.  :func:`replay_commands`
applies due commands to a set without an engine (a rebuild from the durable log): a subscribe
replaces the id's record, an unsubscribe removes it, a results request changes nothing.
:func:`plan_commands` decides which commands a batch applies, in which order (``(position,
cseq)``), and :func:`due_pending` the same for a replay that skips batches which logged nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from skype.model import SubscriptionBatch, TermMatrix
from skype.dskype import codec
from skype.dskype.activation import Activation
from skype.dskype.codec import OP_QUERY, OP_RESULTS, OP_SUB, Commands
from skype.dskype.kinds import UNBOUNDED_K, spec_from_json

APPLIED = -2  # ``at`` of snapshot rows: subscriptions already hosted


class HostedRow(NamedTuple):
    """One hosted subscription's record."""

    nrep: int  # how many partitions host it (1: its list here is final; more: the merge stage's)
    x: float
    y: float
    k: int  # UNBOUNDED_K for a range subscription
    alpha: float
    term_ids: np.ndarray
    weights: np.ndarray
    spec: str | None  # the JSON of a range/knn/terms query (skype.dskype.kinds), None for topk


@dataclass
class Hosted:
    """The subscriptions a partition hosts: id -> :class:`HostedRow`."""

    rows: dict[int, HostedRow] = field(default_factory=dict)
    inverse: float = 0.0  # sum of 1/nrep over the rows, kept up to date (a metric, O(1) per batch)

    def __len__(self) -> int:
        return len(self.rows)

    def __contains__(self, sub_id: int) -> bool:
        return sub_id in self.rows

    def nrep(self, sub_id: int) -> int:
        return self.rows[sub_id].nrep

    def add_from(self, cmds: Commands, row: int) -> None:
        ids, weights = cmds.subs.terms.row(row)
        s = cmds.subs
        self.remove(int(s.ids[row]))
        spec = cmds.spec[row]
        k = UNBOUNDED_K if spec is not None and spec_from_json(int(s.ids[row]), spec).kind == "range" else int(s.k[row])
        self.rows[int(s.ids[row])] = HostedRow(int(cmds.nrep[row]), float(s.x[row]), float(s.y[row]), k,
                                               float(s.alpha[row]), np.array(ids, np.int64),
                                               np.array(weights, np.float64), spec)
        self.inverse += 1.0 / max(int(cmds.nrep[row]), 1)

    def remove(self, sub_id: int) -> bool:
        old = self.rows.pop(sub_id, None)
        if old is None:
            return False
        self.inverse -= 1.0 / max(old.nrep, 1)
        if not self.rows:
            self.inverse = 0.0
        return True

    def batch(self, ids: list[int]) -> SubscriptionBatch:
        rows = [self.rows[i] for i in ids]
        terms = TermMatrix.from_rows([(r.term_ids, r.weights) for r in rows])
        k = [r.k if r.spec is None else 1 for r in rows]
        return SubscriptionBatch(np.array(ids, np.int64), np.array([r.x for r in rows], np.float64),
                                 np.array([r.y for r in rows], np.float64), np.array(k, np.int64),
                                 np.array([r.alpha for r in rows], np.float64), terms)

    def spec(self, sub_id: int) -> str | None:
        return self.rows[sub_id].spec

    def subscribe(self, engine, ids: list[int]) -> None:
        """Register hosted subscriptions in ``engine``: topk in one columnar batch, the other kinds in one
        batch of compiled specs."""
        topk = [i for i in ids if self.rows[i].spec is None]
        if topk:
            engine.subscribe_batch(self.batch(topk))
        specs = [spec_from_json(i, spec) for i in ids if (spec := self.rows[i].spec) is not None]
        if specs:
            engine.subscribe_batch(specs)

    def inverse_replication(self) -> float:
        """Sum of 1/nrep over hosted subscriptions: summed over partitions, the number of
        distinct subscriptions."""
        return float(self.inverse)

    def as_commands(self) -> Commands:
        """The hosted subscriptions as already-applied subscribe rows (for snapshots)."""
        ids = sorted(self.rows)
        subs = self.batch(ids) if ids else codec.empty_subscriptions()
        n = len(ids)
        return Commands(np.full(n, -1, np.int64), np.full(n, APPLIED, np.int64), np.full(n, OP_SUB, np.int8), subs,
                        [self.rows[i].nrep for i in ids], [self.rows[i].spec for i in ids])


def replay_commands(hosted: Hosted, due: Commands, activation: Activation | None = None) -> None:
    """Apply due commands to a :class:`Hosted` set only (rebuild from the durable log)."""
    for j in range(len(due)):
        if due.op[j] == OP_RESULTS or due.op[j] == OP_QUERY:  # requests and queries change nothing hosted
            continue
        sid = int(due.subs.ids[j])
        hosted.remove(sid)
        if activation is not None:
            activation.forget(sid)
        if due.op[j] == OP_SUB:
            hosted.add_from(due, j)


def plan_commands(pending: Commands, new: Commands, lo: int, hwm_seq: int) -> tuple[Commands, np.ndarray, Commands]:
    """Split ``pending + new`` into the commands due in a batch and those still pending.

    ``lo`` is the first sequence number of the batch and ``hwm_seq`` its last.  Returns (due
    commands sorted by (position, cseq), their positions, still-pending commands).
    """
    cmds = Commands.concat([pending, new])
    if len(cmds) == 0:
        return cmds, np.zeros(0, np.int64), cmds
    pos = np.where(cmds.at < 0, lo, np.maximum(cmds.at, lo))
    due = pos <= hwm_seq + 1
    rows = np.flatnonzero(due)
    order = rows[np.lexsort((cmds.cseq[rows], pos[rows]))]
    return cmds.take(order), pos[order], cmds.take(np.flatnonzero(~due))



def due_pending(pending: Commands, hwm_seq: int) -> tuple[Commands, np.ndarray, Commands]:
    """The pending commands due by ``hwm_seq``, in the order the live core applied them.

    A command still pending after a batch starting at ``lo`` has ``at > lo``, so the batch that
    makes it due (which starts at ``lo`` or later, before ``at``) applies it at ``at`` itself: the
    replay orders by ``at`` without knowing where the batches that logged nothing started (a
    ``lo`` of ``hwm_seq + 1`` would clamp every position to it and reorder by ``cseq``)."""
    return plan_commands(pending, Commands.empty(), 0, hwm_seq)
