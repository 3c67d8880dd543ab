"""Loose-prefix activation of ``prefix`` replicas on Spark: which replicas of a subscription run.

The ``prefix`` method (spec §5.2, Eq. 18, Def. 12, Lemma 7) places a subscription s only on the
partitions of its *loose prefix*: the leading terms ``s.psi[i]`` with
``reach(s, i) = alpha_s + (1 - alpha_s) * wtsum(s, i) >= theta_s - EPS`` (see
:mod:`skype.partitioning.prefix`).  On Spark the record of s goes to the partitions of *all* its
terms (the keyword placement, routed by :mod:`skype.dskype.routing`; a message goes to the
partition of every term it has that is live there, :mod:`skype.dskype.summaries`), and each of those partitions holds a
*replica* that is either **active** (in the partition's engine, reported to the merge stage) or
**dormant** (only its record is kept; no engine work, no report).  The *home* replica, on the
partition of s's first term, is always active.

**Thresholds from the engine, decided where they are known.**  Partition q decides alone whether
its replica of s may sleep.  Let ``i_q`` be the first position of s's terms in q's range, ``N``
the count window and ``B`` the most messages a micro-batch can bring (``maxRecordsPerTrigger``).
At the end of a batch whose high-water mark is ``h``, q takes from its engine the ``depth`` best
local matches of s (``topn``: exact scores over q's window share) and keeps the *witnesses*: those
with ``seq > h + B - N`` (still in the window when the next batch ends) and score
``> reach(s, i_q) + EPS``.  With at least k witnesses the replica sleeps, *until* the k-th newest
witness's sequence number ``u``; a dormant replica wakes (re-subscribes into the engine, which
scores it over q's window share) after the first batch whose ``h`` has ``u <= h + B - N``, at
the start of the next one, before any of its messages: its witnesses may leave the window during
that batch.  That is **lazy reallocation**: a
replica returns to the loose prefix exactly when the threshold that excluded it may fall.

**Why it is exact.**  While q's replica sleeps, the k witnesses are window messages (q's share is
part of the global window) scoring above ``reach(s, i_q) + EPS``, so the global kScore of s is at
least that high (arrivals only raise it).  A message m of s's global top-k scores at least the
kScore; its first term shared with s sits at a position ``i*`` with
``reach(s, i*) >= ST(s, m) > reach(s, i_q) + EPS`` (Lemma 7's chain: every weight of m is <= 1,
SSim <= 1), so ``i* < i_q`` (reach does not increase along s's terms), and the same holds for
every sleeping replica: m's first shared term lies on a partition whose replica is awake.  m is
in that partition's window share (routed by all its terms, or, with keyword summaries, by
``s.psi[i*]``, live there while the replica is awake, or read back when it woke), and ranks there
at least as high as globally, so it is in that replica's local top-k and in the merged list.
The home replica (``i_q = 0``) never sleeps, so every subscription keeps a replica.  The argument holds at any moment of the
next batch and at the end of this one, so the merged list is the global top-k throughout.
Decisions depend only on local facts; a different schedule (a rebuilt engine, a retried task)
changes which replicas run, never the merged result.

**Durable.**  Sleeps and wakes are logged next to the partition's commands (:func:`entry`,
replayed by :meth:`Activation.replay` after the commands due by the entry's high-water mark), and
the dormant set is part of the snapshot, so a rebuilt engine holds exactly the active replicas
the merge stage holds lists for.  Time windows (expiry in a batch is not bounded by its size) and
the hybrids run every replica: there the runtime keeps the exact mode of ``docs/spark-design.md``.

**Work per batch** is proportional to the batch: a replica is examined when its local list
changed or after it (re)started; wake-ups come off a heap ordered by ``u``.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from skype.dskype.reports import STATE, ReportBuilder, ReportRows
from skype.partitioning.prefix import EPS


@dataclass(frozen=True)
class ActivationConfig:
    """What a ``prefix`` partition needs: its term ranges and the lookahead of one batch."""

    starts: tuple  # term ranges of the distribution: partition i holds ids [starts[i], starts[i+1])
    batch_messages: int  # B: the most messages one micro-batch brings
    window: int  # N: the count window
    depth_factor: int = 3  # topn depth = depth_factor * k

    def term_partitions(self, term_ids: np.ndarray) -> np.ndarray:
        """The partition of each term (unseen ids ``t >= V0``: ``(t - V0) mod P``), as
        :meth:`skype.partitioning.ranges.RangeDistribution.term_partitions`."""
        starts = np.asarray(self.starts, np.int64)
        vocab, parts = int(starts[-1]), len(starts) - 1
        t = np.asarray(term_ids, np.int64)
        known = np.searchsorted(starts, t, side="right") - 1
        return np.where(t < vocab, np.minimum(known, parts - 1), (t - vocab) % parts)


def reach_here(config: ActivationConfig, partition: int, alpha: float, term_ids: np.ndarray,
               weights: np.ndarray) -> tuple[int, float]:
    """``(i_q, reach(s, i_q))``: the first position of s's terms on this partition and the
    highest score a message whose first shared term is there can reach (``i_q = -1`` if none)."""
    here = np.flatnonzero(config.term_partitions(term_ids) == partition)
    if len(here) == 0:
        return -1, 0.0
    pos = int(here[0])
    wtsum = sum(reversed(np.asarray(weights, np.float64)[pos:].tolist()), 0.0)  # from the end, as prefix.py
    return pos, float(alpha) + (1.0 - float(alpha)) * wtsum


@dataclass
class Activation:
    """The dormant replicas of one partition (see module docstring)."""

    config: ActivationConfig
    partition: int
    dormant: dict[int, int] = field(default_factory=dict)  # sub id -> u (k-th newest witness seq)
    fresh: set[int] = field(default_factory=set)  # active replicas not examined since they started
    _heap: list[tuple[int, int]] = field(default_factory=list)  # (u, sub id), lazily cleaned

    def horizon(self, hwm_seq: int) -> int:
        """Witnesses must have ``seq`` above this to stay in the window through the next batch."""
        return int(hwm_seq) + self.config.batch_messages - self.config.window

    def sleep(self, sub_id: int, until: int) -> None:
        self.dormant[sub_id] = int(until)
        self.fresh.discard(sub_id)
        heapq.heappush(self._heap, (int(until), sub_id))

    def forget(self, sub_id: int) -> None:
        """The replica is gone (unsubscribed or replaced): neither dormant nor waiting."""
        self.dormant.pop(sub_id, None)
        self.fresh.discard(sub_id)

    def due(self, hwm_seq: int) -> list[int]:
        """Dormant replicas whose witnesses may expire during the next batch (removed from the
        dormant set: the caller wakes them)."""
        limit = self.horizon(hwm_seq)
        out = []
        while self._heap and self._heap[0][0] <= limit:
            until, sid = heapq.heappop(self._heap)
            if self.dormant.get(sid) == until:
                del self.dormant[sid]
                out.append(sid)
        return sorted(out)

    def upcoming(self, hwm_seq: int) -> list[int]:
        """The dormant replicas :meth:`due` would wake at this high-water mark, left in place
        (a walk of the heap's part at or below the horizon)."""
        limit, heap = self.horizon(hwm_seq), self._heap
        out, stack = set(), [0] if heap else []
        while stack:
            i = stack.pop()
            until, sid = heap[i]
            if until > limit:
                continue
            if self.dormant.get(sid) == until:
                out.add(sid)
            stack.extend(c for c in (2 * i + 1, 2 * i + 2) if c < len(heap))
        return sorted(out)

    def witnesses_until(self, k: int, reach: float, scores: np.ndarray, seqs: np.ndarray,
                        hwm_seq: int) -> int | None:
        """``u`` if at least k local matches outlive the next batch above ``reach + EPS``,
        else None."""
        ok = (np.asarray(seqs, np.int64) > self.horizon(hwm_seq)) & (np.asarray(scores, np.float64) > reach + EPS)
        if int(ok.sum()) < k:
            return None
        return int(np.sort(np.asarray(seqs, np.int64)[ok])[::-1][k - 1])

    # ------------------------------------------------------------------ durable form
    def columns(self) -> dict[str, np.ndarray]:
        ids = sorted(self.dormant)
        return {"dormant_ids": np.array(ids, np.int64), "dormant_until": np.array([self.dormant[i] for i in ids],
                                                                                   np.int64)}

    def load(self, cols: dict[str, np.ndarray]) -> None:
        """Reset to a snapshot's dormant set."""
        self.dormant, self._heap, self.fresh = {}, [], set()
        for sid, until in zip(cols.get("dormant_ids", np.zeros(0, np.int64)).tolist(),
                              cols.get("dormant_until", np.zeros(0, np.int64)).tolist()):
            self.sleep(int(sid), int(until))

    def replay(self, cols: dict[str, np.ndarray]) -> None:
        """Apply a logged entry of sleeps and wakes."""
        for sid in cols["wake_ids"].tolist():
            self.dormant.pop(int(sid), None)
        for sid, until in zip(cols["sleep_ids"].tolist(), cols["sleep_until"].tolist()):
            self.sleep(int(sid), int(until))


def entry(hwm_seq: int, slept: list[tuple[int, int]], woken: list[int]) -> bytes:
    """The durable log entry of one batch's sleeps ``(id, u)`` and wakes."""
    from skype.dskype import codec

    return codec.pack(activation=np.ones(1, bool), hwm_seq=np.array([hwm_seq], np.int64),
                      sleep_ids=np.array([s for s, _ in slept], np.int64),
                      sleep_until=np.array([u for _, u in slept], np.int64), wake_ids=np.array(woken, np.int64))


# --------------------------------------------------------------------------- a batch's decisions


def sleep_candidates(activation: Activation, rows: ReportRows, cmd_subs: np.ndarray) -> set[int]:
    """The replicas to examine at the end of a batch: those whose replicated local list changed
    (``STATE`` rows) and those not examined since they started, less the ones a command touched
    (examined next time).  They leave ``activation.fresh``."""
    changed = rows.row["sub"][(rows.row["kind"] == STATE) & rows.row["after_hosted"]
                              & (rows.row["after_nrep"] > 1)]
    candidates = (set(changed.tolist()) | activation.fresh) - set(cmd_subs.tolist())
    activation.fresh -= candidates
    return candidates


def decide_sleeps(activation: Activation, running: np.ndarray, k: np.ndarray, reach: np.ndarray,
                  indptr: np.ndarray, top_scores: np.ndarray, hwm_seq: int,
                  topn: Callable[[int, int], tuple[np.ndarray, np.ndarray]],
                  seq_of: Callable[[np.ndarray], np.ndarray]) -> list[tuple[int, int]]:
    """Which of the active replicas ``running`` sleep, and until when: ``[(id, u)]``
    (module docstring).  ``k``/``reach``: each one's k and ``reach(s, i_q)`` (-1: never sleeps);
    ``indptr``/``top_scores``: their local top-k scores (CSR); ``topn(id, n)``: the engine's n best
    local matches ``(ids, scores)``; ``seq_of``: message ids -> sequence numbers.  Decides only:
    the caller takes the sleepers out of its engine and records them (:meth:`Activation.sleep`)."""
    assert activation.config is not None
    count = np.diff(indptr)
    kth = np.asarray(top_scores, np.float64)[np.maximum(indptr[1:] - 1, 0)] if len(top_scores) else np.zeros(len(k))
    # the cheap test first: k local matches above the reach (the home replica never sleeps)
    maybe = np.flatnonzero((reach >= 0) & (count >= k) & (kth > reach + EPS))
    slept: list[tuple[int, int]] = []
    for i in maybe.tolist():
        sid = int(running[i])
        ids, scores = topn(sid, activation.config.depth_factor * int(k[i]))
        until = activation.witnesses_until(int(k[i]), float(reach[i]), scores, seq_of(ids), hwm_seq)
        if until is not None:
            slept.append((sid, until))
    return slept


def without_sleepers(rows: ReportRows, slept: list[tuple[int, int, int]]) -> ReportRows:
    """The batch's report rows once the replicas ``slept`` ``[(id, nrep, k)]`` went to sleep: each
    reports its departure (a ``STATE`` row to not hosted) instead of its list."""
    if not slept:
        return rows
    builder = ReportBuilder()
    for sid, nrep, k in slept:
        builder.add(sid, STATE, (True, nrep), (False, nrep), k)
    keep = ~np.isin(rows.row["sub"], np.array([s for s, _, _ in slept], np.int64))
    return ReportRows.concat([rows.take(np.flatnonzero(keep)), builder.rows()])


def reach_of(config: ActivationConfig, partition: int, alpha: float, term_ids: np.ndarray,
             weights: np.ndarray) -> float:
    """``reach(s, i_q)`` of a record on ``partition``, -1 when its replica there never sleeps
    (home, or no term here)."""
    pos, reach = reach_here(config, partition, alpha, term_ids, weights)
    return reach if pos > 0 else -1.0
