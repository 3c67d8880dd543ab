"""The merge stage: exact global top-k of replicated subscriptions, and netted result changes.

A merge bucket owns the subscriptions with ``bucket_of(id) == b``.  Its state is, for every
subscription with more than one replica, the latest local top-k of each replica (``k`` and
``{partition: (ids, scores, seqs)}``); single-replica subscriptions need no state (their one
replica's list is the global list, and the partition sends the netted change itself).

**Merge.**  The delivered top-k of a replicated subscription is the replicas' lists merged:
deduplicated by message id (a message reaching two replicas has the same score and sequence
number in both), ordered by score descending then ``seq`` descending (the newer message first,
the engines' tie rule), cut to k.  It equals the global top-k when every message of the global
top-k reached at least one replica's partition (it then ranks there at least as high as
globally, so it is in that replica's local top-k); see ``docs/spark-design.md`` for why the runtime's
routing guarantees that for every method.

**Events.**  Per batch and subscription, the exact difference between the merged top-k before and
after the batch: entered entries (id, score, seq), left ids, and whether the subscription was
created or removed in the batch (a subscription replaced within one batch is neither: a message
its old and new records both rank, with another score, leaves and enters).

**Durable state.**  The state is a fold of the report rows that change it (``STATE`` rows): the
durable log holds a snapshot plus those rows batch by batch (:func:`state_delta`), and
:meth:`MergeCore.rebuild` replays them.
"""

from __future__ import annotations

import time
from collections import defaultdict

import numpy as np

from skype.errors import InputError
from skype.dskype import codec
from skype.dskype.reports import DELTA, EMPTY_LIST, EventBuilder, EventRows, ReportRows, Reports, pack_results

ListT = tuple[np.ndarray, np.ndarray, np.ndarray]


def merge_lists(lists: list[ListT], k: int) -> ListT:
    """Merge replica lists: dedupe by id, order by (score desc, seq desc), keep k.

    >>> a = (np.array([1, 2]), np.array([0.9, 0.5]), np.array([10, 20]))
    >>> b = (np.array([3, 2]), np.array([0.7, 0.5]), np.array([30, 20]))
    >>> [x.tolist() for x in merge_lists([a, b], 2)]
    [[1, 3], [0.9, 0.7], [10, 30]]
    """
    lists = [entry for entry in lists if len(entry[0])]
    if not lists:
        return EMPTY_LIST
    ids = np.concatenate([entry[0] for entry in lists])
    scores = np.concatenate([entry[1] for entry in lists])
    seqs = np.concatenate([entry[2] for entry in lists])
    _, first = np.unique(ids, return_index=True)
    ids, scores, seqs = ids[first], scores[first], seqs[first]
    order = np.lexsort((-seqs, -scores))[:k]
    return ids[order], scores[order], seqs[order]


def diff_lists(old: ListT, new: ListT) -> tuple[ListT, np.ndarray]:
    """(entries of ``new`` not in ``old``, ids of ``old`` not in ``new``).  An entry is the same
    only with the same score: a subscription replaced by another record within the batch scores
    the messages of both lists anew, so a message kept with another score leaves and enters."""
    order = np.argsort(old[0], kind="stable")
    old_ids, old_scores = old[0][order], old[1][order]
    if len(old_ids):
        pos = np.searchsorted(old_ids, new[0]).clip(0, len(old_ids) - 1)
        kept = (old_ids[pos] == new[0]) & (old_scores[pos] == new[1])
    else:
        kept = np.zeros(len(new[0]), bool)
    fresh = ~kept
    gone = ~np.isin(old[0], new[0][kept])
    return (new[0][fresh], new[1][fresh], new[2][fresh]), old[0][gone]


