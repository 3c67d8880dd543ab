"""Screening stream records before they are routed: poison records out of the stream, into dead letters.

A record the engine would reject raises inside the partition's engine host, and Spark would
replay the same offsets forever; so the router (:func:`skype.dskype.routing.route_arrow`), and
whatever reads the stream back as the router sees it (:class:`skype.spark.backfill.BackfillSource`),
first runs :func:`screen`: the engine's own boundary checks (:mod:`skype.validate`), one
vectorised pass per batch, record by record only for a batch that fails it.  A rejected record
keeps its position (the stream's numbering does not change) and is written to the run's dead
letters (:func:`write_dead_letters`), once even when Spark re-runs the batch.  An unsubscribe whose
carried record is bad keeps its id (it then goes to every partition).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from skype.errors import InputError
from skype.model import MessageBatch
from skype.dskype.codec import OP_QUERY, OP_SUB, Commands
from skype.dskype.files import write_replacing
from skype.dskype.snapshots import query_error


def occurrence(ids: np.ndarray) -> np.ndarray:
    """For each position, how many earlier positions hold the same id."""
    order = np.argsort(ids, kind="stable")
    s = ids[order]
    starts = np.r_[True, s[1:] != s[:-1]] if len(s) else np.zeros(0, bool)
    group_start = np.maximum.accumulate(np.where(starts, np.arange(len(s)), 0)) if len(s) else np.zeros(0, np.int64)
    occ = np.empty(len(ids), np.int64)
    occ[order] = np.arange(len(s)) - group_start
    return occ


def screen(messages: MessageBatch, seq: np.ndarray, commands: Commands, bounds) -> tuple:
    """Keep the records the engine accepts; return ``(messages, seq, commands, dead)`` where
    ``dead`` lists the rejected ones (``kind, position, id, code, error``).

    The checks are the engine's own boundary checks (:mod:`skype.validate`): one vectorised pass
    per batch; only a batch that fails it is checked record by record.  A rejected record is left
    out of the stream (it would raise inside the engine host, and Spark would replay the same
    offsets forever).  An unsubscribe whose carried record is bad keeps its id (it goes to every
    partition)."""
    from skype.model import Bounds
    from skype.validate import check_message_batch, check_subscription_batch

    b = bounds if isinstance(bounds, Bounds) else Bounds(*bounds)
    dead: list[dict] = []
    if len(messages):
        try:
            check_message_batch(messages, b, -np.inf)
        except InputError:
            keep, last_t = [], -np.inf
            for j in range(len(messages)):
                try:
                    check_message_batch(messages.take(np.array([j])), b, last_t)
                except InputError as err:
                    dead.append(_dead("message", int(seq[j]), int(messages.ids[j]), err))
                    continue
                keep.append(j)
                last_t = float(messages.t[j])
            rows = np.array(keep, np.int64)
            messages, seq = messages.take(rows), seq[rows]
    if len(commands):
        has_record = np.diff(commands.subs.terms.indptr) > 0
        asked = np.flatnonzero(commands.op == OP_QUERY)
        # the spec the driver compiles when it stages a query (skype.dskype.snapshots), whole
        why = {j: query_error(commands.spec[j]) for j in asked.tolist()}
        bad = [j for j, reason in why.items() if reason is not None]
        for j in bad:
            dead.append(_dead("command", int(commands.cseq[j]), int(commands.subs.ids[j]),
                              InputError("E138", where="a query command", reason=why[j])))
        if bad:
            commands = commands.take(np.setdiff1d(np.arange(len(commands)), bad))
        sub = commands.op == OP_SUB
        # kind records (a spec) were validated when compiled (skype.dskype.kinds); their rows need no terms
        checked = np.flatnonzero((sub | has_record) & np.equal(commands.spec, np.array(None, object)))
        try:
            occ = occurrence(commands.subs.ids[checked])
            for r in range(int(occ.max(initial=-1)) + 1):  # rounds of distinct ids
                check_subscription_batch(commands.subs.take(checked[occ == r]), b)
        except InputError:
            drop, strip = [], []
            for j in checked.tolist():
                try:
                    check_subscription_batch(commands.subs.take(np.array([j])), b)
                except InputError as err:
                    if sub[j]:
                        dead.append(_dead("command", int(commands.cseq[j]), int(commands.subs.ids[j]), err))
                        drop.append(j)
                    else:
                        strip.append(j)
            if strip:
                commands = _strip_records(commands, np.array(strip, np.int64))
            if drop:
                commands = commands.take(np.setdiff1d(np.arange(len(commands)), drop))
    return messages, seq, commands, dead


def _dead(kind: str, position: int, record_id: int, err: InputError) -> dict:
    return {"kind": kind, "position": position, "id": record_id, "code": err.code, "error": str(err)}


def _strip_records(commands: Commands, rows: np.ndarray) -> Commands:
    """The same commands, the given rows without their record (id only)."""
    from skype.dskype.staging import _id_only

    parts = []
    is_stripped = np.zeros(len(commands), bool)
    is_stripped[rows] = True
    for j in range(len(commands)):
        one = commands.take(np.array([j]))
        if is_stripped[j]:
            one = Commands(one.cseq, one.at, one.op, _id_only(int(one.subs.ids[0])), one.nrep, one.spec)
        parts.append(one)
    return Commands.concat(parts)


def write_dead_letters(directory: str, dead: list[dict]) -> None:
    """One JSONL file per (kind, first position) of a routed batch, replaced atomically: a batch
    Spark re-runs rewrites its own file, so a dead letter is recorded once."""
    import json

    by_kind: dict[str, list[dict]] = {}
    for d in dead:
        by_kind.setdefault(d["kind"], []).append(d)
    os.makedirs(directory, exist_ok=True)
    for kind, rows in by_kind.items():
        path = os.path.join(directory, f"{kind}-{min(r['position'] for r in rows):012d}.jsonl")
        # a temporary name unique to the attempt; a duplicate attempt replaces the file whole
        write_replacing(Path(path), "".join(json.dumps(r) + "\n" for r in rows).encode("utf-8"))
