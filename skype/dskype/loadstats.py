"""Load statistics of an adaptive pipeline from its partitions' own metrics rows (no driver replay).

The driver's :class:`skype.dskype.rebalancing.Rebalancer` keeps a copy of the pipeline's
:class:`~skype.partitioning.units.UnitDistribution` whose statistics the policies read.  With the
statistics source ``reports`` the copy is advanced after each batch from what the partitions
report in their metrics rows (key :data:`STATS_KEY`), not by replaying the staged stream, so the
statistics need no staged stream (stream directories given with ``--messages-dir`` and raw files
the executors tokenize, ``--vocabulary``, are rebalanced; Kafka is refused for another reason,
E063: its source does not carry the table versions).

**Message side** (:func:`message_report`, by partition 0 of the pipeline only).  Every partition
of an adaptive pipeline receives every message, so one of them reports, per batch, exactly what
the copy's ``_observe`` keeps of the batch's messages: their count, their sparse term counts,
their sparse cell counts on the grid of the version in force (the grid never changes between
versions) and up to ``RECENT_SAMPLE`` evenly spaced term lists
(:func:`skype.partitioning.units.recent_sample` over the batch).  The copy folds once per batch,
so the interval its recent sample covers is one batch: the sample is the replay's, exactly.

**Subscription side** (:func:`applied_commands`, every partition).  A command reaches only its
record's owner (:mod:`skype.dskype.handover`); the owner reports the topk subscribes it applied
and the unsubscribes that removed a topk record it hosted, with their positions and ``cseq``
(kind subscriptions stay outside the policies' load model, as in the replay; a hand-over's own
drops and gains are not stream commands and are not reported).  The driver applies the
reported commands of a batch in ``(position, cseq)`` order, which is the stream's order, so the
copy's placements (``unit_subs``, ``unit_bytes``, the summaries' entries, the registration order)
equal the replay's after every batch.  This is O(commands of the batch), like the durable log.

**Messages per partition** (:func:`routed_count`, every partition).  The replay counts the
messages it routes to each partition with the copy's summaries at that moment (the placements:
every replica of a record, in every unit its loose prefix reaches).  Without the messages on the
driver each partition q reports instead the batch's messages that share a term with the records
q hosts at the batch's end: what a summary over q's own records would route to q.  It differs
from the replay's count because a partition hosts one record per subscription (its home unit),
not its replicas in other units, and because it counts with the records hosted at the batch's
end where the replay counts with those live at each message (commands mid-batch).  It is the
load model's message count of a partition when statistics come from reports.

**Fold** (:func:`fold_reports`).  The reports of one batch become one :class:`BatchStats`; the
rebalancer writes it once per batch (``stats-<b>.pkl``, :func:`skype.dskype.files.write_once`)
before deciding and decides from the file when it exists, so a re-run batch decides the same.
:func:`advance` applies it to the copy: the commands in order, then the counts through
:meth:`~skype.partitioning.units.UnitDistribution.observe_counts`.

Everything a partition reports is one base64 string of :func:`skype.dskype.codec.pack` columns
(the metrics rows travel as JSON); the rebalancer takes it out of the rows it consumes.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

import numpy as np

from skype.model import MessageBatch
from skype.partitioning.units import Grid, UnitDistribution, recent_sample
from skype.dskype import codec
from skype.dskype.codec import OP_SUB, OP_UNSUB, Commands

if TYPE_CHECKING:
    from skype.dskype.handover import Handover
    from skype.dskype.hosted import Hosted, HostedRow

STATS_KEY = "load_stats"  # the metrics row's field holding a partition's report
SOURCES = ("auto", "replay", "reports")  # where the rebalancer's statistics come from ("auto": by the stream)


def stats_source(setting: str, staged: bool) -> str:
    """The source a run uses: ``replay`` for a staged stream, ``reports`` otherwise, unless set.

    >>> stats_source("auto", staged=True), stats_source("auto", staged=False), stats_source("reports", True)
    ('replay', 'reports', 'reports')
    """
    if setting == "auto":
        return "replay" if staged else "reports"
    return setting


# --------------------------------------------------------------------------- on a partition


def message_report(batch: MessageBatch, grid: Grid) -> dict[str, np.ndarray]:
    """The message side of a batch: count, sparse term and cell counts, the recent sample."""
    terms, term_counts = np.unique(batch.terms.ids, return_counts=True)
    cells, cell_counts = np.unique(grid.cell_of(batch.x, batch.y), return_counts=True)
    if len(batch):
        lengths, ids = recent_sample([(batch.terms.lengths(), batch.terms.ids)])
    else:
        lengths, ids = np.zeros(0, np.int64), np.zeros(0, np.int64)
    return {"m_count": np.array([len(batch)], np.int64), "m_terms": _narrow(terms),
            "m_term_counts": _narrow(term_counts), "m_cells": _narrow(cells), "m_cell_counts": _narrow(cell_counts),
            "m_lengths": _narrow(lengths), "m_ids": _narrow(ids)}


def _narrow(values: np.ndarray) -> np.ndarray:
    """Non-negative integers as int32 when they fit (half the bytes on the wire), else int64;
    the driver reads both as int64."""
    values = np.asarray(values, np.int64)
    return values.astype(np.int32) if len(values) == 0 or int(values.max()) < 2**31 else values


def applied_commands(due: Commands, hosted: Hosted, skip: int) -> np.ndarray:
    """Rows of ``due`` (applied in order by the partition) the subscription side reports: topk
    subscribes, and unsubscribes that removed a topk record hosted at that point.  ``hosted``:
    the partition's records before the batch (not changed).  The first ``skip`` rows are a
    hand-over's drops and gains (applied, not reported)."""

    def hosted_before(sid: int) -> bool | None:  # hosted as a topk record, as a kind, or not (None)
        row = hosted.rows.get(sid)
        return None if row is None else row.spec is None

    rows = []
    now: dict[int, bool | None] = {}  # the ids the batch's rows touched: topk, kind, or None (gone)
    for j in range(len(due)):
        sid, op = int(due.subs.ids[j]), int(due.op[j])
        if op == OP_SUB:
            topk = due.spec[j] is None
            if j >= skip and topk:
                rows.append(j)
            now[sid] = topk
            continue
        held = now[sid] if sid in now else hosted_before(sid)
        if held is not None:  # the partition's loop removes the hosted record on any other command
            if j >= skip and op == OP_UNSUB and held:
                rows.append(j)
            now[sid] = None
    return np.asarray(rows, np.int64)


