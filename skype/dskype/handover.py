"""Live rebalancing on the partitions: versioned ownership tables and the hand-over of subscriptions.

The adaptive methods (agrid, kdt, qt, aqwa: :mod:`skype.partitioning.units`) place a subscription
by *units* whose owner a rebalancing policy may change at runtime.  On Spark they run as follows
(the driver's half, deciding the moves, is :mod:`skype.dskype.rebalancing`):

* **Every partition receives every message and every command** of the pipeline (the router's
  ``everywhere`` mode, :func:`routes_everywhere`).  So every partition's window share is the whole
  window, and every partition keeps the *ledger*: every live subscription record of the pipeline
  (ids, records, pending commands: the existing durable log, unchanged).
* **Ownership is a pure function of the record and the table version in force**: subscription s
  belongs to ``owner[home_unit(s)]``, ``home_unit`` = the unit of its cell's region and its first
  term (:class:`UnitLocator`).  A partition hosts in its engine exactly the ledger records it owns
  under the version in force (the invariant ``hosted == owned(ledger, version)``); one replica per
  subscription (``nrep = 1``), so each replica's list is the global top-k.
* **Versions** are files ``version-<v>.pkl`` in the run directory (``DIR/rebalance/<method>/``),
  written by the driver after batch b and before batch b+1 starts (each once: a duplicate
  attempt finds the file and keeps it, :func:`write_version`), each with its *effective position*
  ``e = h_b + 1`` (b's high-water mark + 1) and the whole locator (owners and, for AQWA, the
  changed tree).  Version 0 is the build.
* **The version travels with the stream.**  Which versions a batch may use is decided once, on
  the driver, when the source plans the batch: :func:`newest_version` probes ``version-<v+1>``
  by name (no directory listing), the number goes into the source's offset
  (:class:`skype.spark.sources.PairedStreamReader`, ``"tables"``), and Spark logs that offset
  before the batch runs, so a replayed batch reads its first attempt's number.  The reader puts
  it in every input piece as a control event (``KIND_TABLES``), the router stamps every routed
  row with it (``tables:<v>``, :func:`skype.dskype.routing.tables_stamp`), and a partition loads
  exactly the files ``0..v`` by name.  It applies version ``w <= v`` in the first batch whose
  messages reach ``e_w`` (``e_w <= hwm``), after the commands positioned at ``e_w`` or before
  and before message ``e_w``: a re-run of batch b (``hwm = h_b < e``) never applies it.
* **The hand-over** at ``e``: a partition that loses s unsubscribes it (silently, it is in the
  batch's command-touched set), the one that gains s subscribes it from its ledger record; its
  engine scores s over its window share, the whole window, so the new replica's list is the global
  top-k at ``e`` exactly.  Both report STATE rows in the same batch to the same merge bucket,
  which merges them into the subscription's net change in the batch: no event comes from the
  switch itself (:mod:`skype.dskype.merge`).
* **Restart.**  A batch Spark re-runs carries the version number of its first attempt, and a
  version file, once written, never changes, so it applies the same versions at the same
  positions.  A rebuilt partition replays its command log into the ledger and takes
  ``owned(ledger, newest version w <= v with e_w <= hwm)`` (``v``: the batch's stamp; a version
  newer than the committed batch's was decided after it, so its ``e`` exceeds the committed
  ``hwm``): the invariant makes the hosted set independent of the order in which the log is
  replayed.

What a move costs here: nothing crosses the network at the move (records and window are already
everywhere); the price is paid before, P copies of every message and command.  The metrics count
the state the new owners take over (record, terms, top-k entries: ``handover_bytes``).
"""

from __future__ import annotations

import os
import pickle
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from skype.errors import InputError
from skype.model import SubscriptionBatch
from skype.partitioning.units import Grid, UnitDistribution, subscription_bytes
from skype.dskype.codec import OP_SUB, OP_UNSUB, Commands
from skype.dskype.hosted import Hosted

_KEY = np.int64(1) << np.int64(32)  # region * 2^32 + term: the units' sorted key space
VERSION_PREFIX = "version-"


def routes_everywhere(dist) -> bool:
    """Whether the runtime sends every message and command of this distribution to every
    partition (the adaptive methods: ownership is decided at the partitions, module docstring)."""
    return dist.capabilities.routes_everywhere


