"""A run's outcome read back from its run directory: the final results and the metrics (see
``docs/spark.md`` for each key).

**Final results** come from the stateful stages: in the stream's last batch every partition and
merge bucket sends the final top-k of the subscriptions it answers for, and the sink's tasks write
them as ``results/<method>/batch-<id>-part-<p>.jsonl``, each part sorted by id.  The driver only
merges the sorted parts of the latest such batch into one file (a k-way merge: its memory is one
line per part, not one top-k per subscription).  An open stream gets them the same way when a
producer ends its commands with a results request (``{"op": "results"}``).  When no stage wrote
them, or a batch after the answer changed a result (an open stream without a final request, a
run stopped early), the driver folds the event files instead: each batch's rows
in batch order; inside a batch, a subscription that moved (removed on one partition, created on
another: two files) is removed before it is created again.
"""

from __future__ import annotations

import heapq
import json
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import numpy as np

from skype.model import Match
from skype.dskype.staging import suffix

if TYPE_CHECKING:
    from skype.dskype.plan import Pipeline, Plan, RunOutcome


def fold_events(rows, state: dict | None = None) -> dict[int, dict[int, tuple[float, int]]]:
    """Apply event rows (in batch order) to ``{sub: {message: (score, seq)}}``: ``created`` starts
    an empty top-k, ``left`` removes, ``entered`` adds, ``removed`` deletes the subscription."""
    state = {} if state is None else state
    for row in rows:
        sid = row["sub"]
        if row["created"] or sid not in state:
            state[sid] = {}
        entries = state[sid]
        for m in row["left"] or ():
            entries.pop(m, None)
        for e in row["entered"] or ():
            entries[e["id"]] = (e["score"], e["seq"])
        if row["removed"]:
            del state[sid]
    return state


def ranked(entries: dict[int, tuple[float, int]]) -> list[Match]:
    """A top-k in ranking order: score descending, then the newer message (larger seq) first."""
    return [Match(m, sc) for m, (sc, _) in sorted(entries.items(), key=lambda kv: (-kv[1][0], -kv[1][1]))]


def batch_of(path: Path) -> int:
    """The batch id in an output file's name (``batch-<id>-part-<p>.<fmt>``, ``batch-<id>.json``)."""
    return int(path.name.split(".", 1)[0].split("-")[1])


def completed_batch(plan: Plan) -> int:
    """The last batch whose outputs are all written: its metrics file is written by the driver
    after the batch's job (so after every task's event, result and answer files), and batches
    complete in order; -1 before the first.  Files of later batches are those of a batch stopped
    or failed mid-way, some tasks done and others not: the batch runs again, rewriting them."""
    return max((batch_of(p) for p in plan.metrics_dir.glob("batch-*.json")), default=-1)


def _completed(paths, upto: int) -> list[Path]:
    return sorted(p for p in paths if batch_of(p) <= upto)


def event_files(plan: Plan, pipeline: Pipeline) -> list[Path]:
    """A pipeline's event files of completed batches (:func:`completed_batch`) in batch order
    (``batch-<id>-part-<p>``: the name sorts by batch; a subscription's events of one batch are in
    one part)."""
    return _completed(plan.events_dir_of(pipeline).glob(f"batch-*.{suffix(plan.settings.sink.events_format)}"),
                      completed_batch(plan))


def read_event_rows(path: Path, fmt: str) -> list[dict]:
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def stage_result_files(plan: Plan, pipeline: Pipeline) -> list[Path]:
    """The parts of the final results written by the stateful stages, of the latest batch that
    wrote them; none when the stages did not see the stream end, or when a later batch changed a
    result (a results request answered mid-stream: its answer is not the final one)."""
    parts = _completed(plan.results_dir_of(pipeline).glob("batch-*-part-*.jsonl"), completed_batch(plan))
    if not parts:
        return []
    last = parts[-1].name.split("-part-")[0]
    if any(path.name.split("-part-")[0] > last for path in event_files(plan, pipeline)):
        return []
    return [p for p in parts if p.name.split("-part-")[0] == last]


