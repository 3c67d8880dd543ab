"""Live rebalancing on the partitions: versioned ownership tables and the hand-over as a record transfer.

The adaptive methods (agrid, kdt, qt, aqwa: :mod:`skype.partitioning.units`) place a subscription
by *units* whose owner a rebalancing policy may change at runtime.  On Spark they run as follows
(the driver's half, deciding the moves, is :mod:`skype.dskype.rebalancing`):

* **Ownership is a pure function of the record and a table version**: subscription s belongs to
  ``owner[home_unit(s)]``, ``home_unit`` = the unit of its cell's region and its first term
  (:class:`UnitLocator`); one replica per subscription (``nrep = 1``).
* **Every message goes to every partition** (the router's ``everywhere`` mode), so every
  partition's window share is the whole window: a subscription registered anywhere, at any
  position, gets the global top-k at once.  **A command goes only to the owner of its record**
  under the version in force at the batch's start (:func:`owner_routed`: subscribes and
  unsubscribes carrying their record; id-only unsubscribes and results requests still go to
  every partition, which ignores an id it does not hold).  A partition keeps only what it owns:
  its hosted records and its pending commands (``hosted == owned(live, version in force)``), in
  memory and in its durable log; nothing grows with the pipeline's S.
* **Versions** are files ``version-<v>.pkl`` in the run directory (``DIR/rebalance/<method>/``),
  each written once (:func:`write_version`) by the driver after a batch, with the whole locator.
  Version 0 is the build.
* **Versions travel with the stream.**  When the source plans a batch it probes ``version-<v+1>``
  by name (no directory listing) and records the newest version in the batch's offset; Spark logs
  the offset before the batch runs.  Every input piece carries a control event with that
  *newest* version v and the version *in force* u, the start offset's (the previous batch's
  newest); the router routes the piece's commands under u and stamps every partition's row
  ``tables:<u>:<v>`` (:func:`skype.dskype.stamps.tables_stamp`).  A replayed batch has its
  first attempt's offsets, hence the same (u, v).  A partition without a stamp refuses the
  batch (E115); one that gets a command whose record u places elsewhere raises E117.
* **The hand-over** of a version v decided after batch b takes two batches:

  1. *announce* (batch b+1, stamped ``(u, v)``, ``v > u``): the batch runs under u; at its end
     each partition writes, once, the records it hosts and the pending commands it holds that v
     places elsewhere, grouped by new owner, as ``handover-<v>-from-<p>.pkl``
     (:func:`handover_path`, :meth:`Handover.announce`, :func:`~skype.dskype.files.write_once`; every partition
     writes its file, empty or not);
  2. *switch* (batch b+2, stamped ``(v, .)``): at its start, before any of its commands
     (they were routed under v), each partition reads exactly the P - 1 files ``(v, q)`` by name
     (no listing), unsubscribes the hosted records it lost, subscribes the records it gained
     over its window (the whole window at the switch position: the global top-k, exactly the
     list the old owner held), drops the pending commands it lost and adopts those it gained.
     Old and new owner report STATE rows of the subscription in the same batch to the same
     merge bucket, which nets them into the subscription's change in the batch: the switch
     itself emits nothing (:mod:`skype.dskype.merge`).

  A stamp may jump several versions (versions written faster than batches are planned): the
  intermediate ones are never in force, and the files are those of the newest.
* **Durable log.**  A partition's log holds the commands it received, and for each switch an
  entry ``(v, lo, records received, pending commands received)`` (:func:`switch_entry`) before
  the batch's commands; a snapshot records the version in force.  Replaying the log rebuilds the
  state exactly: at a switch entry, the pending commands due by ``lo`` first, then the records and
  commands v places elsewhere dropped (a pure function of the record and v) and the received
  ones added (:meth:`Handover.replay_switch`).  So a rebuilt partition (a lost cache, a lost
  executor, a restarted driver) reproduces the same state; a lost commit re-runs a batch from the
  committed state, which computes the same hand-over file (a duplicate attempt keeps the first)
  or reads the same files.  The driver removes a version's files once the batch that put it in
  force is committed (:meth:`skype.dskype.rebalancing.Rebalancer.after_batch`).

What a move costs: the records and pending commands that change owner, written once and read
once by their new owner (each new owner reads the P - 1 files of the version, in which its share
is one section), plus the re-registration of the received records over the window
(``handover_in``, ``handover_bytes``, ``handover_written``, ``handover_read_bytes``).
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from skype.errors import InputError, OperationalError
from skype.model import SubscriptionBatch, TermMatrix
from skype.partitioning.units import Grid, UnitDistribution, subscription_bytes
from skype.dskype import codec
from skype.dskype.codec import OP_SUB, OP_UNSUB, Commands, command_columns
from skype.dskype.files import write_once
from skype.dskype.stamps import stamped_tables
from skype.dskype.hosted import Hosted

_KEY = np.int64(1) << np.int64(32)  # region * 2^32 + term: the units' sorted key space
VERSION_PREFIX = "version-"


def routes_everywhere(dist) -> bool:
    """Whether the runtime sends every message of this distribution to every partition and each
    command to its record's owner under the versioned tables (the adaptive methods, module docstring)."""
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
    """Write a version once (:func:`~skype.dskype.files.write_once`; the decision is deterministic, so the first
    file is the one every reader must see).  Returns whether this call wrote it."""
    path = version_path(directory, table.version)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_once(path, pickle.dumps(table, protocol=pickle.HIGHEST_PROTOCOL))


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
                raise OperationalError("E064", path=self.directory, detail=f"{path.name}: {err}") from None
            if table.version != v:
                raise OperationalError("E064", path=self.directory, detail=f"{path.name} holds version {table.version}")
            self.tables.append(table)
        if not self.tables:
            raise OperationalError("E064", path=self.directory, detail="no version 0")
        return self.tables[:int(version) + 1]