def routed_count(batch: MessageBatch, hosted_terms: np.ndarray) -> int:
    """The batch's messages sharing a term with ``hosted_terms`` (sorted, distinct): each counted
    once, however many of its terms are hosted.

    >>> from skype.model import TermMatrix
    >>> z = np.zeros(3)
    >>> batch = MessageBatch(np.arange(3), z, z, z, TermMatrix([0, 2, 3, 3], [1, 4, 7], [0.5, 0.5, 1.0]))
    >>> routed_count(batch, np.array([1, 4])), routed_count(batch, np.array([7])), routed_count(batch, np.array([2]))
    (1, 1, 0)
    """
    if len(batch) == 0 or len(hosted_terms) == 0:
        return 0
    ids = batch.terms.ids
    pos = np.searchsorted(hosted_terms, ids).clip(0, len(hosted_terms) - 1)
    hit = hosted_terms[pos] == ids
    rows = np.repeat(np.arange(len(batch)), batch.terms.lengths())
    return int(len(np.unique(rows[hit])))


def hosted_terms(rows: Iterable[HostedRow]) -> np.ndarray:
    """The distinct terms of hosted topk records (:class:`skype.dskype.hosted.Hosted` rows)."""
    parts = [r.term_ids for r in rows if r.spec is None]
    return np.unique(np.concatenate(parts)).astype(np.int64) if parts else np.zeros(0, np.int64)


def partition_report(partition: int, hosted: Hosted, handover: Handover, messages: MessageBatch, due: Commands,
                     positions: np.ndarray, rows: np.ndarray) -> str:
    """A partition's report of a batch (module docstring): the commands ``rows`` of ``due`` it
    applied, the batch's messages sharing a term with the records it hosts now, and on partition
    0 the message side on the grid of the version in force."""
    routed = routed_count(messages, hosted_terms(hosted.rows.values()))
    side = None
    if partition == 0:
        grid = handover.versions.upto(handover.applied)[handover.applied].locator.grid
        side = message_report(messages, grid)
    return encode(due, positions, rows, routed, side)