def _result_lines(path: Path) -> Iterator[tuple[int, list[Match]]]:
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                obj = json.loads(line)
                yield int(obj["id"]), [Match(int(e["id"]), float(e["score"])) for e in obj["topk"]]


def check_results_visible(plan: Plan, pipeline: Pipeline, result_events: int) -> None:
    """E087 when the executors reported result events but the run directory holds neither their
    event files nor stage results: they wrote somewhere the driver cannot see (a directory that is
    not shared by every node), and folding nothing would write an empty results file.  With
    ``--sink kafka`` the driver has no events to fold: E088 unless the stages sent the results."""
    if plan.settings.sink.kind == "kafka" and not stage_result_files(plan, pipeline):
        from skype.errors import InputError

        raise InputError("E088", method=pipeline.method, topic=plan.settings.sink.events_topic)
    if result_events and not stage_result_files(plan, pipeline) and not event_files(plan, pipeline):
        from skype.errors import OperationalError

        raise OperationalError("E087", run_dir=plan.run_dir, events=result_events)


def final_results(plan: Plan, pipeline: Pipeline) -> Iterator[tuple[int, list[Match]]]:
    """Every subscription's final top-k, by ascending id (the centralized CLI's results): the
    stateful stages' answers merged (see module docstring), else the events folded."""
    parts = stage_result_files(plan, pipeline)
    if parts:
        return heapq.merge(*(_result_lines(p) for p in parts), key=lambda row: row[0])
    return iter(folded_results(plan, pipeline))


def folded_results(plan: Plan, pipeline: Pipeline) -> list[tuple[int, list[Match]]]:
    """The final top-k from the event files, folded in batch order on the driver (memory: one
    top-k per subscription); the fallback of :func:`final_results`."""
    state: dict = {}
    batches: dict[str, list[dict]] = {}
    for path in event_files(plan, pipeline):
        batches.setdefault(path.name.split("-part-")[0], []).extend(read_event_rows(path, plan.settings.sink.events_format))
    for name in sorted(batches):
        # a subscription that moved within the batch (unsubscribed on one partition, subscribed on
        # another: two parts) is removed before it is created again
        rows = sorted(batches[name], key=lambda r: 0 if r["removed"] and not r["created"] else 1)
        fold_events(rows, state)
    return [(sid, ranked(state[sid])) for sid in sorted(state)]


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, np.float64), q)) if values else 0.0


def partition_work(stages: list[dict], num_partitions: int) -> np.ndarray:
    """Each partition's work in the given metrics rows: its engine and report seconds (the part
    that follows the subscriptions it hosts; the load imbalance of the metrics, and the measured
    load live rebalancing can plan with)."""
    work = np.zeros(num_partitions)
    for m in stages:
        if m.get("stage") == "partition":
            work[int(m["partition"])] += float(m["engine_s"]) + float(m["report_s"])
    return work


