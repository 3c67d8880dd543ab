"""The sizing projection's check: measured DSkype throughput on Spark at P = 1, 2, 4, 8.

    python bench/spark_sizing_check.py --dataset tweets --num-subs 50000 --num-messages 20000 \
        --window 5000 --batch-size 2000 --methods location,prefix,agrid --partition-counts 1,2,4,8 \
        --master 'local[2]' --run-root out/sizing-check --out sizing-check.json

One seeded workload, every ``(method, P)`` run in one shared Spark session (``distributed``'s
library entry, :func:`skype.spark.job.run`; adaptive methods with ``--rebalance never``, the
static layout the in-process harness measures), P by P.  Before the methods at each P, a
calibration run of ``location`` over ``--calibration-subs`` subscriptions (next to no engine
work: its batch time is the fixed cost at that P, measured beside the runs it serves; the
JSON's ``calibration``).  A run's *stream batches* are those of
``bench/spark_scaleout.py``: no subscription command applied, not the stream's last.  Per run:

* ``throughput_msgs_per_s``: the stream batches' messages over the sum of their
  ``triggerExecution`` seconds (the figure the projection of :mod:`skype.sizing.model` predicts);
* ``fixed_cost_s``: the median over stream batches of ``triggerExecution`` less the slowest
  partition's engine and report wall seconds;
* ``partition_engine_s``: per partition, the mean engine + report wall seconds per stream batch.

The JSON is rewritten after every run, so a long sweep keeps what it measured.  Compare it with
the projection: ``python bench/spark_sizing.py project --calibration sizing-check.json --check sizing-check.json``.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from spark_scaleout import _pair, options_of, stream_batches


def build_parser() -> argparse.ArgumentParser:
    """The workload's options; any other option of the ``distributed`` command (or of the engine)
    goes by ``--option NAME=VALUE`` into the mapping :meth:`RunSettings.from_options` and
    :func:`skype.simulate.load_inputs` read, absent ones at their defaults (as
    ``bench/spark_scaleout.py``; benches do not import the command line)."""
    p = argparse.ArgumentParser(prog="python bench/spark_sizing_check.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    w = p.add_argument_group("workload")
    w.add_argument("--dataset", default="geonames")
    w.add_argument("--num-subs", type=int)
    w.add_argument("--num-messages", type=int)
    w.add_argument("--window", type=int)
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--batch-size", type=int, default=10_000, help="messages per micro-batch (default: %(default)s)")
    w.add_argument("--option", type=_pair, action="append", default=[], metavar="NAME=VALUE",
                   help="any other option of the distributed command or the engine (repeat)")
    w.add_argument("--conf", type=_pair, action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark configuration entry (repeat)")
    b = p.add_argument_group("sizing check")
    b.add_argument("--methods", default="location,prefix,agrid", help="methods to run (comma-separated)")
    b.add_argument("--partition-counts", default="1,2,4,8", help="values of P (comma-separated)")
    b.add_argument("--master", default="local[2]")
    b.add_argument("--driver-memory", default="3g")
    b.add_argument("--run-root", default="out/sizing-check", help="one run directory per (method, P) under it")
    b.add_argument("--out", required=True, help="JSON of every run's figures")
    b.add_argument("--rescan", action="store_true",
                   help="run nothing: add the per-partition CPU figures to the runs already in --out, from their run directories")
    b.add_argument("--calibration-subs", type=int, default=1000,
                   help="before the methods at each P, a `location` run with this many subscriptions (next to no "
                        "engine work) measures the fixed cost of a batch at that P beside them (0: none)")
    return p


def partition_cpu(run_dir: Path, num_messages: int, P: int) -> dict:
    """Per partition, the mean engine CPU seconds (``engine_cpu_s``) and engine + report wall
    seconds per stream batch, and per merge bucket the mean ``merge_s``: CPU against wall shows
    how far the machine's load stretched the run (the harness measures CPU)."""
    records = stream_batches(run_dir, num_messages)
    cpu, wall, merge = np.zeros(P), np.zeros(P), np.zeros(P)
    for r in records:
        for m in r["stages"]:
            if m.get("stage") == "partition":
                cpu[int(m["partition"])] += float(m.get("engine_cpu_s", 0.0))
                wall[int(m["partition"])] += float(m["engine_s"]) + float(m["report_s"])
            elif m.get("stage") == "merge":
                merge[int(m["bucket"]) % P] += float(m.get("merge_s", 0.0))
    n = max(len(records), 1)
    return {"partition_engine_cpu_s": (cpu / n).round(4).tolist(), "partition_engine_wall_s": (wall / n).round(4).tolist(),
            "merge_wall_s": (merge / n).round(4).tolist()}


