"""Routing a micro-batch to subscription partitions (the map before the stateful operator).

Input: rows of the unified *stream event* schema (:data:`EVENT_FIELDS`): messages (``kind`` 0,
``seq`` = global position) and subscription commands (``kind`` 1 subscribe / 2 unsubscribe,
``seq`` = command ordinal ``cseq``, ``at`` = position in the message stream or -1; ``spec``: the
compiled query of a range/knn/terms subscribe, :mod:`skype.dskype.kinds`).  Output: at most
one row per partition and input Arrow batch, ``(key, hwm_seq, hwm_t, messages, commands)``:

* ``messages``: the batch's messages routed to the partition, packed (:mod:`skype.dskype.codec`);
* ``commands``: its commands, each only where it acts: a subscribe goes to the partitions the
  method places it on (with ``nrep`` = how many); an unsubscribe that carries the record it removes
  goes to that record's placement (placement is a pure function of the record and the
  distribution's build-time tables, so it is *derived*, never looked up); an unsubscribe that
  carries only its id goes to every partition (P copies, the fallback for producers that do not
  know the record), and so does a results request.  A re-subscription of a live id must be
  preceded by an unsubscribe carrying the old record (staging writes one,
  :mod:`skype.dskype.staging`).  The cost of a batch of commands is therefore the sum of their
  placements, never commands x P;
* the adaptive methods (agrid, kdt, qt, aqwa) route in the ``everywhere`` mode: every message to
  every partition, and each subscribe (or unsubscribe carrying its record) only to the owner of
  its record under the table version in force at the batch's start; id-only unsubscribes and
  results requests to every partition (:mod:`skype.dskype.handover`: a hand-over transfers the
  records and pending commands of the units that move).  Which table versions a batch uses comes
  with the stream: a control event (``KIND_TABLES``, ``id`` = the pipeline, ``seq`` = the newest
  version the source's offset recorded, ``at`` = the one in force, the start offset's) first in
  every input piece; the router routes the piece's commands under the version in force, stamps
  each of the pipeline's routed rows with both (``summary`` = :func:`skype.dskype.stamps.tables_stamp`) and sends one
  to every partition, so every partition learns them;
* ``hwm_seq``/``hwm_t``: the tick, the largest sequence number and timestamp of the Arrow batch's
  messages.  Every partition gets one whenever the batch has messages, so the stateful operator
  calls every partition and each takes the maximum over its ticks: the global high-water mark.

Routing is the distribution layer's (:mod:`skype.partitioning`), with the exact-mode settings of the
runtime: subscriptions are routed with ``theta = 0`` (their whole term list is their loose prefix)
and messages by all their terms, so a partition's window share holds every window message carrying
a term of its range and every subscription sharing such a term is hosted there.  Except ``prefix``
with keyword summaries: a message goes only for the terms live in each partition's newest
published summary, and the routed row carries which version that was (``summary``;
:mod:`skype.dskype.summaries`, where the partitions read back what a newly live term needs).
``key`` is the Spark grouping key of the partition (:mod:`skype.dskype.keys`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from skype.partitioning.base import Distribution
from skype.errors import InputError
from skype.model import MessageBatch, SubscriptionBatch, TermMatrix
from skype.dskype import codec
from skype.dskype.codec import OP_QUERY, OP_RESULTS, OP_SUB, OP_UNSUB, Commands
from skype.dskype.handover import VersionLog, owner_routed, routes_everywhere
from skype.dskype.screening import occurrence, screen, write_dead_letters  # noqa: F401  (write_dead_letters: re-exported)
from skype.dskype.stamps import tables_stamp

if TYPE_CHECKING:
    from skype.dskype.summaries import SummaryTables

KIND_MESSAGE = 0
KIND_SUBSCRIBE = 1
KIND_UNSUBSCRIBE = 2
KIND_RESULTS = 3  # a results request (no record): to every partition
KIND_QUERY = 4  # a snapshot query (no record): to one partition of a whole-window method, else everywhere
KIND_TABLES = 5  # control: the table versions a batch may use (id: pipeline, seq: newest version)

EVENT_FIELDS = ("kind", "seq", "at", "id", "x", "y", "t", "k", "alpha", "term_ids", "weights", "spec")
EVENT_SCHEMA_DDL = ("kind byte, seq long, at long, id long, x double, y double, t double, k long, alpha double, "
                    "term_ids array<long>, weights array<double>, spec string")
ROUTED_SCHEMA_DDL = "key long, hwm_seq long, hwm_t double, messages binary, commands binary, summary string"


def event_arrow_schema():
    import pyarrow as pa

    return pa.schema([("kind", pa.int8()), ("seq", pa.int64()), ("at", pa.int64()), ("id", pa.int64()),
                      ("x", pa.float64()), ("y", pa.float64()), ("t", pa.float64()), ("k", pa.int64()),
                      ("alpha", pa.float64()), ("term_ids", pa.list_(pa.int64())), ("weights", pa.list_(pa.float64())),
                      ("spec", pa.string())])


def tables_events(versions: dict):
    """The control events of a batch's table versions, in the stream-event schema
    (:data:`KIND_TABLES`): pipeline -> newest version, or -> (in force, newest) (``seq``: the
    newest, ``at``: the one in force at the batch's start)."""
    import pyarrow as pa

    pipes = sorted(versions)
    pairs = [versions[p] if isinstance(versions[p], tuple) else (versions[p], versions[p]) for p in pipes]
    n = len(pipes)
    cols = {"kind": pa.array(np.full(n, KIND_TABLES, np.int8)),
            "seq": pa.array([int(v) for _, v in pairs], pa.int64()),
            "at": pa.array([int(u) for u, _ in pairs], pa.int64()),
            "id": pa.array([int(p) for p in pipes], pa.int64())}
    schema = event_arrow_schema()
    return pa.RecordBatch.from_arrays([cols.get(f.name, pa.nulls(n, f.type)) for f in schema], schema=schema)


def tables_from_arrow(batch) -> dict[int, tuple[int, int]]:
    """Pipeline -> (in force, newest) table versions of the control events in an Arrow batch of
    stream events (an event without ``at``: both the newest)."""
    kind = np.asarray(batch.column("kind"), dtype=np.int8)
    rows = np.flatnonzero(kind == KIND_TABLES)
    if not len(rows):
        return {}
    pipes = np.asarray(batch.column("id").fill_null(0))[rows]
    versions = np.asarray(batch.column("seq").fill_null(0))[rows]
    in_force = np.asarray(batch.column("at").fill_null(-1))[rows]
    out: dict[int, tuple[int, int]] = {}
    for p, u, v in zip(pipes.tolist(), in_force.tolist(), versions.tolist()):
        pair = (int(u) if u >= 0 else int(v), int(v))
        out[int(p)] = max(out.get(int(p), pair), pair)
    return out


@dataclass
class RoutedPart:
    """What one partition receives from one routed batch."""

    messages: bytes
    commands: bytes
    hwm_seq: int
    hwm_t: float
    num_messages: int
    summary: str = ""  # the keyword-summary version used for the messages (skype.dskype.summaries)


class Router:
    """Routes messages and commands with a distribution built in exact mode (see module docstring)."""

    def __init__(self, dist: Distribution, keys: list[int], summary_dir: str | None = None,
                 pipeline: int = 0, tables_dir: str | None = None) -> None:
        self.dist = dist
        self.pipeline = pipeline  # the run's method index: which control events are this router's
        self.num_partitions = dist.num_partitions
        self.keys = list(keys)
        self.summary_dir = summary_dir
        self._summaries: SummaryTables | None = None  # the tables, opened on first use (a router is pickled to executors)
        # adaptive methods: every message to every partition, each command to the owner of its
        # record under the table version in force at the batch's start (skype.dskype.handover)
        self.everywhere = routes_everywhere(dist)
        self.tables_dir = tables_dir
        self._versions: VersionLog | None = None  # opened on first use (a router is pickled to executors)

    def route(self, messages: MessageBatch, seq: np.ndarray, commands: Commands,
              tables: int | tuple[int, int] | None = None, in_force: int | None = None) -> dict[int, RoutedPart]:
        """Partition -> what it receives; every partition gets a part when there are messages,
        or when the batch carries this pipeline's table versions ``tables`` (in force, newest;
        stamped on every part).  ``in_force``: the version in force of an adaptive pipeline when
        its control event came earlier in the same input piece."""
        if isinstance(tables, int):
            tables = (tables, tables)
        if tables is not None:
            in_force = tables[0]
        P = self.num_partitions
        msg_rows: list[np.ndarray] = [np.zeros(0, np.int64)] * P
        stamps = [""] * P
        if len(messages) and self.everywhere:
            msg_rows = [np.arange(len(messages), dtype=np.int64)] * P
        elif len(messages) and self.summary_dir is not None:
            msg_rows, stamps = self._route_by_summaries(messages, seq)
        elif len(messages):
            by_part = self.dist.route_messages(messages).by_partition(P)
            msg_rows = [by_part.row(p).astype(np.int64) for p in range(P)]
        cmd_parts = self._route_commands(commands, in_force)
        out: dict[int, RoutedPart] = {}
        hwm_seq = int(seq.max()) if len(seq) else -1
        hwm_t = float(messages.t.max()) if len(messages) else -np.inf
        if tables is not None:
            stamps = [tables_stamp(tables[1], tables[0])] * P
        for p in range(P):
            rows = msg_rows[p]
            cmds = cmd_parts[p]
            if not len(messages) and not len(cmds) and tables is None:
                continue
            out[p] = RoutedPart(codec.pack_messages(messages.take(rows), seq[rows]) if len(rows) else b"",
                                cmds.pack() if len(cmds) else b"", hwm_seq, hwm_t, len(rows), stamps[p])
        return out

    def _route_by_summaries(self, messages: MessageBatch, seq: np.ndarray) -> tuple[list[np.ndarray], list[str]]:
        """Messages to the partitions of their terms that are live there, by each partition's
        newest summary at the batch's first position (:mod:`skype.dskype.summaries`)."""
        from skype.dskype.summaries import SummaryTables, keep_live_entries
        from skype.partitioning.ranges import RangeDistribution
        from skype.partitioning.routing import Routing

        if self._summaries is None:
            self._summaries = SummaryTables(str(self.summary_dir), self.num_partitions)
        stamps, live, full = self._summaries.at(int(seq.min()))
        dist = self.dist
        if not isinstance(dist, RangeDistribution):
            raise TypeError(f"keyword summaries route by terms, which {dist.name!r} does not place")
        rows = np.repeat(np.arange(len(messages), dtype=np.int64), messages.terms.lengths())
        terms = np.asarray(messages.terms.ids, np.int64)
        parts = np.asarray(dist.term_partitions(terms), np.int64)
        keep = keep_live_entries(terms, parts, live, full)
        by_part = Routing.from_pairs(rows[keep], parts[keep], len(messages)).by_partition(self.num_partitions)
        return [by_part.row(p).astype(np.int64) for p in range(self.num_partitions)], stamps

    def _route_commands(self, commands: Commands, in_force: int | None = None) -> list[Commands]:
        P = self.num_partitions
        if len(commands) == 0:
            return [Commands.empty()] * P
        asked = commands.op == OP_QUERY
        if asked.any() and self.dist.capabilities.whole_window:
            # every partition holds the whole window: query n goes to partition n mod P alone
            # (skype.dskype.snapshots; a query's id is its ordinal)
            out = list(self._route_commands(commands.take(np.flatnonzero(~asked)), in_force))
            rows = np.flatnonzero(asked)
            owner = commands.subs.ids[rows] % P
            for p in np.unique(owner).tolist():
                queries = commands.take(rows[owner == p])
                out[p] = Commands.concat([out[p], queries]) if len(out[p]) else queries
            return out
        if self.everywhere:
            rows, parts, nrep = self.owner_placements(commands, in_force)
        else:
            rows, parts, nrep = self.placements(commands)
        order = np.argsort(parts, kind="stable")
        rows, parts = rows[order], parts[order]
        cuts = np.searchsorted(parts, np.arange(P + 1))
        cmds = Commands(commands.cseq, commands.at, commands.op, commands.subs, nrep, commands.spec)
        return [cmds.take(rows[cuts[p]:cuts[p + 1]]) if cuts[p + 1] > cuts[p] else Commands.empty()
                for p in range(P)]

    def owner_placements(self, commands: Commands, in_force: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """An adaptive pipeline's (command row, partition) pairs: a subscribe, or an unsubscribe
        carrying its record, to the record's owner under the table version in force at the
        batch's start (``in_force``, from the batch's control event; later versions move the
        pending ones, :mod:`skype.dskype.handover`); id-only unsubscribes and results requests
        to every partition."""
        P = self.num_partitions
        if in_force is None:
            raise InputError("E115", partition=-1)
        if self._versions is None:
            if self.tables_dir is None:
                raise TypeError(f"the router of adaptive method {self.dist.name!r} needs its tables directory")
            self._versions = VersionLog(self.tables_dir)
        routed = owner_routed(commands)
        placed = np.flatnonzero(routed)
        blind = np.flatnonzero(~routed)
        owners = self._versions.upto(in_force)[in_force].locator.home_partitions(commands.subs.take(placed))
        rows = np.concatenate([placed, np.repeat(blind, P)])
        parts = np.concatenate([owners.astype(np.int64), np.tile(np.arange(P, dtype=np.int64), len(blind))])
        return rows, parts, np.ones(len(commands), np.int32)

    def placements(self, commands: Commands) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(command row, partition) pairs of every command, and each subscribe's ``nrep``.

        Subscribes and unsubscribes that carry their record are placed by the method (in rounds of
        distinct ids: the distribution registers what it routes, and forgets it again at once);
        an unsubscribe without a record (no terms) goes to every partition."""
        P = self.num_partitions
        n = len(commands)
        has_record = np.diff(commands.subs.terms.indptr) > 0
        placed = np.flatnonzero((commands.op == OP_SUB) | has_record)
        blind = np.flatnonzero((commands.op != OP_SUB) & ~has_record)
        rows_out = [np.repeat(blind, P)]
        parts_out = [np.tile(np.arange(P, dtype=np.int64), len(blind))]
        nrep = np.zeros(n, np.int32)
        occ = occurrence(commands.subs.ids[placed])
        for r in range(int(occ.max(initial=-1)) + 1):
            rows = placed[occ == r]
            routing = self.dist.route_subscriptions(commands.subs.take(rows), None)
            self.dist.remove_subscriptions(commands.subs.ids[rows])
            pr, pp = routing.pairs()
            rows_out.append(rows[pr])
            parts_out.append(pp.astype(np.int64))
            nrep[rows] = routing.counts()
        sub_rows = commands.op == OP_SUB
        if not self.dist.capabilities.replicated and (nrep[sub_rows] != 1).any():
            raise InputError("E026", detail=f"method {self.dist.name} placed a subscription on several partitions")
        nrep[~sub_rows] = 0
        return np.concatenate(rows_out).astype(np.int64), np.concatenate(parts_out), nrep


# --------------------------------------------------------------------------- Arrow <-> batches


def _list_column(column) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, values) of an Arrow list column without nulls."""
    import pyarrow as pa

    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    offsets = np.asarray(arr.offsets, dtype=np.int64)
    values = np.asarray(arr.values, dtype=np.float64 if pa.types.is_floating(arr.type.value_type) else np.int64)
    return offsets - offsets[0], values[offsets[0]:offsets[-1]]


def events_from_arrow(batch) -> tuple[MessageBatch, np.ndarray, Commands]:
    """Split an Arrow batch of stream events into (messages, their seq, commands)."""
    kind = np.asarray(batch.column("kind"), dtype=np.int8)
    cols = {name: np.asarray(batch.column(name).fill_null(-1 if name in ("at",) else 0))
            for name in ("seq", "at", "id", "x", "y", "t", "k", "alpha")}
    indptr, term_ids = _list_column(batch.column("term_ids"))
    _, weights = _list_column(batch.column("weights"))
    terms = TermMatrix(indptr, term_ids, weights)
    msg = np.flatnonzero(kind == KIND_MESSAGE)
    cmd = np.flatnonzero((kind != KIND_MESSAGE) & (kind != KIND_TABLES))  # control events: tables_from_arrow
    messages = MessageBatch(cols["id"][msg], cols["x"][msg], cols["y"][msg], cols["t"][msg], terms.take(msg))
    seq = cols["seq"][msg].astype(np.int64)
    if len(msg) > 1 and (np.diff(seq) < 0).any():
        order = np.argsort(seq, kind="stable")
        messages, seq = messages.take(order), seq[order]
    subs = SubscriptionBatch(cols["id"][cmd], cols["x"][cmd], cols["y"][cmd], cols["k"][cmd], cols["alpha"][cmd],
                             terms.take(cmd))
    op = np.select([kind[cmd] == KIND_SUBSCRIBE, kind[cmd] == KIND_RESULTS, kind[cmd] == KIND_QUERY],
                   [OP_SUB, OP_RESULTS, OP_QUERY], OP_UNSUB)
    op = op.astype(np.int8)
    specs = batch.column("spec").to_pylist() if "spec" in batch.schema.names and len(cmd) else None
    commands = Commands.concat([Commands(cols["seq"][cmd], cols["at"][cmd], op, subs, np.zeros(len(cmd), np.int32),
                                         np.array(specs, object)[cmd] if specs is not None else None)])
    return messages, seq, commands


def routing_copy(dist):
    """A copy of a distribution with what routing in exact mode needs, without the subscription
    tables the build left in it (records of every subscription: O(S) bytes).  The runtime routes
    with ``theta = 0`` and summaries off, registers what it routes and forgets it at once, so an
    empty table routes identically; what remains is the build-time tables (term ranges, region
    tree, hash), whose size does not grow with the subscriptions."""
    import copy

    from skype.partitioning.base import Distribution
    from skype.partitioning.registry import SubscriptionTable

    out = copy.copy(dist)
    for name, value in vars(dist).items():
        if isinstance(value, SubscriptionTable):
            setattr(out, name, SubscriptionTable())
        elif isinstance(value, Distribution):
            setattr(out, name, routing_copy(value))
        elif isinstance(value, list) and value and all(isinstance(v, Distribution) for v in value):
            setattr(out, name, [routing_copy(v) for v in value])
    return out


class ShippedRouters:
    """The routers of a run, shipped to executors once as a Spark broadcast (or a file), not
    pickled into the ``mapInArrow`` closure: the closure holds only this handle.  Each Python
    worker unpickles them once and keeps them (module cache by broadcast id)."""

    def __init__(self, broadcast, keys: list[list[int]], summary_dirs: list[str | None] | None = None,
                 tables_dirs: list[str | None] | None = None) -> None:
        import secrets

        self.broadcast = broadcast
        self.keys = keys
        self.summary_dirs = summary_dirs or [None] * len(keys)
        self.tables_dirs = tables_dirs or [None] * len(keys)
        # the cache key: a worker is reused across queries, and a broadcast object seen in a
        # worker carries no id of its own (its Python id() can be reused after it is freed)
        self.token = secrets.token_hex(8)

    def routers(self) -> list[Router]:
        cached = _shipped.get(self.token)
        if cached is None:
            import pickle

            dists = pickle.loads(self.broadcast.value)
            cached = [Router(d, k, sd, pipeline=i, tables_dir=td)
                      for i, (d, k, sd, td) in enumerate(zip(dists, self.keys, self.summary_dirs, self.tables_dirs))]
            _shipped.clear()
            _shipped[self.token] = cached
        return cached


_shipped: dict = {}


def ship_routers(spark, dists: list, keys: list[list[int]], summary_dirs: list[str | None] | None = None,
                 tables_dirs: list[str | None] | None = None) -> tuple[ShippedRouters, int]:
    """Broadcast the compact routing tables; returns the handle and the broadcast's bytes.
    ``summary_dirs``: per pipeline, where its partitions publish keyword summaries (or None);
    ``tables_dirs``: per adaptive pipeline, its versioned ownership tables (or None)."""
    import pickle

    blob = pickle.dumps([routing_copy(d) for d in dists], protocol=pickle.HIGHEST_PROTOCOL)
    return ShippedRouters(spark.sparkContext.broadcast(blob), keys, summary_dirs, tables_dirs), len(blob)


class _Blob:
    """The routing tables' bytes inside a routers file (what a broadcast's ``value`` is)."""

    def __init__(self, value: bytes) -> None:
        self.value = value


def write_routers_file(directory, dists: list, keys: list[list[int]], summary_dirs: list[str | None] | None = None,
                       tables_dirs: list[str | None] | None = None) -> tuple[str, int]:
    """The routers of a run as one file of the run directory, for a source that routes as it
    reads (:mod:`skype.spark.sources`: a data source's options are strings, so it gets the path,
    not a broadcast).  A fresh name per query start (a worker caches by path), the files of
    earlier starts removed; returns the path and its bytes."""
    import pickle
    import secrets

    blob = pickle.dumps([routing_copy(d) for d in dists], protocol=pickle.HIGHEST_PROTOCOL)
    handle = pickle.dumps(ShippedRouters(_Blob(blob), keys, summary_dirs, tables_dirs), protocol=pickle.HIGHEST_PROTOCOL)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(str(directory), f"routers-{secrets.token_hex(8)}.pkl")
    with open(path + ".tmp", "wb") as fh:  # the name is already unique to this start
        fh.write(handle)
    os.replace(path + ".tmp", path)
    for name in os.listdir(directory):
        if name.startswith("routers-") and os.path.join(str(directory), name) != path:
            os.remove(os.path.join(str(directory), name))
    return path, len(handle)


def routers_from_file(path: str) -> ShippedRouters:
    """The handle :func:`write_routers_file` wrote (read once per worker and path)."""
    handle = _from_file.get(path)
    if handle is None:
        import pickle

        with open(path, "rb") as fh:
            handle = pickle.load(fh)
        _from_file.clear()
        _from_file[path] = handle
    return handle


_from_file: dict = {}


def route_arrow(routers, batches, bounds=None, dead_letters: str | None = None):
    """The ``mapInArrow`` function: stream-event Arrow batches -> routed rows (one per partition
    of each router and input batch).  ``routers``: a list of :class:`Router` or a
    :class:`ShippedRouters` handle.  With ``bounds``, records the engine would reject are left
    out (:func:`screen`) and written to ``dead_letters`` (a directory), if given."""
    if isinstance(routers, ShippedRouters):
        routers = routers.routers()
    known: dict[int, tuple[int, int]] = {}  # the piece's control events come first (skype.spark.sources)
    for batch in batches:
        if batch.num_rows == 0:
            continue
        messages, seq, commands = events_from_arrow(batch)
        tables = tables_from_arrow(batch)
        known.update(tables)
        if bounds is not None:
            messages, seq, commands, dead = screen(messages, seq, commands, bounds)
            if dead and dead_letters:
                write_dead_letters(dead_letters, dead)
        for router in routers:
            in_force = known[router.pipeline][0] if router.pipeline in known else None
            yield from _routed_batch(router, router.route(messages, seq, commands, tables.get(router.pipeline),
                                                          in_force))


def _routed_batch(router: Router, parts: dict[int, RoutedPart]):
    import pyarrow as pa

    if parts:
        ps = sorted(parts)
        yield pa.RecordBatch.from_arrays(
            [pa.array([router.keys[p] for p in ps], pa.int64()), pa.array([parts[p].hwm_seq for p in ps], pa.int64()),
             pa.array([parts[p].hwm_t for p in ps], pa.float64()), pa.array([parts[p].messages for p in ps], pa.binary()),
             pa.array([parts[p].commands for p in ps], pa.binary()), pa.array([parts[p].summary for p in ps], pa.string())],
            names=["key", "hwm_seq", "hwm_t", "messages", "commands", "summary"],
        )
