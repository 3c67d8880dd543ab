"""The results of ``serve --engine spark``, folded from the Spark job's batch outputs (:mod:`skype.service.spark_backend`).

Each micro-batch's event files (``events/<method>/batch-<id>-part-*``, the schema of
:func:`skype.dskype.reports.events_schema`) are read as columns (:class:`BatchRows`) and folded,
in batch order, into every subscription's top-k (:class:`FoldedResults`), exactly as
:func:`skype.dskype.results.fold_events` folds them: ``created`` starts an empty top-k, ``left``
removes, ``entered`` adds, ``removed`` deletes; a subscription removed on one partition is
removed before its creation on another.  Invariant: a batch's events are, per subscription it
touched (ascending id), the net change of its top-k over the batch, numbered right after the
previous batch's events, so the seqs follow from the batch outputs alone and a restart that
folds the same batches gives every event the same seq.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from skype.dskype.results import ranked
from skype.service.events import EventBlock


class BatchRows:
    """One batch's event rows as columns (the event files' schema, :func:`skype.dskype.reports.events_schema`),
    in fold order: a subscription removed on one partition comes before its creation on another
    (:func:`skype.dskype.results.folded_results`)."""

    def __init__(self, tables: list) -> None:
        import pyarrow as pa

        table = pa.concat_tables(tables) if tables else None
        n = table.num_rows if table is not None else 0
        self.count = n
        if table is None or n == 0:
            self.sub = np.zeros(0, np.int64)
            return
        sub = table.column("sub").to_numpy()
        created = table.column("created").to_numpy(zero_copy_only=False)
        removed = table.column("removed").to_numpy(zero_copy_only=False)
        self.order = np.argsort(np.where(removed & ~created, 0, 1), kind="stable")
        self.sub, self.created, self.removed = sub, created, removed
        left = table.column("left").combine_chunks()
        self.left_ptr, self.left_ids = np.asarray(left.offsets, np.int64), np.asarray(left.values, np.int64)
        entered = table.column("entered").combine_chunks()
        entries = entered.values
        self.ent_ptr = np.asarray(entered.offsets, np.int64)
        self.ent_id = np.asarray(entries.field("id"), np.int64)
        self.ent_score = np.asarray(entries.field("score"), np.float64)
        self.ent_seq = np.asarray(entries.field("seq"), np.int64)


class FoldedResults:
    """Every subscription's top-k, folded from the batches' events (module docstring, 3):
    ``{sub: {message: (score, stream seq)}}``, the seq of the last event and the position of
    the last batch folded.

    A batch is folded in two steps, so that the engine thread (which answers the writes) does
    little: :meth:`prepare` (any thread, reading the entries only) computes the batch's new
    entries of every subscription it touched and its events; :meth:`commit` (the engine thread)
    puts them in place and numbers the events.  Batches are prepared and committed one at a
    time, in order."""

    def __init__(self) -> None:
        self.entries: dict[int, dict[int, tuple[float, int]]] = {}
        self.seq = 0
        self.batch = -1
        self.position = 0

    def result(self, sid: int) -> list:
        return ranked(self.entries.get(sid, {}))

    def topk_arrays(self, sub_ids: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rows = [self.result(int(s)) for s in np.asarray(sub_ids, np.int64).tolist()]
        indptr = np.zeros(len(rows) + 1, np.int64)
        np.cumsum([len(r) for r in rows], out=indptr[1:])
        ids = np.array([m.id for r in rows for m in r], np.int64)
        scores = np.array([m.score for r in rows for m in r], np.float64)
        return indptr, ids, scores

    def prepare(self, batch: int, rows: BatchRows, position: int) -> tuple | None:
        """The batch's new entries and its events (not numbered yet); None when folded already."""
        if batch <= self.batch:
            return None
        new: dict[int, dict[int, tuple[float, int]] | None] = {}
        created: set[int] = set()
        if rows.count:  # the columns as lists once: slicing lists is cheaper than slicing arrays per row
            sub_of, was_created, was_removed = rows.sub.tolist(), rows.created.tolist(), rows.removed.tolist()
            left_ptr_l, left_l = rows.left_ptr.tolist(), rows.left_ids.tolist()
            ent_ptr_l, ent_id_l = rows.ent_ptr.tolist(), rows.ent_id.tolist()
            ent_score_l, ent_seq_l = rows.ent_score.tolist(), rows.ent_seq.tolist()
        for r in (rows.order.tolist() if rows.count else []):
            sid = sub_of[r]
            if was_created[r]:
                created.add(sid)
                cur: dict[int, tuple[float, int]] = {}
            elif sid in new:
                cur = new[sid] or {}
            else:
                cur = dict(self.entries[sid]) if sid in self.entries else {}
            for m in left_l[left_ptr_l[r]:left_ptr_l[r + 1]]:
                cur.pop(m, None)
            lo, hi = ent_ptr_l[r], ent_ptr_l[r + 1]
            cur.update(zip(ent_id_l[lo:hi], zip(ent_score_l[lo:hi], ent_seq_l[lo:hi])))
            new[sid] = None if was_removed[r] else cur
        subs: list[int] = []
        ent_ids: list[int] = []
        ent_scores: list[float] = []
        ent_ptr, left_ptr, removed = [0], [0], []
        left_ids: list[int] = []
        for sid in sorted(new):
            old, now = self.entries.get(sid), new[sid]
            if now is None and old is None:
                continue
            if now is None:
                entered: list[int] = []
            elif old is None:  # every entry entered (a new subscription, or the first fold of it)
                entered = _ranked_ids(now)
            else:
                entered = [m for m in _ranked_ids(now) if m not in old or old[m][0] != now[m][0]]
            left = [] if old is None else [m for m in _ranked_ids(old) if now is None or m not in now]
            if not entered and not left and now is not None and old is not None and sid not in created:
                continue
            subs.append(sid)
            ent_ids += entered
            if now is not None:
                ent_scores += [now[m][0] for m in entered]
            left_ids += left
            ent_ptr.append(len(ent_ids))
            left_ptr.append(len(left_ids))
            removed.append(now is None)
        columns = (np.array(subs, np.int64), np.array(ent_ptr, np.int64), np.array(ent_ids, np.int64),
                   np.array(ent_scores, np.float64), np.array(left_ptr, np.int64), np.array(left_ids, np.int64),
                   np.array(removed, bool))
        return batch, position, new, columns

    def commit(self, prepared: tuple | None) -> EventBlock | None:
        """Put a prepared batch in place (engine thread); its events as one block (None: none)."""
        if prepared is None:
            return None
        batch, position, new, (subs, ent_ptr, ent_ids, ent_scores, left_ptr, left_ids, removed) = prepared
        if batch <= self.batch:
            return None
        for sid, entries in new.items():
            if entries is None:
                self.entries.pop(sid, None)
            else:
                self.entries[sid] = entries
        self.batch, self.position = batch, position
        if not len(subs):
            return None
        seq0 = self.seq + 1
        self.seq += len(subs)
        return EventBlock(seq0, subs, position, ent_ptr=ent_ptr, ent_ids=ent_ids, ent_scores=ent_scores,
                          left_ptr=left_ptr, left_ids=left_ids, removed=removed)

    def apply(self, batch: int, rows: BatchRows, position: int) -> EventBlock | None:
        """:meth:`prepare` then :meth:`commit` (one thread)."""
        return self.commit(self.prepare(batch, rows, position))


def _ranked_ids(entries: dict[int, tuple[float, int]]) -> list[int]:
    """The message ids of a top-k in ranking order (:func:`skype.dskype.results.ranked`'s: score
    descending, then the newer message first), without building its matches."""
    return sorted(entries, key=lambda m: (-entries[m][0], -entries[m][1]))
