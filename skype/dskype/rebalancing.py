"""Live rebalancing on the driver: statistics, the policy's decision, the next table version.

After each micro-batch b (in the ``foreachBatch`` sink, before batch b+1 starts) the driver's
:class:`Rebalancer` of an adaptive pipeline:

1. advances its own copy of the distribution (the build, with the subscriptions live at each
   position registered) up to b's high-water mark ``h_b``: the commands positioned at ``h_b + 1``
   or before, and the batch's messages.  The statistics source ``replay`` (a staged stream)
   routes them through the copy with keyword summaries exactly as ``partition-sim`` does;
   ``reports`` (any other stream) applies what the partitions reported in their metrics rows
   (:mod:`skype.dskype.loadstats`: the same copy, except the messages per partition), folded
   and written once as ``stats-<b>.pkl`` before the decision, so that a re-run batch decides
   from them again;
2. folds them (``FADING[policy]``), asks the policy for a plan (:func:`skype.partitioning.rebalance.decide`)
   and applies it to the copy.  With ``--rebalance-load measured`` the policy plans with each
   partition's measured engine and report seconds of the batch instead of its paper's model
   (:mod:`skype.partitioning.rebalance.measured`); those loads are written to
   ``loads-<b>.json`` before the decision, so a batch that re-runs decides from them again, not
   from its own timings;
3. if units moved, writes table version v+1 (the copy's locator) effective from ``h_b + 1``
   (:mod:`skype.dskype.handover` applies it on the partitions), then its own state
   ``state-<b>.pkl`` (the copy and its stream cursor), both atomically; and a record of the
   decision ``decision-<b>.json``.

With ``never`` the driver keeps nothing: it records an empty decision per batch.

**Restart.**  A batch that re-runs finds ``state-<b>.pkl`` (its decision was taken: the same
version file stands) or takes the state of batch b-1 and decides again from the same statistics
(the policies are deterministic; an existing version file of that batch is kept as it is).  The
replay takes the stream from the staged workload, which the driver loads on every start; the
reports come with the batch's rows, or from ``stats-<b>.pkl`` when the batch was decided before.
Adaptive methods need the stream-files source (staged, directories, or raw files the executors
tokenize), whose offsets carry the table versions (``E063`` for Kafka).  Only the last two states (and statistics) are kept.

:func:`rebalancing_report` gathers, per move, the units and subscriptions the policy moved, the
subscriptions the partitions handed over and the state bytes the new owners took over, and the
latency of the batch that applied it against the run's median batch (the spike).
"""

from __future__ import annotations

import copy
import json
import pickle
import time
from pathlib import Path

import numpy as np

from skype.errors import InputError, OperationalError
from skype.partitioning.rebalance import FADING, PAPER_POLICY, apply_plan, check_policy, decide
from skype.partitioning.units import UnitDistribution
from skype.dskype.files import write_once, write_replacing
from skype.dskype.handover import HANDOVER_PREFIX, TableVersion, UnitLocator, routes_everywhere, version_path, write_version
from skype.dskype import loadstats
from skype.dskype.plan import rebalance_dir
from skype.dskype.results import partition_work


def policy_of(policy: str, method: str) -> str:
    """The policy a pipeline runs: ``paper`` is each adaptive method's own (``PAPER_POLICY``)."""
    return PAPER_POLICY[method] if policy == "paper" else policy


def check_rebalance(policy: str, methods, staged: bool, versioned: bool | None = None,
                    stats: str = "auto") -> None:
    """A policy other than ``never`` needs adaptive methods it serves; adaptive methods need a
    source that carries the table versions in its offsets (``versioned``: the stream-files
    source, staged by the driver, given with ``--messages-dir`` or read raw with
    ``--vocabulary``; not Kafka, whose source does not carry them); statistics replayed by the driver
    (``stats = "replay"``) need a staged stream, reported ones (:mod:`skype.dskype.loadstats`) do not."""
    from skype.partitioning import capabilities_of

    versioned = staged if versioned is None else versioned
    adaptive = [m for m in methods if capabilities_of(m).adaptive]
    if policy != "never":
        static = [m for m in methods if not capabilities_of(m).adaptive]
        if static:
            raise InputError("E063", detail=f"--rebalance {policy} moves the units of an adaptive method "
                                            f"(agrid, kdt, qt, aqwa); {static[0]!r} has none")
        for m in methods:
            check_policy(policy_of(policy, m), m)
    if adaptive and not versioned:
        raise InputError("E063", detail=f"method {adaptive[0]!r} needs the stream-files source (not Kafka): "
                                        "only its offsets carry the ownership table versions")
    if adaptive and policy != "never" and not staged and stats == "replay":
        raise InputError("E063", detail="statistics replayed by the driver need a staged stream (no --messages-dir): "
                                        "use the partitions' reports (rebalance_stats 'reports' or 'auto')")