class MergeCore:
    """A merge bucket's live state (see module docstring)."""

    def __init__(self) -> None:
        self.state: dict[int, tuple[int, dict[int, ListT]]] = {}

    # ------------------------------------------------------------------ durable form
    @classmethod
    def rebuild(cls, log: list[bytes]) -> MergeCore:
        core = cls()
        for blob in log:
            cols = codec.unpack(blob)
            if "snapshot" in cols:
                core.state = {}
            core._fold(cols)
        return core

    def final_results(self) -> bytes:
        """The merged top-k of every replicated subscription of the bucket."""
        ids = sorted(self.state)
        return pack_results(ids, [self.merged(sid) for sid in ids])

    def snapshot(self) -> bytes:
        sub, part, k, lists = [], [], [], []
        for sid, (kk, reps) in sorted(self.state.items()):
            for p, entry in sorted(reps.items()):
                sub.append(sid)
                part.append(p)
                k.append(kk)
                lists.append(entry)
        return _pack_rows(sub, part, [True] * len(sub), k, lists, snapshot=True)

    def _fold(self, cols: dict[str, np.ndarray]) -> None:
        """Apply the rows of a state delta or snapshot."""
        ptr = cols["ptr"]
        for r in range(len(cols["sub"])):
            entry = (cols["id"][ptr[r]:ptr[r + 1]], cols["score"][ptr[r]:ptr[r + 1]], cols["seq"][ptr[r]:ptr[r + 1]])
            self._fold_rows(int(cols["sub"][r]), [int(cols["partition"][r])], [bool(cols["keep"][r])],
                            [int(cols["k"][r])], [entry])

    def merged(self, sid: int) -> ListT:
        k, reps = self.state[sid]
        return merge_lists(list(reps.values()), k)

    def _held(self, subs: np.ndarray) -> np.ndarray:
        """Which of ``subs`` have replica state here: dictionary lookups, O(len(subs)), not a
        pass over the whole state."""
        state = self.state
        return np.fromiter((s in state for s in subs.tolist()), bool, len(subs))

    # ------------------------------------------------------------------ one batch
    def apply(self, blobs: list[bytes]) -> tuple[bytes | None, bytes | None, dict]:
        """Fold a batch's report blobs.  Returns (events blob or None, state delta or None,
        metrics)."""
        t0 = time.perf_counter()
        reports = [Reports.unpack(blob) for blob in blobs]
        upto = max((rep.upto for rep in reports), default=-1)
        rows = ReportRows.concat([rep.rows() for rep in reports])
        part = np.concatenate([rep.cols["partition"] for rep in reports]) if reports else np.zeros(0, np.int32)
        sub, kind = rows.row["sub"], rows.row["kind"]
        delta = kind == DELTA
        # single-replica changes pass through, vectorised; they must be alone and stateless
        if delta.any():
            uniq, counts = np.unique(sub, return_counts=True)
            clash = np.isin(sub[delta], uniq[counts > 1])
            if self.state:
                clash |= self._held(sub[delta])
            if clash.any():
                sid = int(sub[delta][np.argmax(clash)])
                raise InputError("E026", detail=f"subscription {sid}: a single-replica change met other replicas")
        d_rows = np.flatnonzero(delta & ((np.diff(rows.a_ptr) > 0) | (np.diff(rows.b_ptr) > 0)))
        passed = rows.take(d_rows)
        parts = [EventRows(passed.row["sub"], np.zeros(len(d_rows), bool), np.zeros(len(d_rows), bool),
                           passed.a_ptr, passed.a, passed.b_ptr, passed.b[0])]
        # a single-replica subscription created (or removed) here and reported once: vectorised too
        c = rows.row
        lonely = ~delta & ~np.isin(sub, sub[~delta][_repeated(sub[~delta])])
        if self.state and lonely.any():
            lonely &= ~self._held(sub)
        created = lonely & ~c["before_hosted"] & c["after_hosted"] & (c["after_nrep"] == 1)
        removed = lonely & c["before_hosted"] & (c["before_nrep"] == 1) & ~c["after_hosted"]
        for mask, is_created in ((created, True), (removed, False)):
            chosen = rows.take(np.flatnonzero(mask))
            n = len(chosen)
            if is_created:  # entered = the new list, nothing left
                parts.append(EventRows(chosen.row["sub"], np.ones(n, bool), np.zeros(n, bool), chosen.a_ptr, chosen.a,
                                       np.zeros(n + 1, np.int64), np.zeros(0, np.int64)))
            else:  # nothing entered, the old list left
                parts.append(EventRows(chosen.row["sub"], np.zeros(n, bool), np.ones(n, bool), np.zeros(n + 1, np.int64),
                                       EMPTY_LIST, chosen.b_ptr, chosen.b[0]))
        # the rest, subscription by subscription
        events = EventBuilder(upto)
        groups: dict[int, list[int]] = defaultdict(list)
        for r in np.flatnonzero(~delta & ~created & ~removed).tolist():
            groups[int(sub[r])].append(r)
        d_sub, d_part, d_keep, d_k, d_lists = [], [], [], [], []
        for sid, members in groups.items():
            existed = sid in self.state
            old = self.merged(sid) if existed else EMPTY_LIST
            new_single = None
            for r in members:
                if c["before_hosted"][r]:
                    existed = True
                    if c["before_nrep"][r] == 1:
                        old = _entries(rows.b_ptr, rows.b, r)
                keep = bool(c["after_hosted"][r] and c["after_nrep"][r] > 1)
                if c["after_hosted"][r] and c["after_nrep"][r] == 1:
                    new_single = _entries(rows.a_ptr, rows.a, r)
                d_sub.append(sid)
                d_part.append(int(part[r]))
                d_keep.append(keep)
                d_k.append(int(c["k"][r]))
                d_lists.append(_entries(rows.a_ptr, rows.a, r) if keep else EMPTY_LIST)
            n = len(members)
            self._fold_rows(sid, d_part[-n:], d_keep[-n:], d_k[-n:], d_lists[-n:])
            exists = sid in self.state or new_single is not None
            new = self.merged(sid) if sid in self.state else (new_single if new_single is not None else EMPTY_LIST)
            entered, left = diff_lists(old, new)
            created, removed = exists and not existed, existed and not exists
            if len(entered[0]) or len(left) or created or removed:
                events.add(sid, entered, left, created=created, removed=removed)
        parts.append(events.rows())
        out = EventRows.concat(parts)
        state_delta = _pack_rows(d_sub, d_part, d_keep, d_k, d_lists) if d_sub else None
        metrics = {"report_blobs": len(blobs), "report_rows": len(rows), "events": len(out),
                   "replicated_tracked": len(self.state), "merge_s": time.perf_counter() - t0}
        return (out.pack(upto) if len(out) else None), state_delta, metrics

    def _fold_rows(self, sid: int, parts: list[int], keep: list[bool], k: list[int], lists: list[ListT]) -> None:
        """keep -> the replica list of (sid, partition) becomes the given list; else it is dropped."""
        for p, kp, kk, entry in zip(parts, keep, k, lists):
            if kp:
                reps = self.state.get(sid, (0, {}))[1]
                reps[p] = (np.array(entry[0]), np.array(entry[1]), np.array(entry[2]))
                self.state[sid] = (kk, reps)
            elif sid in self.state:
                reps = self.state[sid][1]
                reps.pop(p, None)
                if not reps:
                    del self.state[sid]