def run_metrics(plan: Plan, outcome: RunOutcome, pipeline: Pipeline) -> dict:
    """A pipeline's metrics over the run (see ``docs/spark.md`` for each definition); batch times
    are shared by the run's pipelines."""
    records = []
    for batch in outcome.batches:
        path = plan.metrics_dir / f"batch-{batch:08d}.json"
        if path.exists():
            record = json.loads(path.read_text())
            record["stages"] = [m for m in record["stages"] if m["pipeline"] == pipeline.index]
            record["events"] = record["events"].get(str(pipeline.index), 0)
            records.append(record)
    parts = [m for r in records for m in r["stages"] if m["stage"] == "partition"]
    merges = [m for r in records for m in r["stages"] if m["stage"] == "merge"]
    by_batch = {r["batch"]: r for r in records}
    progress = [p for p in outcome.progress if p["batchId"] in by_batch]
    latency = [float(p["durationMs"].get("triggerExecution", 0.0)) for p in progress]
    messages = (max(m["upto"] for m in parts) - min(m["first_seq"] for m in parts)) if parts else 0
    busy_s = sum(latency) / 1000.0
    P = plan.settings.distribution.partitions
    work = partition_work(parts, P)
    received = np.zeros(P)
    hosted = np.zeros(P)
    record_copies = np.zeros(P)
    for m in parts:
        received[m["partition"]] += m["messages"]
    last: dict[int, dict] = {}
    for m in parts:
        last[m["partition"]] = m
    for p, m in last.items():
        hosted[p] = m.get("active", m["hosted"])  # replicas in an engine (prefix: awake ones)
        record_copies[p] = m["hosted"]
    distinct = sum(m["hosted_inverse_replication"] for m in last.values())
    seen: set[tuple[str, int]] = set()
    steady_hits = steady_total = 0
    for r in records:
        for m in r["stages"]:
            ident = (m["stage"], m.get("partition", m.get("bucket")))
            if ident in seen:
                steady_total += 1
                steady_hits += bool(m["hit"])
            seen.add(ident)
    written = [sum(m["state_bytes_written"] for m in r["stages"]) for r in records]
    written_parts = [sum(m["state_bytes_written"] for m in r["stages"] if m["stage"] == "partition") for r in records]
    written_merge = [sum(m["state_bytes_written"] for m in r["stages"] if m["stage"] == "merge") for r in records]
    mean_work = float(work.mean()) if P else 0.0
    return {
        "method": pipeline.method, "partitions": P, "merge_buckets": plan.settings.distribution.merge_buckets,
        "batch_size": plan.settings.control.batch_size, "window": plan.settings.window.centralized(),
        "batches": len(records), "messages": int(messages), "resumed": plan.resumed,
        "stopped_early": outcome.stopped_early,
        "throughput_msgs_per_s": messages / busy_s if busy_s > 0 else 0.0,
        "wall_throughput_msgs_per_s": messages / outcome.wall_s if outcome.wall_s > 0 else 0.0,
        "wall_s": outcome.wall_s, "batch_time_s": busy_s,
        "batch_latency_ms_p50": _percentile(latency, 50), "batch_latency_ms_p99": _percentile(latency, 99),
        "batch_latency_ms": latency,
        "batch_durations_ms": [p["durationMs"] for p in progress],
        "communication_per_message": float(received.sum() / messages) if messages else 0.0,
        # prefix with keyword summaries: window messages partitions read back for newly live terms
        "backfill_per_message": (sum(int(m.get("backfill_messages", 0)) for m in parts) / messages
                                 if messages else 0.0),
        "backfill_rebuilds": sum(int(m.get("backfill_rebuilds", 0)) for m in parts),
        "backfill_s": sum(float(m.get("backfill_s", 0.0)) for m in parts),
        "replication_ratio": float(hosted.sum() / distinct) if distinct > 0 else 0.0,
        "record_replication_ratio": float(record_copies.sum() / distinct) if distinct > 0 else 0.0,
        "replica_sleeps": sum(int(m.get("sleeps", 0)) for m in parts),
        "replica_wakes": sum(int(m.get("wakes", 0)) for m in parts),
        "replication_ratio_mean": _mean_replication(records, P),
        "load_imbalance": float(work.max() / mean_work) if mean_work > 0 else 1.0,
        "work_s_per_partition": work.tolist(), "messages_per_partition": received.tolist(),
        "cache_hit_rate": (sum(bool(m["hit"]) for m in parts) / len(parts)) if parts else 0.0,
        "cache_hit_rate_steady": (steady_hits / steady_total) if steady_total else 0.0,
        "merge_cache_hit_rate": (sum(bool(m["hit"]) for m in merges) / len(merges)) if merges else 0.0,
        "cache_rebuilds": sum(not m["hit"] for m in parts + merges),
        "rebuild_s": sum(m["rebuild_s"] for m in parts + merges),
        "state_bytes_written_per_batch": float(np.mean(written)) if written else 0.0,
        "state_bytes_written_per_batch_steady": float(np.mean(written[1:])) if len(written) > 1 else 0.0,
        "state_bytes_written_partitions_per_batch": float(np.mean(written_parts)) if written_parts else 0.0,
        "state_bytes_written_merge_per_batch": float(np.mean(written_merge)) if written_merge else 0.0,
        "state_bytes_written_partitions_per_batch_steady": float(np.mean(written_parts[1:])) if len(written) > 1 else 0.0,
        "state_bytes_written_merge_per_batch_steady": float(np.mean(written_merge[1:])) if len(written) > 1 else 0.0,
        "batch_latency_ms_p50_steady": _percentile(latency[1:], 50),
        "state_bytes_written": written,
        "result_events": sum(r["events"] for r in records),
        "engine_cache": plan.settings.control.engine_cache,
        "routing_bytes": plan.routing_bytes, "routing_table_bytes": plan.routing_table_bytes,
        "driver_peak_rss_bytes": outcome.driver_peak_rss_bytes,
        "dead_letters": count_dead_letters(plan),
        "host_peak_rss_bytes": max((int(m.get("host_peak_rss_bytes", 0)) for m in parts + merges), default=0),
        "batch_breakdown_s": _breakdown(records, progress),
    }