LOADS = ("model", "measured")


class Rebalancer:
    """The driver's half of live rebalancing for one pipeline (module docstring)."""

    def __init__(self, directory: Path, dist: UnitDistribution, policy: str, inputs, pipeline: int,
                 load: str = "model", source: str = "replay", num_messages: int | None = None) -> None:
        if load not in LOADS:
            raise InputError("E022", what="rebalancing load", value=load, choices=", ".join(LOADS))
        if source not in ("replay", "reports"):
            raise InputError("E022", what="rebalancing statistics", value=source, choices="replay, reports")
        if source == "replay" and inputs is None and policy != "never":
            raise InputError("E063", detail="statistics replayed by the driver need the staged workload")
        self.directory = Path(directory)
        self._decided_after: dict[int, int] = {}  # table version -> the batch after which it was decided
        self.policy = policy
        self.load = load
        self.source = source  # "replay": the staged stream; "reports": the partitions' metrics rows
        self.inputs = inputs
        # the stream's length when known (its last batch decides nothing)
        self.num_messages = int(inputs.num_messages) if inputs is not None else num_messages
        self.pipeline = pipeline
        self.base = dist
        self.directory.mkdir(parents=True, exist_ok=True)
        if not version_path(self.directory, 0).exists():
            write_version(self.directory, TableVersion(0, 0, -1, UnitLocator.of(dist)))
        self.state: dict | None = None  # {"batch", "dist", "cursor", "versions"}

    # ------------------------------------------------------------------ the driver's copy
    def _fresh(self) -> dict:
        dist = copy.deepcopy(self.base)
        if self.source == "reports":  # every subscription comes as a reported command, batch 0's first
            dist.remove_subscriptions(dist.table.records.ids[dist.table.alive])
            dist.reset_statistics()
            return {"batch": -1, "dist": dist, "cursor": (0, 0, 0), "versions": 1}
        ids = [self.inputs.subscriptions.ids] + [b.ids for op, b in self.inputs.steps if op == "sub"]
        dist.remove_subscriptions(np.unique(np.concatenate(ids)) if ids else np.zeros(0, np.int64))
        dist.reset_statistics()
        if len(self.inputs.subscriptions):
            dist.route_subscriptions(self.inputs.subscriptions, None)
        return {"batch": -1, "dist": dist, "cursor": (0, 0, 0), "versions": 1}

    def _advance(self, dist: UnitDistribution, cursor: tuple[int, int, int], end: int) -> tuple[int, int, int]:
        """Replay the stream's steps up to ``end`` messages (and the commands right after them).

        A run of consecutive unsubscribes is removed in one call: nothing is routed between
        them, so the statistics are those of removing them one by one (a drift stream brings its
        departures as hundreds of single-id steps; one call each cost 2 ms at 100k subscriptions,
        seconds per batch).  Kind subscriptions (``ksub``) are not in the copy: the policies' load
        model counts topk subscriptions."""
        steps, cursor = self.inputs.steps_upto(cursor, end)
        leaving: list[np.ndarray] = []
        for op, payload in steps:
            if op == "unsub":
                leaving.append(np.atleast_1d(np.asarray(payload, np.int64)))
                continue
            if leaving:
                dist.remove_subscriptions(np.concatenate(leaving))
                leaving = []
            if op == "msgs":
                dist.route_messages(payload)
            elif op == "sub":
                dist.route_subscriptions(payload, None)
            # "ksub" (range, knn, terms): outside the policies' load model, which counts topk
            # subscriptions; a kind subscription still moves with its home unit (handover)
        if leaving:
            dist.remove_subscriptions(np.concatenate(leaving))
        return cursor

    def _state_path(self, batch: int) -> Path:
        return self.directory / f"state-{batch:08d}.pkl"

    def _load(self, batch: int) -> dict:
        with open(self._state_path(batch), "rb") as fh:
            return pickle.load(fh)

    def _save(self, state: dict) -> None:
        path = self._state_path(state["batch"])
        write_replacing(path, pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))
        for old in (self._state_path(state["batch"] - 2), self.directory / f"stats-{state['batch'] - 2:08d}.pkl"):
            if old.exists():
                old.unlink()

    # ------------------------------------------------------------------ one batch
    def after_batch(self, batch: int, stages: list[dict]) -> dict:
        """Decide after ``batch`` (its partitions' metrics rows give the high-water mark)."""
        if self.policy == "never":  # the build's tables stay: no statistics to keep
            return self._record({"batch": batch, "version": None})
        reports = self._take_reports(stages)
        if self._state_path(batch).exists() and (self.state is None or self.state["batch"] != batch - 1):
            self.state = self._load(batch)  # a re-run batch: its decision stands
            return self._decision(batch) or {}
        if self.state is None or self.state["batch"] != batch - 1:
            if batch > 0 and self.source == "reports" and not any(self.directory.glob("state-*.pkl")):
                raise OperationalError("E065", batch=batch - 1, path=str(self.directory))  # nothing to replay from
            if batch == 0 or not any(self.directory.glob("state-*.pkl")):
                self.state = self._fresh()
                if batch > 0:  # no decision was ever recorded: replay the stream up to here
                    self.state["batch"] = batch - 1
            elif self._state_path(batch - 1).exists():
                self.state = self._load(batch - 1)
            else:
                raise OperationalError("E065", batch=batch - 1, path=str(self.directory))
        state = dict(self.state)
        ups = [m["upto"] for m in stages if m.get("stage") == "partition" and m.get("pipeline") == self.pipeline]
        record: dict = {"batch": batch, "version": None}
        upto = max(ups) if ups else None
        if upto is not None and self.num_messages is not None and upto >= self.num_messages:
            self._advance_batch(state, batch, reports, upto)  # the stream's end: nothing left to balance
        elif upto is not None:
            dist = state["dist"]
            self._advance_batch(state, batch, reports, upto)
            dist.fold_statistics(FADING[self.policy])
            loads = self._loads(batch, stages, dist.num_partitions) if self.load == "measured" else None
            t0 = time.perf_counter()
            plan = decide(self.policy, dist, partition_loads=loads)
            moved, nbytes = apply_plan(dist, plan)
            record.update(upto=upto, decide_s=time.perf_counter() - t0, plan=plan.summary())
            if loads is not None:
                record["measured_loads"] = loads.tolist()
            if moved:
                v = state["versions"]
                if not version_path(self.directory, v).exists():
                    write_version(self.directory, TableVersion(v, upto, batch, UnitLocator.of(dist)))
                state["versions"] = v + 1
                record.update(version=v, effective=upto, units_moved=int(len(plan.units)),
                              subscriptions_moved=int(moved), bytes_moved=int(nbytes))
        state["batch"] = batch
        self._save(state)
        self.state = state
        self._prune_handovers(batch)
        return self._record(record)

    def _prune_handovers(self, batch: int) -> None:
        """Remove the hand-over files no batch can read again.  Version v decided after batch d is
        announced by batch d + 1 (its offset is planned after d's commit) and put in force by
        batch d + 2, whose partitions read its files; a rebuild reads its switch from the durable
        log, never from the files.  When the sink of ``batch`` runs, every earlier batch is
        committed, so the files of a version with ``d + 2 < batch`` are read for the last time."""
        for path in self.directory.glob(f"{HANDOVER_PREFIX}*-from-*.pkl"):
            version = int(path.name[len(HANDOVER_PREFIX):].split("-", 1)[0])
            decided = self._decided_after.get(version)
            if decided is None:
                with open(version_path(self.directory, version), "rb") as fh:
                    decided = self._decided_after[version] = int(pickle.load(fh).after_batch)
            if 0 <= decided and decided + 2 < batch:
                path.unlink(missing_ok=True)

    def _take_reports(self, stages: list[dict]) -> dict[int, str]:
        """Partition -> its statistics report (:mod:`skype.dskype.loadstats`), taken out of this
        pipeline's rows: the metrics file keeps only their size (``load_stats_bytes``)."""
        reports = {}
        for m in stages:
            if m.get("stage") == "partition" and m.get("pipeline") == self.pipeline and loadstats.STATS_KEY in m:
                reports[int(m["partition"])] = m.pop(loadstats.STATS_KEY)
                m["load_stats_bytes"] = len(reports[int(m["partition"])])
        return reports

    def _advance_batch(self, state: dict, batch: int, reports: dict[int, str], upto: int) -> None:
        """Advance the copy through ``batch``: replay the staged stream up to ``upto``, or apply
        the batch's reported statistics (:mod:`skype.dskype.loadstats`)."""
        if self.source == "replay":
            state["cursor"] = self._advance(state["dist"], state["cursor"], upto)
        else:
            loadstats.advance(state["dist"], self._batch_stats(batch, reports, state["dist"].num_partitions))

    def _batch_stats(self, batch: int, reports: dict[int, str], num_partitions: int) -> loadstats.BatchStats:
        """The folded reports of ``batch``, written once before the decision (``stats-<b>.pkl``): a
        batch that re-runs decides from the same statistics, whatever its rows hold."""
        path = self.directory / f"stats-{batch:08d}.pkl"
        if not path.exists():
            missing = sorted(set(range(num_partitions)) - set(reports))
            if missing:  # a partial fold would be silently wrong (partition 0 holds the message side)
                raise OperationalError("E067", batch=batch, pipeline=self.pipeline, missing=missing)
            stats = loadstats.fold_reports(reports, num_partitions)
            write_once(path, pickle.dumps(stats, protocol=pickle.HIGHEST_PROTOCOL))
        with open(path, "rb") as fh:  # the first attempt's file, whoever wrote it
            return pickle.load(fh)

    def _loads(self, batch: int, stages: list[dict], num_partitions: int) -> np.ndarray:
        """The measured loads batch ``batch``'s decision uses, written before the decision: a batch
        that re-runs (a restart between the decision and its table version) decides from the same
        loads, not from its own timings, so it takes the same decision."""
        path = self.directory / f"loads-{batch:08d}.json"
        if path.exists():
            return np.asarray(json.loads(path.read_text()), np.float64)
        loads = partition_work([m for m in stages if m.get("pipeline") == self.pipeline], num_partitions)
        if not write_once(path, json.dumps(loads.tolist()).encode()):  # a duplicate attempt wrote them first
            return np.asarray(json.loads(path.read_text()), np.float64)
        return loads

    def _record(self, record: dict) -> dict:
        """Write the decision of a batch atomically (a re-run batch replaces it)."""
        name = f"decision-{record['batch']:08d}.json"
        write_replacing(self.directory / name, json.dumps(record, default=float).encode())
        return record

    def _decision(self, batch: int) -> dict | None:
        path = self.directory / f"decision-{batch:08d}.json"
        return json.loads(path.read_text()) if path.exists() else None


