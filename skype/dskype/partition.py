"""One subscription partition of DSkype: its engine, its hosted subscriptions, its window share.

This module holds no Spark code: :class:`PartitionCore` is what lives in an engine host (see
:mod:`skype.spark.hosts`), and :func:`skype.dskype.hosted.replay_commands` /
:class:`PartitionCore.rebuild` turn the durable state the stateful operator keeps (see
:mod:`skype.spark.processors`) back into a core.

**Order and windows.**  Every message carries its global sequence number ``seq`` (its position in
the input) and its timestamp ``t``.  Inside a partition everything runs in ``seq`` order, and
engines see ``t := seq`` for count windows:

* a count window of N runs as a *time* window ``window_seconds = N`` over ``t := seq``: after the
  clock reaches ``s`` it holds exactly the messages with ``seq`` in ``(s - N, s]``, i.e. the last N
  messages of the *global* stream, although the partition sees only part of it;
* except when the method sends every message to every partition (hashing, location:
  ``count_native``): the engine's own count window of N then holds the same last N messages, and
  the core's count windows are faster (measured 2.5x at 20k subscriptions);
* a time window of T uses the real ``t``.

Every batch each partition advances its clock to the batch's high-water mark (the largest ``seq``
/ ``t`` of the batch, carried to every partition by ticks), so expiry reaches every partition.

**Commands.**  A command's position ``at`` is the number of messages before it: it applies after
every message with ``seq < at``.  A batch whose high-water mark is ``h`` applies every command with
``at <= h + 1`` (in ``(position, cseq)`` order, interleaved with the messages), keeps later ones
pending, and applies commands without a position (``at = -1``) at the start of the batch.  A
subscribe of an id already hosted replaces it; an unsubscribe of an id not hosted does nothing
(an unsubscribe reaches every partition of the record it removes, and a re-subscription of a live
id is preceded by one, so all replicas of an id agree; see :mod:`skype.dskype.routing`).

**Results.**  After the batch, each replica's top-k is exact over the partition's window share.
The partition reports what changed (:mod:`skype.dskype.reports`): a ``DELTA`` (net entered / left
messages, netted over the batch's change logs) for single-replica subscriptions, a ``STATE`` (the
local list) for replicated ones and for every subscription a command touched.  A results request
(``OP_RESULTS``, due like any command) only flags the batch: the stage then sends every top-k.

**Query kinds** (:mod:`skype.dskype.kinds`): a subscribe with a ``spec`` (range, knn, terms) is
hosted alike, in an engine with the query window; its result is reported as top-k entries whose
merge is the kind's (the union of matches, the merged kNN list), and it never sleeps.

**Snapshot queries** (``OP_QUERY``, :mod:`skype.dskype.snapshots`): answered in the command order,
after the messages before their position, with the engine's clock at theirs; never hosted.

**Prefix replicas** (``config.activation``, :mod:`skype.dskype.activation`): a replica whose
loose prefix, at a threshold proven by its own engine, leaves this partition *sleeps* (its record
stays, the engine drops it) and wakes when that proof may expire; a hosted subscription is
*active* when it is in the engine.  Reports speak of active replicas only.  With keyword
summaries (``config.summary_dir``, :mod:`skype.dskype.summaries`) the partition counts the
replicas holding each term of its range, publishes the live terms after each batch, and at the
start of a batch reads back from the stream the window messages its newly needed terms lack
(older ones by rebuilding the engine over share + backfill, then restating the replicated lists
that changed).

**Rebuild.**  The core is a pure function of (hosted subscriptions, window messages, clock): a
fresh engine that subscribes the hosted subscriptions and publishes the window messages in ``seq``
order has exactly the same top-k lists (top-k is defined by the window alone), whatever state
its internal buffers had.  Durable state is therefore the hosted subscriptions (a snapshot plus a
log of the commands received since, replayed by :func:`skype.dskype.hosted.replay_commands`, and of the prefix
replicas' sleeps and wakes) and the window segments.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import AbstractSet, Sequence

import numpy as np

from skype.api import ChangeLog
from skype.partitioning.routing import splitmix64
from skype.errors import InputError
from skype.model import MessageBatch
from skype.dskype import activation as act
from skype.dskype import codec
from skype.dskype import loadstats
from skype.dskype.activation import Activation, ActivationConfig
from skype.dskype import snapshots
from skype.dskype.codec import OP_QUERY, OP_RESULTS, OP_SUB, Commands, command_columns
from skype.dskype.floors import FloorKeeper, Floors
from skype.dskype.handover import Handover
from skype.dskype.hosted import APPLIED, Hosted, due_pending, plan_commands, replay_commands
from skype.dskype.kinds import NameRanks, read_vocabulary, result_arrays
from skype.dskype.reports import (EMPTY_LIST, STATE, ReportBuilder, ReportRows, change_rows, net_changes,
                                 pack_by_bucket, pack_results)
from skype.dskype.summaries import Coverage, MessageReadBack
from skype.dskype.window import WindowShare, WindowSpec
from skype.dskype.work import counter_delta, engine_counters

@dataclass(frozen=True)
class PartitionConfig:
    """What a partition needs to know besides its state; identical on every executor."""

    partition: int
    num_buckets: int
    window: WindowSpec
    bounds: tuple[float, float, float, float]
    engine: str = "core"
    engine_options: tuple = ()
    count_native: bool = False  # the partition receives every message: a native count window
    pipeline: int = 0  # which of the run's methods this partition belongs to
    bucket_keys: tuple = ()  # grouping keys of the pipeline's merge buckets
    inline_merge: bool = False  # every subscription has one replica: no merge stage
    activation: ActivationConfig | None = None  # prefix: replicas sleep off their loose prefix
    final_upto: int | None = None  # messages in the whole stream, when known: the final batch
                                   # (high-water mark + 1 reaching it) writes the final top-k
    vocabulary_file: str | None = None  # term names by id: terms subscriptions order by name
    rebalance_dir: str | None = None  # adaptive methods: the versioned ownership tables (skype.dskype.handover)
    num_partitions: int = 0  # the pipeline's partitions (adaptive: whose hand-over files to read); 0: unknown
    summary_dir: str | None = None  # prefix: keyword summaries published here (skype.dskype.summaries)
    summary_mode: str = "active"  # which replicas' terms are live: "active" or "hosted"
    backfill: MessageReadBack | None = None  # where window messages are read back (skype.spark.backfill)
    load_stats: bool = False  # adaptive: report the rebalancer's statistics (skype.dskype.loadstats)
    floors: bool = False  # the merge stage sends floors (skype.dskype.floors): a rebuilt core restates its lists

    def make_engine(self):
        options = dict(self.engine_options)
        window = ({"window": int(self.window.size)} if self.count_native and self.window.kind == "count"
                  else {"window_seconds": self.window.size})
        # term names by id: terms subscriptions and queries order ties by name
        vocab = {"vocabulary": read_vocabulary(self.vocabulary_file)} if self.vocabulary_file else {}
        if self.engine == "reference":
            from skype.reference import ReferenceEngine

            return ReferenceEngine(bounds=self.bounds, **window, **vocab)
        from skype.engine import Engine

        # the query window only when the run has range/knn/terms subscriptions (engine_options)
        return Engine(bounds=self.bounds, **window, **vocab, **{"snapshots": False, **options})

    def advances(self) -> bool:
        """Whether the engine's clock is moved to each batch's high-water mark (time windows)."""
        return not (self.count_native and self.window.kind == "count")


def bucket_of(sub_ids: np.ndarray, num_buckets: int) -> np.ndarray:
    """The merge bucket of each subscription id."""
    return (splitmix64(np.asarray(sub_ids, np.int64)) % np.uint64(num_buckets)).astype(np.int64)


# --------------------------------------------------------------------------- the core


@dataclass
class PartitionInput:
    """What one batch brings to a partition (already merged over the routed rows)."""

    messages: MessageBatch
    seq: np.ndarray
    commands: Commands
    hwm_seq: int  # the batch's high-water sequence number (from the ticks), -1 if none yet
    hwm_t: float
    stamps: tuple = ()  # the summary versions the router used for these messages (skype.dskype.summaries)
    floors: Floors | None = None  # the merge stage's global k-th score floors (skype.dskype.floors)


@dataclass
class PartitionOutput:
    reports: dict[int, bytes]  # merge bucket -> reports blob
    upto: int
    metrics: dict
    activation_entry: bytes | None = None  # the batch's sleeps and wakes, for the durable log
    backfill: bytes | None = None  # window messages read back for newly live terms: one more segment
    answers: bytes | None = None  # the batch's snapshot query answers, JSON lines (skype.dskype.snapshots)
    handover_entry: bytes | None = None  # adaptive: the switch at the batch's start, for the durable log


class PartitionCore:
    """A partition's live state (see module docstring)."""

    def __init__(self, config: PartitionConfig) -> None:
        self.config = config
        self.engine = config.make_engine()
        self.hosted = Hosted()
        self.pending = Commands.empty()
        self.window = WindowShare()
        self.hwm_seq = -1
        self.hwm_t = -math.inf
        self.activation = Activation(config.activation, config.partition) if config.activation else None
        self._name_rank = NameRanks(self.engine.vocabulary)
        self.handover = (Handover(config.rebalance_dir, config.partition, config.num_partitions)
                         if config.rebalance_dir else None)
        self._reach: dict[int, float] = {}  # prefix: each hosted record's reach here (activation.reach_of)
        self.coverage = (Coverage(config)
                         if config.summary_dir is not None and config.activation is not None else None)
        self.floors = FloorKeeper()
        self._restate_all = False  # the next batch reports every replicated list whole (after a rebuild)

    def active(self, sub_id: int) -> bool:
        """Hosted and in the engine (not a dormant prefix replica)."""
        return sub_id in self.hosted and (self.activation is None or sub_id not in self.activation.dormant)

    # ------------------------------------------------------------------ rebuild
    @classmethod
    def rebuild(cls, config: PartitionConfig, hwm_seq: int, hwm_t: float, log: list[bytes],
                segments: list[bytes]) -> PartitionCore:
        """The core at a committed state: replay the command log (snapshot first; an adaptive
        partition's switches in place), then subscribe the hosted subscriptions and publish the
        live window messages in ``seq`` order."""
        core = cls(config)
        for blob in log:
            cols = codec.unpack(blob)
            if "activation" in cols:  # sleeps and wakes, after the commands due by then
                h = int(cols["hwm_seq"][0])
                due, _, core.pending = due_pending(core.pending, h)
                replay_commands(core.hosted, due, core.activation)
                assert core.activation is not None  # only prefix partitions log activation entries
                core.activation.replay(cols)
                continue
            if "switch" in cols:  # an adaptive partition's hand-over at the start of a batch
                assert core.handover is not None  # only adaptive partitions log switches
                lo = int(cols["lo"][0])
                due, _, core.pending = due_pending(core.pending, lo - 1)
                replay_commands(core.hosted, due)
                core.pending = core.handover.replay_switch(core.hosted, core.pending, cols)
                continue
            cmds = Commands.from_columns(cols)
            if "snapshot" in cols:
                applied = cmds.at == APPLIED
                core.hosted = Hosted()
                replay_commands(core.hosted, cmds.take(np.flatnonzero(applied)))
                core.pending = cmds.take(np.flatnonzero(~applied))
                if core.activation is not None:
                    core.activation.load(cols)
                if core.handover is not None and "tables_applied" in cols:
                    core.handover.applied = int(cols["tables_applied"][0])
            else:
                lo = int(cols["lo"][0])
                # first what the batches before it, which logged nothing, made due
                due, _, core.pending = due_pending(core.pending, lo - 1)
                replay_commands(core.hosted, due, core.activation)
                due, _, core.pending = plan_commands(core.pending, cmds, lo, int(cols["hwm_seq"][0]))
                replay_commands(core.hosted, due, core.activation)
        # batches without commands log nothing, but their messages made pending commands due
        due, _, core.pending = due_pending(core.pending, int(hwm_seq))
        replay_commands(core.hosted, due, core.activation)
        core.hwm_seq, core.hwm_t = int(hwm_seq), float(hwm_t)
        core.floors.engine_replaced(core.hwm_seq)
        # below their floors the live engine's lists differed from a rebuilt one's (they hold other
        # entries there): the merge stage gets every replicated list again with the next batch
        core._restate_all = config.floors
        running = [sid for sid in sorted(core.hosted.rows) if core.active(sid)]
        if running:
            core.hosted.subscribe(core.engine, running)
        for sid in core.hosted.rows:
            core._hold(sid, +1, record=True, engine=core.active(sid))
        core._load_window(*codec.concat_messages([codec.unpack_messages(s) for s in segments]))
        return core

    def final_results(self) -> bytes:
        """The top-k of the subscriptions whose one replica is here (the merge stage answers for
        replicated ones): :func:`skype.dskype.reports.pack_results`."""
        ids = [sid for sid in sorted(self.hosted.rows) if self.hosted.nrep(sid) == 1 and self.active(sid)]
        lists = self._lists(ids)
        return pack_results(ids, [lists[sid] for sid in ids])

    def snapshot(self) -> bytes:
        """Hosted subscriptions and pending commands as one log entry (it replaces the log)."""
        cmds = Commands.stack([self.hosted.as_commands(), self.pending])
        dormant = self.activation.columns() if self.activation is not None else {}
        tables = ({"tables_applied": np.array([self.handover.applied], np.int64)} if self.handover is not None
                  else {})
        return codec.pack(snapshot=np.ones(1, bool), **command_columns(cmds), **dormant, **tables)

    # ------------------------------------------------------------------ one batch
    def apply(self, inp: PartitionInput) -> PartitionOutput:
        t0 = time.perf_counter()
        work_before = engine_counters(self.engine)
        spec = self.config.window
        lo = self.hwm_seq + 1
        hwm_seq = max(self.hwm_seq, int(inp.hwm_seq))
        hwm_t = max(self.hwm_t, float(inp.hwm_t))
        switching, handover_entry, stamp = Commands.empty(), None, (0, 0)
        if self.handover is not None:  # a version coming into force: the hand-over, at the batch's start
            stamp = self.handover.stamped(inp.stamps)
            switching, self.pending, handover_entry = self.handover.switch(self.hosted, self.pending, stamp, lo)
            self.handover.check(inp.commands)
        due, positions, self.pending = plan_commands(self.pending, inp.commands, lo, hwm_seq)
        requests = due.op == OP_RESULTS
        asked = due.op == OP_QUERY  # snapshot queries: answered in the loop below, at their positions
        queries, query_pos = due.take(np.flatnonzero(asked)), positions[asked]
        if requests.any() or asked.any():  # requests are answered after the batch (skype.spark.processors)
            keep = np.flatnonzero(~(requests | asked))
            due, positions = due.take(keep), positions[keep]
        if len(switching):  # before every command of the batch (they were routed under the new version)
            due = Commands.stack([switching, due])
            positions = np.r_[np.full(len(switching), lo, np.int64), positions]
        t_applied = time.perf_counter()
        stats_rows = (loadstats.applied_commands(due, self.hosted, len(switching)) if self.config.load_stats
                      else None)
        t_applied = time.perf_counter() - t_applied
        cmd_subs = np.unique(due.subs.ids) if len(due) else np.zeros(0, np.int64)
        before = self._lists([int(s) for s in cmd_subs if self.active(int(s))])
        before_meta = {int(s): (self.active(int(s)), self.hosted.nrep(int(s)) if self.active(int(s)) else 0)
                       for s in cmd_subs}

        batch, seq = inp.messages, np.asarray(inp.seq, np.int64)
        # prefix replicas due to wake (decided by the last batch: nothing arrived since)
        woken = ([sid for sid in self.activation.due(self.hwm_seq) if sid in self.hosted]
                 if self.activation is not None else [])
        backfill, restated, t_backfill, rebuilt = None, set(), 0.0, False
        if self.coverage is not None:
            t_b = time.perf_counter()
            read = self.coverage.cover(due, [self.hosted.rows[sid].term_ids for sid in woken], self.window.seqs(), batch,
                                       seq, inp.stamps, lo, hwm_seq)
            if read is not None:
                backfill, rebuilt = read.segment(), bool(len(read.old))
                if rebuilt:  # the core's windows only append: older messages need the engine rebuilt
                    restated = self.rebuild_engine_with(read.src, read.src_seq, read.old, set(woken))
                if len(read.new):
                    batch, seq = codec.concat_messages([(batch, seq), (read.src.take(read.new), read.src_seq[read.new])])
            t_backfill = time.perf_counter() - t_b
        if self._restate_all:  # the first batch after a rebuild (skype.dskype.floors)
            restated = set(restated) | {sid for sid in self.hosted.rows if self._floorable(sid)}
            self._restate_all = False
        if woken:
            assert self.activation is not None  # only replicas of prefix partitions wake
            self.hosted.subscribe(self.engine, woken)
            for sid in woken:
                self.activation.fresh.add(sid)
                self._hold(sid, +1, record=False, engine=True)
        times = spec.engine_times(seq, batch.t)
        logs: list[ChangeLog] = []
        if inp.floors is not None:  # before any arrival: floors valid through this batch (skype.dskype.floors)
            logs.append(self.floors.apply(self.engine, inp.floors, hwm_seq, self._floorable))
        published = 0
        run: dict[int, int] = {}  # subscribe rows waiting for one subscribe_batch call: id -> row
        answers: list[str] = []
        qi = 0  # the next query to answer
        for j in range(len(due)):
            while qi < len(queries) and (query_pos[qi], queries.cseq[qi]) < (positions[j], due.cseq[j]):
                published = self._answer(queries, qi, batch, seq, times, published, due, run, logs, answers)
                qi += 1
            cut = int(np.searchsorted(seq, positions[j], side="left"))
            if cut > published:
                self._flush_subscribes(due, run)
                logs.append(self._publish(batch, seq, times, published, cut))
                published = cut
            sid = int(due.subs.ids[j])
            if due.op[j] == OP_SUB and sid not in self.hosted and sid not in run:
                run[sid] = j
                continue
            self._flush_subscribes(due, run)
            was_active = self.active(sid)
            self._reach.pop(sid, None)
            if sid in self.hosted:
                self._hold(sid, -1, record=True, engine=was_active)
            if self.hosted.remove(sid) and was_active:
                self.engine.unsubscribe(sid)
            if self.activation is not None:
                self.activation.forget(sid)
            if due.op[j] == OP_SUB:
                run[sid] = j
        self._flush_subscribes(due, run)
        for qi in range(qi, len(queries)):
            published = self._answer(queries, qi, batch, seq, times, published, due, run, logs, answers)
        if published < len(batch):
            logs.append(self._publish(batch, seq, times, published, len(batch)))
        self.hwm_seq, self.hwm_t = hwm_seq, hwm_t
        clock = spec.clock(hwm_seq, hwm_t)
        if self.config.advances() and hwm_seq >= 0 and clock > self.engine.clock:
            logs.append(self.engine.advance_log(clock))
        self.window.expire(spec, clock)
        if self.handover is not None:  # a version announced: write what this partition will hand over
            self.handover.announce(self.hosted, self.pending, stamp)
        t_engine = time.perf_counter() - t0
        work = counter_delta(work_before, engine_counters(self.engine))

        woken_here = [s for s in woken if s not in before_meta]  # a command's row reports the others
        report_rows = self._report_rows(logs, cmd_subs, before, before_meta, woken_here, restated)
        entry, slept = None, list[tuple[int, int]]()
        if self.activation is not None:
            report_rows, slept = self._sleep_step(report_rows, cmd_subs)
            if slept or woken:
                entry = act.entry(self.hwm_seq, slept, woken)
        live_terms = 0
        if self.coverage is not None:  # the live terms, and those of the replicas waking next
            assert self.activation is not None  # coverage comes with prefix's activation
            waking = [self.hosted.rows[sid].term_ids for sid in self.activation.upcoming(self.hwm_seq) if sid in self.hosted]
            live_terms = self.coverage.publish(self.hwm_seq, waking)
        reports, rows = self._pack_reports(report_rows)
        stats: dict[str, str | float] = {}
        if stats_rows is not None:  # the rebalancer's statistics (skype.dskype.loadstats)
            t_stats = time.perf_counter()
            assert self.handover is not None  # statistics are reported by adaptive partitions only
            stats[loadstats.STATS_KEY] = loadstats.partition_report(
                self.config.partition, self.hosted, self.handover, inp.messages, due, positions, stats_rows)
            stats["load_stats_s"] = time.perf_counter() - t_stats + t_applied
        dormant = len(self.activation.dormant) if self.activation is not None else 0
        return PartitionOutput(
            reports=reports, upto=hwm_seq + 1, activation_entry=entry, backfill=backfill, handover_entry=handover_entry,
            answers="".join(a + "\n" for a in answers).encode() if answers else None,
            metrics={"first_seq": lo, "messages": len(inp.messages), "commands": len(inp.commands),
                     "due_commands": len(due), "pending_commands": len(self.pending), "hosted": len(self.hosted),
                     "active": len(self.hosted) - dormant, "dormant": dormant, "sleeps": len(slept),
                     "wakes": len(woken), "hosted_inverse_replication": self.hosted.inverse_replication(),
                     "window_share": len(self.window), "engine_s": t_engine,
                     "report_s": time.perf_counter() - t0 - t_engine, "report_rows": rows,
                     "results_requested": bool(requests.any()), "live_terms": live_terms, "queries": len(answers),
                     "backfill_messages": len(codec.unpack_messages(backfill)[1]) if backfill else 0,
                     "backfill_rebuilds": int(rebuilt),
                     "backfill_s": t_backfill, "engine_cpu_s": work.pop("cpu_ns") / 1e9, "work": work,
                     **(self.handover.metrics if self.handover is not None else {}), **stats},
        )

    def _answer(self, queries: Commands, qi: int, batch: MessageBatch, seq: np.ndarray, times: np.ndarray,
                published: int, due: Commands, run: dict[int, int], logs: list[ChangeLog], answers: list[str]) -> int:
        """Answer query row ``qi`` at its position (:mod:`skype.dskype.snapshots`): publish the
        messages before it, set the engine's clock to the query's, append the answer line;
        returns the messages of ``batch`` now published."""
        at, d = snapshots.due_query(queries, qi, self.hwm_seq, self.config.partition)
        cut = int(np.searchsorted(seq, at, side="left"))
        if cut > published:
            self._flush_subscribes(due, run)
            logs.append(self._publish(batch, seq, times, published, cut))
            published = cut
        kind = self.config.window.kind
        clock = snapshots.query_clock(d, at, kind)
        if clock is not None and self.config.advances() and clock > self.engine.clock:
            logs.append(self.engine.advance_log(clock))
        answers.append(snapshots.answer(self.engine, d, at, kind, self.config.partition, self.window.seq_of))
        return published

    def _floorable(self, sid: int) -> bool:
        """A replica the merge stage's floors may apply to: active, topk, replicated."""
        return self.active(sid) and self.hosted.spec(sid) is None and self.hosted.nrep(sid) > 1

    # ------------------------------------------------------------------ prefix activation
    def _sleep_step(self, rows: ReportRows, cmd_subs: np.ndarray) -> tuple[ReportRows, list[tuple[int, int]]]:
        """Sleeps of this prefix partition's replicas at the end of a batch (decided by
        :func:`skype.dskype.activation.decide_sleeps`, acted on here).  Returns the report rows
        and the sleeps ``(id, u)``."""
        activation, hosted = self.activation, self.hosted
        assert activation is not None  # called for prefix partitions only
        candidates = act.sleep_candidates(activation, rows, cmd_subs)
        running = np.array(sorted(sid for sid in candidates  # kinds never sleep
                                  if self.active(sid) and hosted.spec(sid) is None), np.int64)
        if len(running) == 0:
            return rows, []
        indptr, _, top_scores = self.engine.topk_arrays(running)
        reach = np.array([self._reach_of(sid) for sid in running.tolist()], np.float64)
        k = np.array([hosted.rows[sid].k for sid in running.tolist()], np.int64)
        slept = act.decide_sleeps(activation, running, k, reach, indptr, top_scores, self.hwm_seq,
                                  self.engine.topn_arrays, self.window.seq_of)
        for sid, until in slept:
            self.engine.unsubscribe(sid)
            activation.sleep(sid, until)
            self._hold(sid, -1, record=False, engine=True)
        return act.without_sleepers(rows, [(sid, hosted.rows[sid].nrep, hosted.rows[sid].k) for sid, _ in slept]), slept

    def _reach_of(self, sid: int) -> float:
        """:func:`skype.dskype.activation.reach_of` of a hosted record, kept per record (a command
        replacing it drops the entry)."""
        cached = self._reach.get(sid)
        if cached is None:
            row = self.hosted.rows[sid]
            assert self.config.activation is not None  # reaches are asked on prefix partitions only
            cached = self._reach[sid] = act.reach_of(self.config.activation, self.config.partition, row.alpha,
                                                     row.term_ids, row.weights)
        return cached

    # ------------------------------------------------------------------ keyword summaries
    def _hold(self, sid: int, delta: int, *, record: bool, engine: bool) -> None:
        """A replica starts (+1) or stops (-1) holding its terms here (keyword summaries)."""
        if self.coverage is not None:
            self.coverage.hold(self.hosted.rows[sid].term_ids, delta, record=record, engine=engine)

    def rebuild_engine_with(self, src: MessageBatch, src_seq: np.ndarray, extra: np.ndarray,
                             starting: set[int]) -> set[int]:
        """A fresh engine over the window share plus the backfilled rows ``extra`` of ``src`` (the
        core's windows only append: older messages need a rebuild), holding the replicas in the
        engine now (``starting``: woken right after, not yet).  Returns the
        replicated subscriptions whose local list changed; a single-replica one must not change."""
        share = np.sort(self.window.seqs())
        pos = np.searchsorted(src_seq, share).clip(0, max(len(src_seq) - 1, 0))
        if len(share) and not (len(src_seq) and (src_seq[pos] == share).all()):
            raise InputError("E026", detail="the message stream no longer holds the partition's window share")
        rows = np.sort(np.concatenate([pos if len(share) else np.zeros(0, np.int64), extra]))
        running = [sid for sid in sorted(self.hosted.rows) if self.active(sid) and sid not in starting]
        before = self._lists(running)
        self.engine = self.config.make_engine()
        self.floors.engine_replaced(self.hwm_seq)
        self.window = WindowShare()
        if running:
            self.hosted.subscribe(self.engine, running)
        self._load_window(src.take(rows), src_seq[rows])
        after = self._lists(running)
        changed = set()
        for sid in running:
            if not np.array_equal(before[sid][0], after[sid][0]) or not np.array_equal(before[sid][1], after[sid][1]):
                if self.hosted.nrep(sid) == 1:
                    raise InputError("E026", detail=f"a backfilled message entered single-replica subscription {sid}")
                changed.add(sid)
        return changed

    def _load_window(self, batch: MessageBatch, seq: np.ndarray) -> None:
        """Publish window messages (``seq`` order) into a fresh engine and share, and set its clock."""
        spec = self.config.window
        if len(batch):
            times = spec.engine_times(seq, batch.t)
            clock = spec.clock(self.hwm_seq, self.hwm_t)
            live = np.flatnonzero(spec.live(times, clock))
            batch, seq, times = batch.take(live), seq[live], times[live]
            if len(batch):
                self.engine.publish_batch(MessageBatch(batch.ids, batch.x, batch.y, times, batch.terms))
                self.window.append(batch.ids, seq, times)
        clock = spec.clock(self.hwm_seq, self.hwm_t)
        if self.config.advances() and self.hwm_seq >= 0 and clock > self.engine.clock:
            self.engine.advance_log(clock)

    def _publish(self, batch: MessageBatch, seq: np.ndarray, times: np.ndarray, lo: int, hi: int) -> ChangeLog:
        rows = np.arange(lo, hi, dtype=np.int64)
        part = batch.take(rows)
        log = self.engine.publish_batch(MessageBatch(part.ids, part.x, part.y, times[lo:hi], part.terms))
        self.window.append(part.ids, seq[lo:hi], times[lo:hi])
        return log

    def _flush_subscribes(self, due: Commands, run: dict[int, int]) -> None:
        if not run:
            return
        rows = np.array(list(run.values()), np.int64)
        self.floors.subscribed(due.subs.ids[rows].tolist(), self.hwm_seq + 1)  # the batch's first position
        for j in rows.tolist():
            self.hosted.add_from(due, j)
            self._hold(int(due.subs.ids[j]), +1, record=True, engine=True)
        self.hosted.subscribe(self.engine, [int(due.subs.ids[j]) for j in rows.tolist()])
        for j in rows.tolist():
            if self.activation is not None and int(due.nrep[j]) > 1 and due.spec[j] is None:
                self.activation.fresh.add(int(due.subs.ids[j]))
        run.clear()

    def _lists(self, sub_ids: list[int]) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Current local top-k (ids, scores, seqs) of hosted subscriptions."""
        if not sub_ids:
            return {}
        indptr, ids, scores, seqs = self._arrays(np.array(sub_ids, np.int64))
        return {s: (ids[indptr[i]:indptr[i + 1]], scores[indptr[i]:indptr[i + 1]], seqs[indptr[i]:indptr[i + 1]])
                for i, s in enumerate(sub_ids)}

    def _arrays(self, sub_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Current local results as CSR ``(indptr, ids, scores, seqs)`` (every kind)."""
        return result_arrays(self.engine, [self.hosted.spec(int(s)) for s in sub_ids.tolist()], sub_ids,
                             self.window.seq_of, self._name_rank)

    def _report_rows(self, logs: list[ChangeLog], cmd_subs: np.ndarray, before: dict,
                     before_meta: dict, woken: Sequence[int] = (), restated: AbstractSet[int] = frozenset()) -> ReportRows:
        """The batch's report rows: command-touched subscriptions, woken replicas and lists a
        backfill rebuild changed (their whole list), then changed lists."""
        parts: list[ReportRows] = []
        # subscriptions whose hosting a command touched: before/after state, one by one (few)
        builder = ReportBuilder()
        after = self._lists([int(s) for s in cmd_subs if self.active(int(s))])
        for s in (int(s) for s in cmd_subs):
            hosted_before, nrep_before = before_meta[s]
            hosted_after = self.active(s)
            if not hosted_before and not hosted_after:
                continue
            nrep_after = self.hosted.nrep(s) if hosted_after else 0
            k = self.hosted.rows[s].k if hosted_after else 0
            b_list = before[s] if hosted_before and nrep_before == 1 else EMPTY_LIST
            builder.add(s, STATE, (hosted_before, nrep_before), (hosted_after, nrep_after), k,
                        after.get(s, EMPTY_LIST), b_list)
        stated = [s for s in sorted(set(woken) | set(restated)) if s not in before_meta and self.active(s)]
        lists = self._lists(stated)
        woken_set = set(woken)
        for s in stated:  # a woken replica was dormant: it was no list of the merge stage
            nrep, k = self.hosted.rows[s].nrep, self.hosted.rows[s].k
            builder.add(s, STATE, (s not in woken_set, nrep), (True, nrep), k, lists[s])
        parts.append(builder.rows())
        # subscriptions whose local top-k the batch changed (same instance): vectorised
        exclude = np.union1d(cmd_subs, np.array(stated, np.int64)) if stated else cmd_subs
        parts.append(self._change_rows(*net_changes(logs, exclude)))
        return ReportRows.concat(parts)

    def _pack_reports(self, rows: ReportRows) -> tuple[dict[int, bytes], int]:
        """Report blobs per merge bucket, and the number of report rows."""
        if len(rows) == 0:
            return {}, 0
        return pack_by_bucket(rows, bucket_of(rows.row["sub"], self.config.num_buckets), self.config.partition,
                              self.hwm_seq + 1), len(rows)

    def _change_rows(self, sub: np.ndarray, msg: np.ndarray, net: np.ndarray) -> ReportRows:
        """:func:`skype.dskype.reports.change_rows` of the subscriptions with a non-zero net change."""
        if len(sub) == 0:
            return ReportRows.empty()
        touched = sub[np.flatnonzero(np.r_[True, sub[1:] != sub[:-1]])]
        rows_info = [self.hosted.rows[int(s)] for s in touched.tolist()]
        nrep = np.fromiter((r.nrep for r in rows_info), np.int32, len(rows_info))
        k = np.fromiter((r.k for r in rows_info), np.int64, len(rows_info))
        return change_rows(sub, msg, net, touched, self._arrays(touched), nrep, k)