def measure_run(args, inputs, spark, method: str, P: int, label: str = "") -> dict:
    from skype.dskype.plan import RunSettings
    from skype.spark.job import run

    a = copy.copy(args)
    a.method, a.partitions, a.rebalance = (method,), P, "never"
    settings = RunSettings.from_options(options_of(a), inputs.bounds)
    run_dir = Path(args.run_root).resolve() / f"{label}{method}-P{P}"
    if run_dir.exists():
        raise SystemExit(f"{run_dir} exists: remove it or pick another --run-root")
    t0 = time.perf_counter()
    metrics = run(settings, inputs, spark, run_dir=run_dir)
    wall = time.perf_counter() - t0
    latency = metrics["batch_latency_ms"]
    records = stream_batches(run_dir, int(inputs.num_messages))
    durations, fixed, messages = [], [], 0
    engine = np.zeros(P)
    for r in records:
        parts = [m for m in r["stages"] if m.get("stage") == "partition"]
        b = int(r["batch"])
        if b >= len(latency) or latency[b] is None:
            continue
        seconds = latency[b] / 1000.0
        first = min(int(m["first_seq"]) for m in parts)
        upto = max(int(m["upto"]) for m in parts)
        messages += upto - first
        durations.append(seconds)
        per_part = {int(m["partition"]): float(m["engine_s"]) + float(m["report_s"]) for m in parts}
        for p, s in per_part.items():
            engine[p] += s
        fixed.append(seconds - max(per_part.values()))
    n = len(durations)
    return {
        "method": method, "partitions": P, "stream_batches": n, "messages": messages, "wall_s": round(wall, 2),
        "throughput_msgs_per_s": messages / sum(durations) if n else float("nan"),
        "batch_s_median": statistics.median(durations) if n else float("nan"),
        "fixed_cost_s": statistics.median(fixed) if n else float("nan"),
        "partition_engine_s": (engine / max(n, 1)).round(4).tolist(),
        "communication_per_message": metrics.get("communication_per_message"),
        "replication_ratio": metrics.get("replication_ratio"),
        "host_peak_rss_bytes": metrics.get("host_peak_rss_bytes"),
        **partition_cpu(run_dir, int(inputs.num_messages), P),
    }


def main(argv: list[str] | None = None) -> int:
    from skype.simulate import load_inputs
    from skype.spark.runtime import make_session

    args = build_parser().parse_args(argv)
    if args.rescan:
        saved = json.loads(Path(args.out).read_text())
        for label, key in (("", "runs"), ("calibration-", "calibration")):
            for row in saved.get(key, []):
                run_dir = Path(args.run_root).resolve() / f"{label}{row['method']}-P{row['partitions']}"
                row.update(partition_cpu(run_dir, int(args.num_messages), int(row["partitions"])))
        Path(args.out).write_text(json.dumps(saved, indent=2, default=float) + "\n")
        return 0
    inputs = load_inputs(options_of(args))
    calibration_inputs = (load_inputs({**options_of(args), "num_subs": args.calibration_subs})
                          if args.calibration_subs else None)
    spark = make_session(args.master, driver_memory=args.driver_memory, extra=dict(args.conf))
    rows: list[dict] = []
    calibration: list[dict] = []

    def keep(row: dict, into: list) -> None:
        into.append(row)
        print(json.dumps({k: row[k] for k in ("method", "partitions", "stream_batches", "throughput_msgs_per_s",
                                              "fixed_cost_s")}), file=sys.stderr, flush=True)
        Path(args.out).write_text(json.dumps({"argv": sys.argv[1:], "runs": rows, "calibration": calibration},
                                             indent=2, default=float) + "\n")

    try:
        for P in [int(x) for x in args.partition_counts.split(",")]:
            if calibration_inputs is not None:
                keep(measure_run(args, calibration_inputs, spark, "location", P, "calibration-"), calibration)
            for method in [m.strip() for m in args.methods.split(",") if m.strip()]:
                keep(measure_run(args, inputs, spark, method, P), rows)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