def _repeated(ids: np.ndarray) -> np.ndarray:
    """Mask of the positions whose id occurs more than once."""
    if len(ids) == 0:
        return np.zeros(0, bool)
    uniq, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
    return counts[inverse] > 1


def _entries(ptr: np.ndarray, cols: tuple, row: int) -> ListT:
    lo, hi = ptr[row], ptr[row + 1]
    return cols[0][lo:hi], cols[1][lo:hi], cols[2][lo:hi]


def _pack_rows(sub: list[int], part: list[int], keep: list[bool], k: list[int], lists: list[ListT],
               snapshot: bool = False) -> bytes:
    lengths = np.array([len(entry[0]) for entry in lists], np.int64)
    ptr = np.zeros(len(lists) + 1, np.int64)
    np.cumsum(lengths, out=ptr[1:])
    nonempty = [entry for entry in lists if len(entry[0])]
    cols: dict[str, np.ndarray] = {
        "sub": np.array(sub, np.int64), "partition": np.array(part, np.int32), "keep": np.array(keep, bool),
        "k": np.array(k, np.int64), "ptr": ptr,
        "id": np.concatenate([e[0] for e in nonempty]).astype(np.int64) if nonempty else np.zeros(0, np.int64),
        "score": np.concatenate([e[1] for e in nonempty]).astype(np.float64) if nonempty else np.zeros(0),
        "seq": np.concatenate([e[2] for e in nonempty]).astype(np.int64) if nonempty else np.zeros(0, np.int64),
    }
    if snapshot:
        cols["snapshot"] = np.ones(1, bool)
    return codec.pack(**cols)