@dataclass(frozen=True)
class UnitLocator:
    """The tables that place a subscription on its home partition (a unit distribution without
    its subscriptions and statistics)."""

    grid: Grid
    cell_region: np.ndarray
    region_unit0: np.ndarray
    region_cut0: np.ndarray
    cut_keys: np.ndarray
    owner: np.ndarray

    @classmethod
    def of(cls, dist: UnitDistribution) -> UnitLocator:
        return cls(dist.grid, dist.cell_region.copy(), dist.region_unit0.copy(), dist.region_cut0.copy(),
                   dist.cut_keys.copy(), dist.owner.astype(np.int32).copy())

    def home_units(self, subs: SubscriptionBatch) -> np.ndarray:
        """The unit of each subscription's region and first term (group 0 without terms)."""
        region = self.cell_region[self.grid.cell_of(subs.x, subs.y)]
        lengths = subs.terms.lengths()
        first = np.where(lengths > 0, subs.terms.ids[np.minimum(subs.terms.indptr[:-1], len(subs.terms.ids) - 1)]
                         if len(subs.terms.ids) else 0, 0).astype(np.int64)
        units = self.region_unit0[region]
        if len(self.cut_keys):
            keys = region * _KEY + first
            group = np.searchsorted(self.cut_keys, keys, side="right") - self.region_cut0[region]
            units = np.where(lengths > 0, units + group, units)
        return units

    def home_partitions(self, subs: SubscriptionBatch) -> np.ndarray:
        return self.owner[self.home_units(subs)].astype(np.int64)


@dataclass(frozen=True)
class TableVersion:
    """One version of the ownership tables: in force from message position ``effective``."""

    version: int
    effective: int
    after_batch: int
    locator: UnitLocator


def version_path(directory: str | Path, version: int) -> Path:
    return Path(directory) / f"{VERSION_PREFIX}{version:06d}.pkl"


def write_version(directory: str | Path, table: TableVersion) -> bool:
    """Write a version once (:func:`write_once`; the decision is deterministic, so the first
    file is the one every reader must see).  Returns whether this call wrote it."""
    path = version_path(directory, table.version)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_once(path, pickle.dumps(table, protocol=pickle.HIGHEST_PROTOCOL))


def _attempt_tmp(path: Path) -> Path:
    """A temporary name unique to this attempt (a speculative or zombie attempt has its own)."""
    return path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")


def write_once(path: Path, blob: bytes) -> bool:
    """Commit ``blob`` as ``path`` unless an attempt did first: written under a temporary name
    unique to this attempt, then linked to its final name (``os.link`` fails on an existing
    name, so two attempts never tear or replace each other's file).  Returns whether this call
    committed it."""
    if path.exists():
        return False
    tmp = _attempt_tmp(path)
    with open(tmp, "wb") as fh:
        fh.write(blob)
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)


def write_replacing(path: Path, blob: bytes) -> None:
    """Commit ``blob`` as ``path``, replacing it atomically (a re-run's record of the same
    decision), from a temporary name unique to this attempt."""
    tmp = _attempt_tmp(path)
    with open(tmp, "wb") as fh:
        fh.write(blob)
    os.replace(tmp, path)


def newest_version(directory: str | Path, known: int = 0) -> int:
    """The newest version written, probed by name from ``known`` on (versions are numbered
    without gaps); -1 when not even version 0 is there.  Called where a batch is planned: its
    answer is recorded in the source's offset (module docstring)."""
    v = max(int(known), 0)
    if not version_path(directory, v).exists():
        return -1 if v == 0 else v - 1  # a known version never disappears: an unreadable directory
    while version_path(directory, v + 1).exists():
        v += 1
    return v


