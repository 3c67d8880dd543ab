"""Global k-th score floors: the merge stage tells ``prefix`` replicas what cannot enter the top-k.

A replica ranks a message against its *local* list, the top-k over its partition's share of the
window, whose k-th score is lower than the global one; so replicas admit (insert into their
buffers) messages the global list would never take.  The merge stage knows each replicated
subscription's global list; this module turns it into a per-subscription **floor** that the next
batch's replicas use to skip those admissions (``Engine.set_floors``, ``set_floor`` in
``csrc/skype/_core/buffers.pyx``).

**The floor** (:func:`floors_of`).  At the end of a batch whose high-water mark is ``h`` the merge
bucket holds, for a replicated subscription s, the current local list of each of its active
replicas: real window messages with their exact scores (for s's current record).  Its
*witnesses* are those entries (deduplicated) that stay in a count window of N through the next
``lookahead`` messages: ``seq > h + lookahead - N``.  With at least k witnesses the floor is

* ``floor`` = the k-th highest witness score,
* ``until`` = ``min(seq of the k best witnesses) + N - 1``: the last high-water mark at which all
  k of them are still in the window (``until >= h + lookahead``),
* ``asof`` = ``h``: the floor speaks of the records the merge state reflects at ``h``.

**Why a replica may skip below it.**  A replica applies a floor at the start of a batch with
high-water mark ``H`` only when ``H <= until`` and its record of s was subscribed in a batch
ending at or before ``asof`` (:class:`FloorKeeper`); the engine then skips an arrival m with
``ST(s, m) < floor`` (strictly: a newer message tied at the floor ranks above the older witnesses).
At the end of the batch the k witnesses are window messages ranking above m, so m is not in s's
global top-k there.  The engine keeps, per subscription, the best score it skipped since its last
rebuild, and the next ``set_floors`` rebuilds the buffer when that score reaches the new floor
(or the floor lapses: ``-inf``): so at *every* batch end every skipped message still in the
engine's buffer's stead scores below a floor valid at that end, hence below the global k-th
score.  A message g of the global top-k in the replica's share therefore ranks above every
skipped message; removing messages ranked below g from a buffer leaves g at its rank, so g is in
the replica's reported list (the engine's entries above the floor are exact).  Every reported
entry is a real window message with its exact score, and the merged list is the top-k of a set
holding the global top-k: the global top-k.  This is the merge's argument of
``docs/dskype-on-spark.md`` with "every message of the global top-k reached a replica" unchanged.

**Expiry** is the ``until`` bound: a floor whose witnesses may have left the window is not
applied (the replica lifts it, rebuilding what it skipped if needed), so a message that could
enter the global top-k after the floor-setting entry expires is never skipped at that time, and
one skipped earlier comes back by the rebuild.  **Staleness and restarts**: a floor carries its
own validity, so one read late (a slow side channel, a restarted partition) is either still true
or ignored; a rebuilt engine starts with no floors, and the keeper then treats every record as
subscribed at the restart (a floor computed before is not applied).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from skype.api import ChangeLog


@dataclass(frozen=True)
class Floors:
    """Per-subscription floors, aligned arrays (module docstring)."""

    ids: np.ndarray  # subscription ids (int64)
    floor: np.ndarray  # the k-th witness score (float64)
    until: np.ndarray  # the last high-water mark at which the witnesses are all in the window (int64)
    asof: np.ndarray  # the high-water mark of the merge state the floor comes from (int64)

    @staticmethod
    def empty() -> Floors:
        return Floors(np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64))

    @staticmethod
    def concat(parts: list[Floors]) -> Floors:
        parts = [p for p in parts if len(p.ids)]
        if not parts:
            return Floors.empty()
        return Floors(*(np.concatenate([getattr(p, name) for p in parts])
                        for name in ("ids", "floor", "until", "asof")))

    def __len__(self) -> int:
        return len(self.ids)


def witness_floor(scores: np.ndarray, seqs: np.ndarray, k: int, horizon: int, window: int) -> tuple[float, int] | None:
    """``(floor, until)`` from one subscription's known window entries (deduplicated), or None
    with fewer than k witnesses (``seq > horizon``).

    >>> witness_floor(np.array([0.9, 0.8, 0.7, 0.6]), np.array([50, 10, 60, 70]), 2, 20, 100)
    (0.7, 149)
    """
    live = np.flatnonzero(np.asarray(seqs) > horizon)
    if len(live) < k or k <= 0:
        return None
    order = live[np.lexsort((-np.asarray(seqs)[live], -np.asarray(scores)[live]))][:k]
    return float(scores[order[-1]]), int(np.asarray(seqs)[order].min()) + int(window) - 1


def floors_of(merge, asof: int, window: int, lookahead: int) -> Floors:
    """The floors of every replicated subscription a merge bucket (:class:`MergeCore`) holds,
    from its state at high-water mark ``asof`` (module docstring)."""
    horizon = int(asof) + int(lookahead) - int(window)
    ids, floor, until = [], [], []
    for sid, (k, reps) in merge.state.items():
        lists = [entry for entry in reps.values() if len(entry[0])]
        if not lists:
            continue
        msg = np.concatenate([e[0] for e in lists])
        _, first = np.unique(msg, return_index=True)
        got = witness_floor(np.concatenate([e[1] for e in lists])[first], np.concatenate([e[2] for e in lists])[first],
                            int(k), horizon, window)
        if got is not None:
            ids.append(sid)
            floor.append(got[0])
            until.append(got[1])
    n = len(ids)
    return Floors(np.array(ids, np.int64), np.array(floor, np.float64), np.array(until, np.int64),
                  np.full(n, int(asof), np.int64))


@dataclass
class FloorKeeper:
    """A partition's side: which floors its engine holds, and when each record was subscribed.

    Only the newest floors apply.  (Keeping earlier ones while valid and taking the highest was
    tried: the counts did not move, since a newer floor is at least an older one still valid in
    practice; ``docs/results/2026-11-29-prefix-bound.md``.)

    ``margin`` makes floors sticky: the engine gets ``f - margin * |f|`` for a valid floor f, and
    keeps the floor it holds while that is between ``f - 2 * margin * |f|`` and f (any floor at or
    below a valid one is valid), so a small fall of f costs no rebuild; 0 passes f itself."""

    floored: dict[int, float] = field(default_factory=dict)  # id -> the finite floor its engine buffer holds
    subscribed_at: dict[int, int] = field(default_factory=dict)  # id -> high-water mark of its record's batch
    restarted_at: int = -1  # records older than the keeper count as subscribed here (a rebuild)
    margin: float = 0.0
    settle: bool = False  # apply a floor only to a replica that had a valid one in the batch before too
    side_list: int = 32  # skipped messages the engine keeps per subscription to re-admit (0: rebuild)
    offered_before: set[int] = field(default_factory=set)  # settle: ids with a valid floor last batch

    def subscribed(self, sub_ids, hwm_seq: int) -> None:
        """Records (re)subscribed in the batch ending at ``hwm_seq``: their engine buffers start
        without a floor (the engine resets it), and floors older than this batch do not apply."""
        for sid in sub_ids:
            self.subscribed_at[int(sid)] = int(hwm_seq)
            self.floored.pop(int(sid), None)

    def engine_replaced(self, hwm_seq: int) -> None:
        """A fresh engine holds no floors; records of unknown age count as subscribed now."""
        self.floored.clear()
        self.restarted_at = max(self.restarted_at, int(hwm_seq))

    def apply(self, engine, floors: Floors, hwm_seq: int, eligible) -> ChangeLog:
        """Set the floors valid through the batch ending at ``hwm_seq`` on the ``eligible(id)``
        replicas (active, topk, replicated), lift the others the engine holds; returns the top-k
        changes of the buffers the engine rebuilt."""
        chosen: dict[int, float] = {}
        for sid, f, until, asof in zip(floors.ids.tolist(), floors.floor.tolist(), floors.until.tolist(),
                                       floors.asof.tolist()):
            born = max(self.subscribed_at.get(sid, -1), self.restarted_at)
            if until >= hwm_seq and born <= asof and eligible(sid):
                chosen[sid] = max(chosen.get(sid, -np.inf), f)  # two valid floors: the higher holds
        if self.settle:  # floors that come and go cost a rebuild each time they go: wait for a second one
            valid, chosen = set(chosen), {sid: f for sid, f in chosen.items() if sid in self.offered_before}
            self.offered_before = valid
        lifted = [sid for sid in self.floored if sid not in chosen and eligible(sid)]
        held, self.floored, changed = self.floored, {}, {}
        for sid, f in chosen.items():
            now = held.get(sid)
            if now is not None and f - 2 * self.margin * abs(f) <= now <= f:
                self.floored[sid] = now  # still valid and close enough: unchanged, nothing to rebuild
            else:
                self.floored[sid] = changed[sid] = f - self.margin * abs(f)
        if not changed and not lifted:
            return ChangeLog.empty()
        ids = np.array(list(changed) + lifted, np.int64)
        values = np.array(list(changed.values()) + [-np.inf] * len(lifted), np.float64)
        return engine.set_floors(ids, values, side_list=self.side_list)