HANDOVER_PREFIX = "handover-"


def handover_path(directory: str | Path, version: int, source: int) -> Path:
    """The records partition ``source`` hands over when ``version`` comes into force."""
    return Path(directory) / f"{HANDOVER_PREFIX}{int(version):06d}-from-{int(source):05d}.pkl"


def owner_routed(cmds: Commands) -> np.ndarray:
    """The commands that go to the owner of their record: subscribes, and unsubscribes that carry
    the record they remove (the others, id-only unsubscribes and results requests, go to every
    partition; a partition that does not hold the id ignores them)."""
    has_record = np.diff(cmds.subs.terms.indptr) > 0
    return (cmds.op == OP_SUB) | ((cmds.op == OP_UNSUB) & has_record)


class Handover:
    """A partition's ownership under the versioned tables, and the record transfer of a hand-over
    (module docstring): the partition keeps only what it owns, records and pending commands."""

    def __init__(self, directory: str, partition: int, num_partitions: int = 0) -> None:
        self.directory = directory
        self.partition = partition
        self._num_partitions = int(num_partitions)  # 0: the build's owners tell (every partition owns a unit)
        self.versions = VersionLog(directory)
        self.applied = 0  # the version in force in the partition's state
        self.metrics = self._zero()

    @staticmethod
    def _zero() -> dict:
        return {"handover_in": 0, "handover_out": 0, "handover_bytes": 0, "handover_versions": 0,
                "handover_written": 0, "handover_read_bytes": 0, "handover_pending_in": 0}

    def stamped(self, stamps) -> tuple[int, int]:
        """(in force, newest): the table versions a batch's routed rows carry (E115 without)."""
        pair = stamped_tables(stamps)
        if pair is None:
            raise InputError("E115", partition=self.partition)
        return pair

    def owners(self, subs: SubscriptionBatch, version: int) -> np.ndarray:
        return self.versions.upto(version)[version].locator.home_partitions(subs)

    def _foreign(self, cmds: Commands, version: int) -> np.ndarray:
        """Rows of ``cmds`` routed by their record whose owner under ``version`` is elsewhere."""
        routed = np.flatnonzero(owner_routed(cmds))
        if not len(routed):
            return routed
        owners = self.owners(cmds.subs.take(routed), version)
        return routed[owners != self.partition]

    def check(self, cmds: Commands) -> None:
        """Every owner-routed command that reaches this partition is its own under the version in
        force (a routing fault otherwise: E117)."""
        bad = self._foreign(cmds, self.applied)
        if len(bad):
            j = int(bad[0])
            owner = int(self.owners(cmds.subs.take(np.array([j])), self.applied)[0])
            raise InputError("E117", partition=self.partition, sub=int(cmds.subs.ids[j]), version=self.applied,
                             owner=owner)

    # ------------------------------------------------------------------ the switch (batch start)
    def switch(self, hosted: Hosted, pending: Commands, stamp: tuple[int, int],
               lo: int) -> tuple[Commands, Commands, bytes | None]:
        """At the start of a batch whose in-force version ``stamp[0]`` is newer than the applied
        one: the hand-over rows (unsubscribes of the hosted ids this partition loses, subscribes
        of the records it gains, read from the named files the old owners wrote), the new pending
        commands (those it loses dropped, those it gains added) and the durable log entry of the
        switch.  ``hosted`` is not changed: the batch's loop applies the rows."""
        self.metrics = self._zero()
        target = stamp[0]
        if target <= self.applied:
            return Commands.empty(), pending, None
        self.versions.upto(target)
        gained_records, gained_pending = self._read(target)
        ids = sorted(hosted.rows)
        lost = np.zeros(0, np.int64)
        if ids:
            owners = self.owners(hosted.batch(ids), target)
            lost = np.array(ids, np.int64)[owners != self.partition]
        keep = np.setdiff1d(np.arange(len(pending)), self._foreign(pending, target))
        pending = Commands.concat([pending.take(keep), gained_pending])
        self.applied = target
        self.metrics["handover_versions"] += 1
        self.metrics["handover_out"] += len(lost)
        self.metrics["handover_in"] += len(gained_records)
        self.metrics["handover_pending_in"] += len(gained_pending)
        if len(gained_records):
            sizes = subscription_bytes(gained_records.subs.terms.lengths(), gained_records.subs.k)
            self.metrics["handover_bytes"] += int(sizes.sum())
        n = len(lost)
        z = np.zeros(n)
        drops = Commands(np.full(n, -1, np.int64), np.full(n, -1, np.int64), np.full(n, OP_UNSUB, np.int8),
                         SubscriptionBatch(lost, z, z, np.zeros(n, np.int64), z, TermMatrix(np.zeros(n + 1, np.int64), np.zeros(0, np.int64), np.zeros(0))),
                         np.ones(n, np.int32))
        m = len(gained_records)
        gains = Commands(np.full(m, -1, np.int64), np.full(m, -1, np.int64), np.full(m, OP_SUB, np.int8),
                         gained_records.subs, np.ones(m, np.int32), gained_records.spec)
        entry = switch_entry(target, lo, gained_records, gained_pending)
        return Commands.stack([drops, gains]), pending, entry

    def _read(self, version: int) -> tuple[Commands, Commands]:
        """The records and pending commands the other partitions hand this one at ``version``:
        exactly the files ``(version, q)``, by name (every partition writes its file, empty or
        not, in the batch that announces the version)."""
        records, pending = [], []
        for q in range(self.num_partitions()):
            if q == self.partition:
                continue
            path = handover_path(self.directory, version, q)
            try:
                blob = path.read_bytes()
                sections = pickle.loads(blob)
            except (OSError, pickle.UnpicklingError, EOFError) as err:
                raise OperationalError("E116", version=version, sender=q, path=self.directory, detail=str(err)) from None
            self.metrics["handover_read_bytes"] += len(blob)
            mine = sections.get(self.partition)
            if mine is not None:
                records.append(Commands.unpack(mine[0]))
                pending.append(Commands.unpack(mine[1]))
        return Commands.stack(records), Commands.concat(pending)

    def num_partitions(self) -> int:
        """The pipeline's partitions: every one writes a file per version it announces."""
        if self._num_partitions <= 0:
            self._num_partitions = int(self.versions.upto(0)[0].locator.owner.max()) + 1
        return self._num_partitions

    # ------------------------------------------------------------------ the announce (batch end)
    def announce(self, hosted: Hosted, pending: Commands, stamp: tuple[int, int]) -> bool:
        """At the end of the batch that announces version ``stamp[1]`` (newer than the one in
        force): write, once, the records and pending commands this partition loses under it,
        grouped by their new owner (:func:`~skype.dskype.files.write_once`: a duplicate attempt, which computes the
        same file from the same committed state, keeps the first).  Returns whether it wrote."""
        target = stamp[1]
        if target <= self.applied:
            return False
        self.versions.upto(target)
        sections: dict[int, tuple[bytes, bytes]] = {}
        ids = sorted(hosted.rows)
        rec_owner = self.owners(hosted.batch(ids), target) if ids else np.zeros(0, np.int64)
        records = hosted.as_commands()  # sorted ids, like ``ids``
        routed = np.flatnonzero(owner_routed(pending))
        pend_owner = np.full(len(pending), self.partition, np.int64)
        if len(routed):
            pend_owner[routed] = self.owners(pending.subs.take(routed), target)
        for q in sorted(set(rec_owner.tolist()) | set(pend_owner.tolist())):
            if q != self.partition:
                sections[int(q)] = (records.take(np.flatnonzero(rec_owner == q)).pack(),
                                    pending.take(np.flatnonzero(pend_owner == q)).pack())
        wrote = write_once(handover_path(self.directory, target, self.partition),
                           pickle.dumps(sections, protocol=pickle.HIGHEST_PROTOCOL))
        self.metrics["handover_written"] += int((rec_owner != self.partition).sum())
        return wrote

    # ------------------------------------------------------------------ rebuild
    def replay_switch(self, hosted: Hosted, pending: Commands, cols: dict) -> Commands:
        """Replay a switch entry of the durable log onto a rebuilt partition's hosted set (in
        place) and pending commands (returned): drop what the version places elsewhere, add what
        the entry says was received."""
        target = int(cols["switch"][0])
        ids = sorted(hosted.rows)
        if ids:
            owners = self.owners(hosted.batch(ids), target)
            for sid, q in zip(ids, owners.tolist()):
                if q != self.partition:
                    hosted.remove(sid)
        gained = Commands.from_columns({k[len("rec_"):]: v for k, v in cols.items() if k.startswith("rec_")})
        for j in range(len(gained)):
            hosted.add_from(gained, j)
        keep = np.setdiff1d(np.arange(len(pending)), self._foreign(pending, target))
        pending = Commands.concat([pending.take(keep), Commands.from_columns(
            {k[len("pen_"):]: v for k, v in cols.items() if k.startswith("pen_")})])
        self.applied = target
        return pending


def switch_entry(version: int, lo: int, records: Commands, pending: Commands) -> bytes:
    """The durable log entry of a switch: the version that came into force at the start of the
    batch whose first position is ``lo``, the records and pending commands received."""
    return codec.pack(switch=np.array([version], np.int64), lo=np.array([lo], np.int64),
                      **command_columns(records, "rec_"), **command_columns(pending, "pen_"))