class VersionLog:
    """The versions ``0..v`` of a run directory, each loaded once, by name."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.tables: list[TableVersion] = []

    def upto(self, version: int) -> list[TableVersion]:
        """The versions ``0..version`` (loaded by name; a missing one is an error, ``E064``)."""
        for v in range(len(self.tables), int(version) + 1):
            path = version_path(self.directory, v)
            try:
                with open(path, "rb") as fh:
                    table = pickle.load(fh)
            except (OSError, pickle.UnpicklingError, EOFError) as err:
                raise InputError("E064", path=self.directory, detail=f"{path.name}: {err}") from None
            if table.version != v:
                raise InputError("E064", path=self.directory, detail=f"{path.name} holds version {table.version}")
            self.tables.append(table)
        if not self.tables:
            raise InputError("E064", path=self.directory, detail="no version 0")
        return self.tables[:int(version) + 1]

    def in_force(self, position: int, version: int) -> int:
        """The newest version ``w <= version`` whose effective position is at most ``position``."""
        tables = self.upto(version)
        w = 0
        while w + 1 < len(tables) and tables[w + 1].effective <= position:
            w += 1
        return w


class Handover:
    """A partition's ledger and its ownership under the versioned tables (module docstring)."""

    def __init__(self, directory: str, partition: int) -> None:
        self.partition = partition
        self.versions = VersionLog(directory)
        self.ledger = Hosted()  # every live record of the pipeline
        self.owned: set[int] = set()  # the ids this partition hosts (== its Hosted set)
        self.applied = 0  # the version in force
        self.metrics = self._zero()

    @staticmethod
    def _zero() -> dict:
        return {"handover_in": 0, "handover_out": 0, "handover_bytes": 0, "handover_versions": 0}

    def stamped(self, stamps) -> int:
        """The table version a batch's routed rows carry (E115 without: module docstring)."""
        from skype.dskype.routing import stamped_tables  # routing imports this module

        version = stamped_tables(stamps)
        if version is None:
            raise InputError("E115", partition=self.partition)
        return version

    def _mine(self, subs: SubscriptionBatch, version: int) -> np.ndarray:
        return self.versions.tables[version].locator.home_partitions(subs) == self.partition

    def resolve(self, due: Commands, positions: np.ndarray, upto: int,
                version: int) -> tuple[Commands, np.ndarray]:
        """The rows this partition applies to its hosted set, in order, from the pipeline's due
        commands (sorted by position): its own subscribes, unsubscribes of ids it hosts, a
        subscribe of an id it hosts that now belongs elsewhere as an unsubscribe, and at each
        version up to the batch's stamp ``version`` that comes into force (``effective <= upto``)
        the hand-over rows.  Updates the ledger.  Returns (rows, their positions)."""
        self.metrics = self._zero()
        tables = self.versions.upto(max(version, self.applied))
        coming = [v for v in range(self.applied + 1, len(tables)) if tables[v].effective <= upto]
        parts: list[Commands] = []
        pos_parts: list[np.ndarray] = []
        start = 0
        for v in coming + [None]:
            end = len(due) if v is None else int(np.searchsorted(positions, tables[v].effective, side="right"))
            if end > start:
                rows = np.arange(start, end)
                out, keep = self._commands(due.take(rows))
                parts.append(out)
                pos_parts.append(positions[rows][keep])
            start = end
            if v is not None:
                out = self._switch(v)
                parts.append(out)
                pos_parts.append(np.full(len(out), tables[v].effective, np.int64))
        rows_out = Commands.stack(parts)
        return rows_out, (np.concatenate(pos_parts) if pos_parts else np.zeros(0, np.int64))

    def _commands(self, cmds: Commands) -> tuple[Commands, np.ndarray]:
        mine = self._mine(cmds.subs, self.applied)
        keep = np.zeros(len(cmds), bool)
        op = cmds.op.copy()
        for j in range(len(cmds)):
            sid = int(cmds.subs.ids[j])
            if cmds.op[j] == OP_SUB:
                self.ledger.add_from(cmds, j)
                if mine[j]:
                    keep[j] = True
                    self.owned.add(sid)
                    continue
            else:
                self.ledger.remove(sid)
            if sid in self.owned:  # it leaves this partition (unsubscribed, or its new record is elsewhere)
                keep[j] = True
                op[j] = OP_UNSUB
                self.owned.discard(sid)
        rows = np.flatnonzero(keep)
        out = Commands(cmds.cseq[rows], cmds.at[rows], op[rows], cmds.subs.take(rows), np.ones(len(rows), np.int32),
                       cmds.spec[rows])
        return out, rows

    def _switch(self, version: int) -> Commands:
        """The hand-over rows of a version coming into force: unsubscribes of the ids this
        partition loses, subscribes (from the ledger) of those it gains."""
        ids = sorted(self.ledger.rows)
        self.applied = version
        self.metrics["handover_versions"] += 1
        if not ids:
            return Commands.empty()
        batch = self.ledger.batch(ids)
        mine = self._mine(batch, version)
        held = np.fromiter((i in self.owned for i in ids), bool, len(ids))
        gained, lost = np.flatnonzero(mine & ~held), np.flatnonzero(~mine & held)
        rows = np.r_[lost, gained]
        op = np.r_[np.full(len(lost), OP_UNSUB, np.int8), np.full(len(gained), OP_SUB, np.int8)]
        for j in lost.tolist():
            self.owned.discard(ids[j])
        for j in gained.tolist():
            self.owned.add(ids[j])
        self.metrics["handover_out"] += len(lost)
        self.metrics["handover_in"] += len(gained)
        if len(gained):
            sizes = subscription_bytes(batch.terms.lengths()[gained], batch.k[gained])
            self.metrics["handover_bytes"] += int(sizes.sum())
        n = len(rows)
        spec = np.array([self.ledger.spec(ids[j]) for j in rows.tolist()], object)
        return Commands(np.full(n, -1, np.int64), np.full(n, -1, np.int64), op, batch.take(rows),
                        np.ones(n, np.int32), spec)

    def adopt(self, ledger, hwm_seq: int, version: int):
        """After a rebuild replayed the command log into ``ledger`` (every record): the version
        in force at ``hwm_seq`` among ``0..version`` (the stamp of the batch that rebuilds) and
        the hosted set it implies (the invariant)."""
        self.ledger = ledger
        self.applied = self.versions.in_force(hwm_seq, version)
        ids = sorted(ledger.rows)
        hosted = Hosted()
        if ids:
            mine = self._mine(ledger.batch(ids), self.applied)
            for j in np.flatnonzero(mine).tolist():
                hosted.rows[ids[j]] = ledger.rows[ids[j]]
                hosted.inverse += 1.0
        self.owned = set(hosted.rows)
        return hosted