def encode(due: Commands, positions: np.ndarray, rows: np.ndarray, routed: int,
           messages: dict[str, np.ndarray] | None) -> str:
    """One partition's report of a batch, as the JSON-safe string of its metrics row."""
    cmds = due.take(rows)
    cols = {"routed": np.array([routed], np.int64), "c_pos": np.asarray(positions, np.int64)[rows],
            "c_cseq": cmds.cseq, "c_op": cmds.op, "c_ids": cmds.subs.ids, "c_x": cmds.subs.x, "c_y": cmds.subs.y,
            "c_k": cmds.subs.k, "c_alpha": cmds.subs.alpha, "c_indptr": cmds.subs.terms.indptr,
            "c_terms": cmds.subs.terms.ids, "c_weights": cmds.subs.terms.weights, **(messages or {})}
    return base64.b64encode(codec.pack(**cols)).decode("ascii")


# --------------------------------------------------------------------------- on the driver


@dataclass
class BatchStats:
    """The folded reports of one batch: what advances the driver's copy (module docstring)."""

    commands: Commands  # topk subscribes and unsubscribes, in (position, cseq) order
    part_msgs: np.ndarray  # per partition: the batch's messages sharing a term with its records
    messages: dict[str, np.ndarray] | None  # partition 0's message side (None: no report of it)


def fold_reports(reports: dict[int, str], num_partitions: int) -> BatchStats:
    """Partition -> its encoded report (of one pipeline and batch) -> the batch's statistics."""
    from skype.model import SubscriptionBatch, TermMatrix

    parts, pos, routed, messages = [], [], np.zeros(num_partitions), None
    for p, text in sorted(reports.items()):
        cols = codec.unpack(base64.b64decode(text))
        routed[p] = float(cols["routed"][0])
        if "m_count" in cols:
            messages = {k: np.asarray(v) for k, v in cols.items() if k.startswith("m_")}
        subs = SubscriptionBatch(cols["c_ids"], cols["c_x"], cols["c_y"], cols["c_k"], cols["c_alpha"],
                                 TermMatrix(cols["c_indptr"], cols["c_terms"], cols["c_weights"]))
        n = len(cols["c_cseq"])
        parts.append(Commands(cols["c_cseq"], np.asarray(cols["c_pos"]), cols["c_op"], subs, np.ones(n, np.int32)))
        pos.append(np.asarray(cols["c_pos"], np.int64))
    cmds = Commands.stack(parts)
    if len(cmds):
        order = np.lexsort((cmds.cseq, cmds.at))
        cmds = cmds.take(order)
        keep = np.r_[True, cmds.cseq[1:] != cmds.cseq[:-1]]  # a command reported twice: once
        cmds = cmds.take(np.flatnonzero(keep))
    return BatchStats(cmds, routed, messages)


def apply_commands(dist: UnitDistribution, cmds: Commands) -> None:
    """Apply reported commands (in order) to the copy: consecutive subscribes in one call (a run
    ends before an id it already holds), consecutive unsubscribes in one call, as the replay
    registers a stream step at a time (the resulting state does not depend on the grouping)."""
    j, n = 0, len(cmds)
    while j < n:
        op = int(cmds.op[j])
        end, seen = j, set()
        while end < n and int(cmds.op[end]) == op and (op != OP_SUB or int(cmds.subs.ids[end]) not in seen):
            seen.add(int(cmds.subs.ids[end]))
            end += 1
        rows = np.arange(j, end)
        if op == OP_SUB:
            dist.route_subscriptions(cmds.subs.take(rows), None)
        else:
            dist.remove_subscriptions(cmds.subs.ids[rows])
        j = end


def advance(dist: UnitDistribution, stats: BatchStats) -> None:
    """Advance the copy by one batch's statistics: commands, then the message side and the
    messages per partition."""
    apply_commands(dist, stats.commands)
    m = stats.messages
    if m is None:  # no message side (a batch of ticks only): the per-partition counts are zeros
        dist.observe_counts(0, np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64), np.zeros(0),
                            (np.zeros(0, np.int64), np.zeros(0, np.int64)), stats.part_msgs)
        return
    dist.observe_counts(int(m["m_count"][0]), m["m_terms"], m["m_term_counts"], m["m_cells"], m["m_cell_counts"],
                        (m["m_lengths"], m["m_ids"]), stats.part_msgs)
