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
  written atomically by the driver after batch b and before batch b+1 starts, each with its
  *effective position* ``e = h_b + 1`` (b's high-water mark + 1) and the whole locator (owners and,
  for AQWA, the changed tree).  Version 0 is the build.  A partition applies version v in the first
  batch whose messages reach ``e`` (``e <= hwm``), after the commands positioned at ``e`` or before
  and before message ``e``: a re-run of batch b (``hwm = h_b < e``) never applies it.
* **The hand-over** at ``e``: a partition that loses s unsubscribes it (silently, it is in the
  batch's command-touched set), the one that gains s subscribes it from its ledger record; its
  engine scores s over its window share, the whole window, so the new replica's list is the global
  top-k at ``e`` exactly.  Both report STATE rows in the same batch to the same merge bucket,
  which merges them into the subscription's net change in the batch: no event comes from the
  switch itself (:mod:`skype.dskype.merge`).
* **Restart.**  The versions are files of the run directory, so a batch Spark re-runs sees the
  same files and applies the same versions at the same positions.  A rebuilt partition replays its
  command log into the ledger and takes ``owned(ledger, newest version with e <= hwm)``: the
  invariant makes the hosted set independent of the order in which the log is replayed.

What a move costs here: nothing crosses the network at the move (records and window are already
everywhere); the price is paid before, P copies of every message and command.  The metrics count
the state the new owners take over (record, terms, top-k entries: ``handover_bytes``).
"""

from __future__ import annotations

import os
import pickle
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


def write_version(directory: str | Path, table: TableVersion) -> None:
    """Write a version atomically (a batch that re-runs finds the same file)."""
    path = version_path(directory, table.version)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        pickle.dump(table, fh, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)


class VersionLog:
    """The versions of a run directory, loaded once each (a directory listing per batch)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.tables: list[TableVersion] = []

    def refresh(self) -> list[TableVersion]:
        try:
            names = sorted(n for n in os.listdir(self.directory) if n.startswith(VERSION_PREFIX) and n.endswith(".pkl"))
        except OSError as err:
            raise InputError("E064", path=self.directory, detail=str(err)) from None
        for name in names[len(self.tables):]:
            try:
                with open(os.path.join(self.directory, name), "rb") as fh:
                    table = pickle.load(fh)
            except (OSError, pickle.UnpicklingError, EOFError) as err:
                raise InputError("E064", path=self.directory, detail=f"{name}: {err}") from None
            if table.version != len(self.tables):
                raise InputError("E064", path=self.directory, detail=f"{name} holds version {table.version}")
            self.tables.append(table)
        if not self.tables:
            raise InputError("E064", path=self.directory, detail="no version 0")
        return self.tables

    def in_force(self, position: int) -> int:
        """The newest version whose effective position is at most ``position``."""
        tables = self.refresh()
        v = 0
        while v + 1 < len(tables) and tables[v + 1].effective <= position:
            v += 1
        return v


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

    def _mine(self, subs: SubscriptionBatch, version: int) -> np.ndarray:
        return self.versions.tables[version].locator.home_partitions(subs) == self.partition

    def resolve(self, due: Commands, positions: np.ndarray, upto: int) -> tuple[Commands, np.ndarray]:
        """The rows this partition applies to its hosted set, in order, from the pipeline's due
        commands (sorted by position): its own subscribes, unsubscribes of ids it hosts, a
        subscribe of an id it hosts that now belongs elsewhere as an unsubscribe, and at each
        version that comes into force (``effective <= upto``) the hand-over rows.  Updates the
        ledger.  Returns (rows, their positions)."""
        self.metrics = self._zero()
        tables = self.versions.refresh()
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

    def adopt(self, ledger, hwm_seq: int):
        """After a rebuild replayed the command log into ``ledger`` (every record): the version
        in force at ``hwm_seq`` and the hosted set it implies (the invariant)."""
        self.ledger = ledger
        self.applied = self.versions.in_force(hwm_seq)
        ids = sorted(ledger.rows)
        hosted = Hosted()
        if ids:
            mine = self._mine(ledger.batch(ids), self.applied)
            for j in np.flatnonzero(mine).tolist():
                hosted.rows[ids[j]] = ledger.rows[ids[j]]
                hosted.inverse += 1.0
        self.owned = set(hosted.rows)
        return hosted