def attach(plan, policy: str, inputs, load: str = "model") -> dict[int, Rebalancer]:
    """One rebalancer per adaptive pipeline (version 0 written before the query); ``load``: plan
    with the policy's model of the load, or with the partitions' measured work.  Its statistics
    come from the run's source (``RunSettings.statistics_source``): a replay of the staged
    ``inputs``, or the partitions' reports (``inputs`` may then be None)."""
    source = plan.settings.statistics_source() or "replay"
    out = {}
    for pipe in plan.pipelines:
        if routes_everywhere(pipe.distribution):
            out[pipe.index] = Rebalancer(rebalance_dir(plan.run_dir, pipe.method), pipe.distribution,
                                         policy_of(policy, pipe.method), inputs if source == "replay" else None,
                                         pipe.index, load, source, plan.stream_messages)
    return out


def rebalancing_report(plan, outcome, pipeline) -> dict:
    """Per move: the batch that decided it, the one that applied it, units and subscriptions the
    policy moved (its model: replicas), subscriptions the partitions handed over, state bytes the
    new owners took over, and that batch's latency against the median batch."""
    directory = rebalance_dir(plan.run_dir, pipeline.method)
    if not directory.exists():
        return {}
    latency = {int(p["batchId"]): float(p["durationMs"].get("triggerExecution", 0.0)) for p in outcome.progress}
    median = float(np.median(list(latency.values()))) if latency else 0.0
    handed: dict[int, dict] = {}
    for path in sorted(plan.metrics_dir.glob("batch-*.json")):
        record = json.loads(path.read_text())
        parts = [m for m in record["stages"] if m.get("stage") == "partition" and m["pipeline"] == pipeline.index]
        if any(m.get("handover_versions") for m in parts):
            handed[int(record["batch"])] = {key: sum(int(m.get(key, 0)) for m in parts)
                                            for key in ("handover_in", "handover_out", "handover_bytes")}
    moves = []
    for path in sorted(directory.glob("decision-*.json")):
        d = json.loads(path.read_text())
        if d.get("version") is None:
            continue
        # announced by the next batch, in force (handed over) from the one after (skype.dskype.handover)
        applied = next((b for b in sorted(handed) if b >= d["batch"] + 2), None)
        h = handed.get(applied, {}) if applied is not None else {}
        spike = latency.get(applied) if applied is not None else None
        moves.append({"version": d["version"], "decided_after_batch": d["batch"], "effective": d["effective"],
                      "applied_in_batch": applied, "units_moved": d["units_moved"],
                      "policy_subscriptions_moved": d["subscriptions_moved"], "policy_bytes_moved": d["bytes_moved"],
                      "subscriptions_handed_over": h.get("handover_in", 0),
                      "state_bytes_moved": h.get("handover_bytes", 0),
                      "batch_latency_ms": spike, "median_batch_latency_ms": median,
                      "latency_spike": (spike / median) if spike is not None and median > 0 else None,
                      "imbalance_before": d["plan"]["imbalance_before"],
                      "imbalance_predicted": d["plan"]["imbalance_predicted"]})
    return {"rebalance_policy": policy_of(plan.settings.distribution.rebalance, pipeline.method), "moves": len(moves),
            "subscriptions_moved": int(sum(m["subscriptions_handed_over"] for m in moves)),
            "state_bytes_moved": int(sum(m["state_bytes_moved"] for m in moves)), "rebalance_moves": moves}
