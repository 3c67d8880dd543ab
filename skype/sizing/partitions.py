"""Per-partition costs of a DSkype run, measured in this process (no Spark).

:func:`measure_partitions` does what a Spark run's partitions do, one after another in one
process:

1. plans the run as the job does: :func:`skype.dskype.plan.build_distribution_for` (the same
   sample and thresholds), the partitions' :class:`~skype.dskype.partition.PartitionConfig` (a
   native count window where the method broadcasts messages, the loose-prefix activation and
   keyword summaries for ``prefix``, the versioned ownership tables of the adaptive methods at
   version 0, i.e. ``--rebalance never``);
2. registers every subscription (subscribe commands at position 0, routed by
   :class:`~skype.dskype.routing.Router`), timed apart;
3. streams the messages in batches of ``batch_size``: each batch is routed as the source's tasks
   route it, then every partition applies its share (:meth:`PartitionCore.apply`), then the merge
   buckets fold the replicated subscriptions' reports (:class:`~skype.dskype.merge.MergeCore`).

**What is measured.**  Per partition and *steady batch* (one after the window has filled, not the
first after registration): the engine CPU seconds the core reports (``engine_cpu_s``, the thread's
CPU time of the engine phase), the wall seconds of the whole ``apply`` (engine, reports, window
share), the work counters (:mod:`skype.dskype.work`), the messages routed to it; the routing
seconds (the source tasks'), and per merge bucket its CPU seconds (the replicated methods).  At the end: per partition the hosted replicas, the engine's active
subscriptions, its window share, its engine's own memory accounting (``memory_bytes`` of
``Engine.stats()``); for the process, the growth of its resident set from before the partitions
were made to the end, and its peak (``VmHWM``) over the same base: registration's transient
buffers included (all P partitions live in this process, so the growth is their sum).

**Invariants the tests check.**  Counters, replicas, routed messages and window shares are
deterministic functions of the workload and the settings (seconds are not); every replica the
router placed is hosted by exactly the partitions it routed it to; at P = 1 the partition's work
counters equal the centralized engine's over the same stream.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from skype.dskype import codec
from skype.dskype.codec import OP_SUB, Commands
from skype.dskype.work import COUNTERS

STEADY = "steady"


def resident_bytes(field: str = "VmRSS") -> int:
    """This process's resident set (``VmRSS``; ``VmHWM``: its peak so far), in bytes; 0 where
    ``/proc`` is missing."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def reset_peak() -> bool:
    """Start ``VmHWM`` again from the current resident set (Linux: ``clear_refs`` 5); whether it could."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


@dataclass(frozen=True)
class StreamReadBack:
    """The window read-back of keyword summaries (:class:`skype.dskype.summaries.MessageReadBack`)
    from the workload in memory: positions ``[lo, hi)`` of the message stream."""

    messages: Any  # MessageBatch

    def read(self, lo: int, hi: int) -> tuple:
        hi = min(hi, len(self.messages))
        lo = min(max(lo, 0), hi)
        return self.messages.slice(lo, hi), np.arange(lo, hi, dtype=np.int64)


@dataclass
class PartitionCosts:
    """What one (method, P) run measured (module docstring); per-partition lists have P entries."""

    method: str
    partitions: int
    subscriptions: int
    window: int
    batch_size: int
    messages: int
    steady_batches: int
    steady_messages: int
    replicas: list[int]
    active_subscriptions: list[int]
    window_share: list[int]
    routed_messages: list[int]  # over the steady batches
    engine_cpu_s: list[float]  # over the steady batches
    apply_s: list[float]  # wall seconds of apply, over the steady batches
    apply_cpu_s: list[float]  # the thread's CPU seconds of apply (engine, reports, window), steady batches
    work: dict[str, list[int]]  # counter -> per partition, over the steady batches
    engine_memory_bytes: list[dict[str, int]]
    registration_s: list[float]
    route_s: float  # routing the steady batches (the source tasks' share)
    merge_cpu_s: list[float]  # per merge bucket, its CPU seconds over the steady batches (replicated methods)
    report_bytes: int  # report blobs sent to merge buckets over the steady batches
    rss_growth_bytes: int
    rss_peak_growth_bytes: int = 0  # the process's peak (VmHWM) at the end less its resident set before the partitions
    communication_per_message: float = 0.0
    replication_ratio: float = 0.0
    settings: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)

    def busiest(self) -> int:
        """The partition with the most CPU seconds in ``apply``."""
        return int(np.argmax(self.apply_cpu_s)) if self.partitions else 0


def _configs(settings, dist, work_dir: Path, messages) -> tuple[list, str | None, str | None]:
    from skype.dskype.handover import TableVersion, UnitLocator, routes_everywhere, write_version
    from skype.dskype.partition import PartitionConfig
    from skype.dskype.plan import activation_config, single_replica

    P = settings.distribution.partitions
    activation = activation_config(settings, dist)  # as the job sets it
    summaries = (str(work_dir / "summaries") if activation is not None and settings.distribution.summaries != "off"
                 else None)
    tables = None
    if routes_everywhere(dist):
        tables = str(work_dir / "tables")
        write_version(tables, TableVersion(0, 0, -1, UnitLocator.of(dist)))
    native = settings.window.kind == "count" and bool(getattr(dist, "broadcasts_messages", False))
    configs = [PartitionConfig(p, P, settings.window, tuple(settings.distribution.bounds), settings.distribution.engine,
                               tuple(sorted(settings.distribution.engine_options.items())), count_native=native,
                               bucket_keys=tuple(range(P)), inline_merge=single_replica(dist), activation=activation,
                               rebalance_dir=tables, num_partitions=P, summary_dir=summaries,
                               summary_mode=settings.distribution.summaries,
                               backfill=StreamReadBack(messages) if summaries else None)
               for p in range(P)]
    return configs, summaries, tables


def _partition_input(part, pinput_cls):
    messages, seq = (codec.unpack_messages(part.messages) if part.messages
                     else (codec.empty_messages(), np.zeros(0, np.int64)))
    commands = Commands.unpack(part.commands) if part.commands else Commands.empty()
    return pinput_cls(messages, seq, commands, part.hwm_seq, part.hwm_t, (part.summary,) if part.summary else ())


def measure_partitions(inputs, method: str, partitions: int, *, window: int, batch_size: int,
                       sample_size: int = 10_000, summaries: str = "active", options: dict | None = None,
                       registration_chunk: int = 50_000, floors: bool = False,
                       floor_margin: float = 0.0, floor_settle: bool = False,
                       floor_side_list: int = 32) -> PartitionCosts:
    """Run ``method`` over ``partitions`` partitions on ``inputs`` (a workload whose subscriptions
    all come first, :class:`skype.workload.Inputs`) with a count window of ``window`` messages;
    see the module docstring.  ``options``: further options of the ``distributed`` command
    (engine options, ``range_cut``...).  ``floors``: after each batch the merge buckets' global
    k-th score floors (:mod:`skype.dskype.floors`) go into the next batch's partition inputs (their
    computation counts as merge CPU); ``floor_margin``, ``floor_settle``: ``FloorKeeper.margin``
    (sticky floors) and ``.settle`` (a floor applies from its second batch in a row);
    ``floor_side_list``: ``.side_list`` (skipped messages kept per subscription for re-admission)."""
    from skype.dskype.floors import Floors, floors_of
    from skype.dskype.merge import MergeCore
    from skype.dskype.partition import PartitionCore, PartitionInput
    from skype.dskype.plan import RunSettings, build_distribution_for
    from skype.dskype.routing import Router
    from skype.errors import InputError

    if any(op != "msgs" for op, _ in inputs.steps):
        raise InputError("E023", what="the sizing workload", expected="subscriptions first, then messages",
                         value=[op for op, _ in inputs.steps][:5])
    opts = {**(options or {}), "method": method, "partitions": int(partitions), "batch_size": int(batch_size),
            "window": int(window), "window_seconds": None, "sample_size": int(sample_size), "rebalance": "never",
            "summaries": summaries}
    settings = RunSettings.from_options(opts, inputs.bounds)
    dist = build_distribution_for(settings, method, inputs)
    messages = inputs.messages()
    subs = inputs.subscriptions
    P = int(partitions)
    with tempfile.TemporaryDirectory(prefix="skype-sizing-") as tmp:
        configs, _, tables = _configs(settings, dist, Path(tmp), messages)
        configs = [replace(c, floors=bool(floors)) for c in configs]
        router = Router(dist, list(range(P)), summary_dir=configs[0].summary_dir, tables_dir=tables)
        stamp = (0, 0) if tables else None
        reset_peak()
        rss0 = resident_bytes()
        cores = [PartitionCore(c) for c in configs]
        for core in cores:
            core.floors.margin = float(floor_margin)
            core.floors.settle = bool(floor_settle)
            core.floors.side_list = int(floor_side_list)
        merges = None if configs[0].inline_merge else [MergeCore() for _ in range(P)]
        registration = np.zeros(P)
        for lo in range(0, len(subs), registration_chunk):
            chunk = subs.slice(lo, min(lo + registration_chunk, len(subs)))
            n = len(chunk)
            cmds = Commands(np.arange(lo, lo + n, dtype=np.int64), np.zeros(n, np.int64), np.full(n, OP_SUB, np.int8),
                            chunk, np.ones(n, np.int32))
            routed = router.route(codec.empty_messages(), np.zeros(0, np.int64), cmds, tables=stamp)
            reports: dict[int, list[bytes]] = {}
            for p, part in routed.items():
                t0 = time.perf_counter()
                out = cores[p].apply(_partition_input(part, PartitionInput))
                registration[p] += time.perf_counter() - t0
                for bucket, blob in out.reports.items():
                    reports.setdefault(int(bucket), []).append(blob)
            if merges is not None:
                for bucket, blobs in reports.items():
                    merges[bucket].apply(blobs)
        steady_from = -(-int(window) // int(batch_size)) + 1  # the window has filled, registration is past
        cpu, wall, apply_cpu, routed_msgs = np.zeros(P), np.zeros(P), np.zeros(P), np.zeros(P, np.int64)
        merge_cpu = np.zeros(P)
        work = {name: np.zeros(P, np.int64) for name in COUNTERS}
        route_s = 0.0
        report_bytes = steady = steady_messages = copies = 0
        next_floors: Floors | None = None
        for b, lo in enumerate(range(0, len(messages), int(batch_size))):
            hi = min(lo + int(batch_size), len(messages))
            batch, seq = messages.slice(lo, hi), np.arange(lo, hi, dtype=np.int64)
            measured = b >= steady_from
            t0 = time.perf_counter()
            routed = router.route(batch, seq, Commands.empty(), tables=stamp)
            t_route = time.perf_counter() - t0
            reports = {}
            for p, part in routed.items():
                copies += part.num_messages
                inp = _partition_input(part, PartitionInput)
                inp.floors = next_floors
                t0, c0 = time.perf_counter(), time.thread_time()
                out = cores[p].apply(inp)
                spent, spent_cpu = time.perf_counter() - t0, time.thread_time() - c0
                for bucket, blob in out.reports.items():
                    reports.setdefault(int(bucket), []).append(blob)
                if measured:
                    wall[p] += spent
                    apply_cpu[p] += spent_cpu
                    cpu[p] += float(out.metrics.get("engine_cpu_s", 0.0))
                    routed_msgs[p] += part.num_messages
                    for name in COUNTERS:
                        work[name][p] += int(out.metrics.get("work", {}).get(name, 0))
            if merges is not None:
                for bucket, blobs in reports.items():
                    c0 = time.thread_time()
                    merges[bucket].apply(blobs)
                    if measured:
                        merge_cpu[bucket] += time.thread_time() - c0
                if floors:
                    parts = []
                    for bucket, merge in enumerate(merges):
                        c0 = time.thread_time()
                        parts.append(floors_of(merge, hi - 1, int(window), int(batch_size)))
                        if measured:
                            merge_cpu[bucket] += time.thread_time() - c0
                    next_floors = Floors.concat(parts)
            if measured:
                steady += 1
                steady_messages += hi - lo
                route_s += t_route
                report_bytes += sum(len(x) for blobs in reports.values() for x in blobs)
        rss = resident_bytes() - rss0
        peak = resident_bytes("VmHWM") - rss0
        memory = []
        for core in cores:
            stats = core.engine.stats() if hasattr(core.engine, "stats") else {}
            memory.append({k: int(v) for k, v in stats.get("memory_bytes", {}).items()})
        replicas = [len(c.hosted) for c in cores]
        active = [int(c.engine.stats().get("subscriptions", 0)) if hasattr(c.engine, "stats") else 0 for c in cores]
        share = [len(c.window) for c in cores]
        del cores, merges
    return PartitionCosts(
        method=method, partitions=P, subscriptions=len(subs), window=int(window), batch_size=int(batch_size),
        messages=len(messages), steady_batches=steady, steady_messages=steady_messages, replicas=replicas,
        active_subscriptions=active, window_share=share, routed_messages=routed_msgs.tolist(),
        engine_cpu_s=cpu.round(6).tolist(), apply_s=wall.round(6).tolist(), apply_cpu_s=apply_cpu.round(6).tolist(),
        work={k: v.tolist() for k, v in work.items()}, engine_memory_bytes=memory,
        registration_s=registration.round(6).tolist(), route_s=route_s, merge_cpu_s=merge_cpu.round(6).tolist(), report_bytes=report_bytes,
        rss_growth_bytes=int(rss), rss_peak_growth_bytes=int(peak), communication_per_message=copies / max(len(messages), 1),
        replication_ratio=sum(replicas) / max(len(subs), 1),
        settings={"sample_size": int(sample_size), "summaries": summaries, "floors": bool(floors),
                  "floor_margin": float(floor_margin), "floor_settle": bool(floor_settle),
                  "floor_side_list": int(floor_side_list), **(options or {})})
