"""The steady fixed cost of a DSkype batch on Spark, and where it goes (issue 37).

    python bench/spark_fixed_cost.py --out fixed.json

runs the issue's workload (tweets, 20,000 subscriptions, 100,000 messages, a 5,000-message window,
batches of 2,000, ``location``, P = 1, ``local[2]``: 50 stream batches, so that the JVM reaches its
steady state) through :func:`skype.spark.job.run` in one session, ``--runs`` times (each in a fresh
run directory; the later runs find a warmer JVM), and prints per run the median over the steady
batches (Spark batch ids from ``--steady-from`` to the last but one) of:

* ``fixed``: Spark's ``triggerExecution`` less the partition's engine and report wall seconds (the
  definition of ``bench/spark_scaleout.py``, slowest partition when P > 1);
* where that time goes, five parts that add up to it:
  ``outside_job`` (``triggerExecution`` less ``addBatch``: offsets, the WAL, planning, the commit),
  ``call`` (``addBatch`` less the sink's own seconds: the ``foreachBatch`` call, the batch's
  physical planning), ``job_rest`` (the sink's job less the slowest partition task: the source and
  routing stage, the shuffle, task launch, writing the events files, collecting the rows), ``task_rest`` (the task less its
  engine and report: reading and writing the state, the host call's transport) and ``after_job``
  (the sink after its job: the metrics record);
* Spark's own ``durationMs`` phases, for reference.

Wall-clock figures: take them on a quiet machine (``--runs 2`` and read the second run; the first
carries the JVM's warm-up).  About 2 minutes per run on a quiet 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

PARTS = ("outside_job", "call", "job_rest", "task_rest", "after_job")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python bench/spark_fixed_cost.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="tweets")
    p.add_argument("--num-subs", type=int, default=20_000)
    p.add_argument("--num-messages", type=int, default=100_000)
    p.add_argument("--window", type=int, default=5_000)
    p.add_argument("--batch-size", type=int, default=2_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--method", default="location")
    p.add_argument("--partitions", type=int, default=1)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--driver-memory", default="2g")
    p.add_argument("--steady-from", type=int, default=25,
                   help="the first Spark batch id counted as steady (default: %(default)s)")
    p.add_argument("--runs", type=int, default=2, help="runs in the one session (default: %(default)s)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark configuration entry")
    p.add_argument("--run-root", default="out/fixed-cost", help="one run directory per run under it")
    p.add_argument("--out", help="JSON of every run's per-batch figures and medians")
    return p


def batch_parts(record: dict, durations: dict) -> dict:
    """One batch's fixed cost and its five parts (module docstring), seconds."""
    parts = [m for m in record["stages"] if m.get("stage") == "partition"]
    slowest = max(parts, key=lambda m: float(m["engine_s"]) + float(m["report_s"]))
    work = float(slowest["engine_s"]) + float(slowest["report_s"])
    trigger = float(durations.get("triggerExecution", 0.0)) / 1000.0
    add_batch = float(durations.get("addBatch", 0.0)) / 1000.0
    task = max(float(m["task_s"]) for m in parts)
    out = {
        "fixed": trigger - work,
        "outside_job": trigger - add_batch,
        "call": add_batch - float(record["sink_s"]),
        "job_rest": float(record["pipeline_s"]) - task,
        "task_rest": task - work,
        "after_job": float(record["sink_s"]) - float(record["pipeline_s"]),
        "trigger": trigger,
        "work": work,
        "task_read": float(slowest.get("read_s", 0.0)),
        "task_rpc": float(slowest.get("rpc_s", 0.0)),
        "task_write": float(slowest.get("write_s", 0.0)),
        "events_write": float(record.get("events_write_s", 0.0)),  # part of job_rest: the tasks' event files
    }
    for name, ms in durations.items():
        out[f"spark_{name}"] = float(ms) / 1000.0
    return out


def steady_batches(run_dir: Path, metrics: dict, steady_from: int) -> list[dict]:
    """Per steady batch its parts: ids from ``steady_from``, stream batches only (no subscription
    command applied), the last one (it writes the final results) left out."""
    durations = dict(enumerate(metrics["batch_durations_ms"]))
    records = []
    for path in sorted((run_dir / "metrics").glob("batch-*.json")):
        record = json.loads(path.read_text())
        parts = [m for m in record["stages"] if m.get("stage") == "partition"]
        if parts and not any(int(m["commands"]) for m in parts):
            records.append(record)
    records = records[:-1]
    return [dict(batch_parts(r, durations[int(r["batch"])]), batch=int(r["batch"]))
            for r in records if int(r["batch"]) >= steady_from and int(r["batch"]) in durations]


def medians(rows: list[dict]) -> dict:
    keys = [k for k in rows[0] if k != "batch"] if rows else []
    return {k: statistics.median(r.get(k, 0.0) for r in rows) for k in keys}


def main(argv: list[str] | None = None) -> int:
    from skype.dskype.plan import RunSettings
    from skype.simulate import load_inputs
    from skype.spark.job import run
    from skype.spark.runtime import make_session

    args = build_parser().parse_args(argv)
    options = {"dataset": args.dataset, "num_subs": args.num_subs, "num_messages": args.num_messages,
               "window": args.window, "seed": args.seed, "batch_size": args.batch_size,
               "method": (args.method,), "partitions": args.partitions, "rebalance": "never"}
    inputs = load_inputs(options)
    settings = RunSettings.from_options(options, inputs.bounds)
    conf = dict(c.split("=", 1) for c in args.conf)
    spark = make_session(args.master, driver_memory=args.driver_memory, extra=conf)
    root = Path(args.run_root).resolve()
    runs = []
    try:
        for i in range(args.runs):
            run_dir = root / f"run{i}"
            if run_dir.exists():
                raise SystemExit(f"{run_dir} exists: remove it or pick another --run-root")
            t0 = time.perf_counter()
            metrics = run(settings, inputs, spark, run_dir=run_dir)
            wall = time.perf_counter() - t0
            rows = steady_batches(run_dir, metrics, args.steady_from)
            med = medians(rows)
            runs.append({"run": i, "wall_s": wall, "steady_batches": len(rows), "median": med, "batches": rows})
            print(f"run {i}: {len(rows)} steady batches, wall {wall:.0f} s; median ms: fixed {1000 * med['fixed']:.0f} "
                  f"(trigger {1000 * med['trigger']:.0f}, engine+report {1000 * med['work']:.0f}); "
                  + ", ".join(f"{k} {1000 * med[k]:.0f}" for k in PARTS), flush=True)
            print(f"  events files {1000 * med['events_write']:.0f} ms (in job_rest); state read {1000 * med['task_read']:.0f}, "
                  f"host call besides the engine {1000 * med['task_rpc']:.0f}, state write {1000 * med['task_write']:.0f} "
                  "(in task_rest)", flush=True)
            print("  spark phases (ms): " + ", ".join(f"{k[6:]} {1000 * v:.0f}" for k, v in med.items()
                                                     if k.startswith("spark_")), flush=True)
            if args.out:
                Path(args.out).write_text(json.dumps({"argv": sys.argv[1:], "runs": runs}, indent=1) + "\n")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