def _mean_replication(records: list[dict], num_partitions: int) -> float:
    """Awake replicas per distinct subscription, averaged over the batches where every partition
    reported (the end-of-run ratio alone hides how replicas sleep and wake along the stream)."""
    ratios = []
    for r in records:
        parts = [m for m in r["stages"] if m["stage"] == "partition"]
        distinct = sum(m["hosted_inverse_replication"] for m in parts)
        if len(parts) == num_partitions and distinct > 0:
            ratios.append(sum(m.get("active", m["hosted"]) for m in parts) / distinct)
    return float(np.mean(ratios)) if ratios else 0.0


def _breakdown(records: list[dict], progress: list[dict]) -> dict:
    """Where the batches' time went, summed over the run (seconds): Spark's own phases
    (``durationMs``), the sink, and inside the partition tasks (max over partitions per batch):
    reading input rows and state, the host call (engine, reports, RPC) and the state writes."""
    out: dict[str, float] = {}
    for p in progress:
        for name, ms in p.get("durationMs", {}).items():
            out[f"spark_{name}"] = out.get(f"spark_{name}", 0.0) + ms / 1000.0
    for r in records:
        parts = [m for m in r["stages"] if m["stage"] == "partition"]
        merges = [m for m in r["stages"] if m["stage"] == "merge"]
        out["sink"] = out.get("sink", 0.0) + r.get("sink_s", 0.0) - r.get("pipeline_s", 0.0)
        for name in ("read_s", "host_s", "engine_s", "report_s", "write_s", "task_s", "rpc_s"):
            vals = [m.get(name, 0.0) for m in parts]
            if vals:
                out[f"partition_{name}"] = out.get(f"partition_{name}", 0.0) + max(vals)
        if merges:
            out["merge_task_s"] = out.get("merge_task_s", 0.0) + max(m.get("task_s", 0.0) for m in merges)
    return {k: round(v, 3) for k, v in sorted(out.items())}


def count_dead_letters(plan: Plan) -> int:
    """Rejected records of the run (lines of the dead-letter files)."""
    if not plan.dead_letters_dir.is_dir():
        return 0
    total = 0
    for path in plan.dead_letters_dir.glob("*.jsonl"):
        with open(path, "rb") as fh:
            total += sum(1 for line in fh if line.strip())
    return total


def driver_peak_rss_bytes(spark=None) -> int:
    """Peak resident memory of the driver: this Python process plus, when it started one, its
    JVM (``VmHWM`` of the gateway process)."""
    import resource

    total = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
    try:
        pid = spark.sparkContext._gateway.proc.pid if spark is not None else None
    except AttributeError:
        pid = None
    if pid:
        try:
            with open(f"/proc/{pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmHWM:"):
                        total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total
