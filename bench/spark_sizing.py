"""Sizing DSkype: measure per-partition costs in process, project executors, check against Spark.

    # 1. per-partition costs, each (method, N, P) in a fresh process (its resident set is its own)
    python bench/spark_sizing.py measure --dataset tweets --sizes 20000,50000,100000 \
        --num-messages 30000 --window 5000 --batch-size 2000 --methods location,prefix,agrid \
        --partition-counts 1,2,4,8 --out sizing-costs.json
    # 2. the projection (fixed cost fitted on bench/spark_sizing_check.py's calibration runs of a
    #    near-empty workload), the table for 1M / 10M / 100M, and the check against its Spark runs
    python bench/spark_sizing.py project --costs sizing-costs.json --calibration sizing-check.json \
        --check sizing-check.json --check-subscriptions 50000 --table-out sizing.md

The measurement is :func:`skype.sizing.partitions.measure_partitions`; the model
:mod:`skype.sizing.model`.  ``--check`` compares the projection on K = 2 cores (``local[2]``)
with the throughput each Spark run measured (``bench/spark_sizing_check.py``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from pathlib import Path


def _measure_one(job: dict) -> dict:
    from skype.simulate import load_inputs
    from skype.sizing.partitions import measure_partitions, resident_bytes

    base = resident_bytes()
    inputs = load_inputs({"dataset": job["dataset"], "num_subs": job["subscriptions"],
                          "num_messages": job["num_messages"], "window": job["window"], "seed": job["seed"]})
    t0 = time.perf_counter()
    costs = measure_partitions(inputs, job["method"], job["partitions"], window=job["window"],
                               batch_size=job["batch_size"])
    return {**costs.as_dict(), "process_base_bytes": base, "wall_s": round(time.perf_counter() - t0, 2),
            "dataset": job["dataset"], "seed": job["seed"]}


def cmd_measure(args) -> int:
    out = Path(args.out)
    done = json.loads(out.read_text())["runs"] if out.exists() and args.resume else []
    seen = {(r["method"], r["subscriptions"], r["partitions"]) for r in done}
    ctx = multiprocessing.get_context("spawn")
    for n in [int(x) for x in args.sizes.split(",")]:
        for method in args.methods.split(","):
            for P in [int(x) for x in args.partition_counts.split(",")]:
                if (method, n, P) in seen:
                    continue
                job = {"dataset": args.dataset, "subscriptions": n, "num_messages": args.num_messages,
                       "window": args.window, "batch_size": args.batch_size, "seed": args.seed,
                       "method": method, "partitions": P}
                with ctx.Pool(1) as pool:
                    row = pool.apply(_measure_one, (job,))
                done.append(row)
                print(json.dumps({k: row[k] for k in ("method", "subscriptions", "partitions", "wall_s",
                                                      "replication_ratio", "rss_growth_bytes")}),
                      file=sys.stderr, flush=True)
                out.write_text(json.dumps({"argv": sys.argv[1:], "runs": done}, indent=1) + "\n")
    return 0


def cmd_project(args) -> int:
    from skype.sizing.model import FixedCost, check_runs, event_cost, fit_profile, size

    runs = json.loads(Path(args.costs).read_text())["runs"]
    saved = json.loads(Path(args.calibration).read_text())
    calib = saved.get("calibration") or saved["runs"]
    fixed = FixedCost.fit([(r["partitions"], r["fixed_cost_s"]) for r in calib], cores=args.calibration_cores)
    base = min(r["process_base_bytes"] for r in runs)
    lines = ["Per-partition costs measured in process (steady batches; CPU seconds of `apply`, per message)", "",
             "| method | N | P | replication | busiest partition µs/msg | all partitions µs/msg | busiest merge µs/msg "
             "| report bytes/msg | resident growth, end / peak (MB) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(runs, key=lambda r: ([x["method"] for x in runs].index(r["method"]), r["subscriptions"], r["partitions"])):
        m = max(r["steady_messages"], 1)
        lines.append(f"| {r['method']} | {r['subscriptions']:,} | {r['partitions']} | {r['replication_ratio']:.2f} "
                     f"| {1e6 * max(r['apply_cpu_s']) / m:.1f} | {1e6 * sum(r['apply_cpu_s']) / m:.1f} "
                     f"| {1e6 * max(r['merge_cpu_s']) / m:.1f} | {r['report_bytes'] / m:,.0f} "
                     f"| {r['rss_growth_bytes'] / 1e6:,.0f} / "
                     f"{(r['rss_peak_growth_bytes'] / 1e6) if r.get('rss_peak_growth_bytes') else float('nan'):,.0f} |")
    lines += ["", f"Fixed cost per batch: F(P, K) = {fixed.f0:.3f} s + {fixed.f_task:.3f} core-s x P / K "
             f"(from {args.calibration}: " + ", ".join(f"P = {r['partitions']}: {r['fixed_cost_s']:.3f} s" for r in calib)
             + ")", ""]
    profiles = {}
    fitted: dict = {}  # method -> FixedCost with the event cost of its P = 1 Spark run (--check)
    for method in sorted({r["method"] for r in runs}, key=[r["method"] for r in runs].index):
        profiles[method] = fit_profile([r for r in runs if r["method"] == method], host_base_bytes=base)
    lines += ["| method | per replica (B, resident) | per window message (B, engine) | busiest µs/msg at P = 8: a + b N |",
              "|---|---:|---:|---|"]
    for m, prof in profiles.items():
        at = prof.fits_at(8)
        lines.append(f"| {m} | {prof.bytes_per_replica:,.0f} | {prof.bytes_per_window_message:,.0f} "
                     f"| {1e6 * at.busy.intercept:.2f} + {1e6 * at.busy.slope * 1000:.4f} per 1k subs (P = {at.partitions}) |")
    if args.check:
        measured = json.loads(Path(args.check).read_text())["runs"]
        stretch = {int(r["partitions"]): sum(r["partition_engine_wall_s"]) / max(sum(r["partition_engine_cpu_s"]), 1e-9)
                   for r in calib if "partition_engine_cpu_s" in r}
        lines += ["", f"Check against Spark on local[{args.calibration_cores}] ({args.check}, "
                  f"{args.check_subscriptions:,} subscriptions).  Attempt (a): the fixed cost from the calibration "
                  "runs only; (b): plus the event cost per report byte fitted on the method's P = 1 run "
                  "(so P = 1 matches by construction under (b)); (c): (a) with the CPU costs stretched by the "
                  "calibration run's wall / CPU at that P (" + ", ".join(f"P = {p}: {x:.1f}" for p, x in sorted(stretch.items()))
                  + ")", "",
                  "| method | P | measured msg/s | (a) projected | (a) / measured | (b) projected | (b) / measured "
                  "| (c) projected | (c) / measured | within 25% (a, b, c) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for m, prof in profiles.items():
            one = [r for r in measured if r["method"] == m and r["partitions"] == 1]
            events = (event_cost(prof, fixed, args.check_subscriptions, prof.batch_size / one[0]["throughput_msgs_per_s"],
                                 partitions=1, cores=args.calibration_cores) if one else fixed)
            fitted[m] = events
            mine = [r for r in measured if r["method"] == m]
            plain = check_runs(profiles, fixed, mine, args.check_subscriptions, cores=args.calibration_cores)
            with_events = check_runs(profiles, events, mine, args.check_subscriptions, cores=args.calibration_cores)
            stretched = check_runs(profiles, fixed, mine, args.check_subscriptions, cores=args.calibration_cores,
                                   stretch=stretch)
            for a, b, c in zip(plain, with_events, stretched):
                verdict = ", ".join("yes" if x["within_25"] else "NO" for x in (a, b, c))
                lines.append(f"| {m} | {a['partitions']} | {a['measured']:,.0f} | {a['projected']:,.0f} | {a['ratio']:.2f} "
                             f"| {b['projected']:,.0f} | {b['ratio']:.2f} | {c['projected']:,.0f} | {c['ratio']:.2f} "
                             f"| {verdict} |")
        lines += ["", "Engine CPU seconds per batch of the busiest partition: in process (the harness) against the "
                  "Spark run's own `engine_cpu_s`; and the Spark partitions' engine + report wall seconds over their "
                  "engine CPU seconds (how far the machine stretched a CPU second)", "",
                  "| method | P | harness CPU s | Spark CPU s | Spark / harness | Spark wall / CPU |",
                  "|---|---:|---:|---:|---:|---:|"]
        for r in measured:
            if "partition_engine_cpu_s" not in r:
                continue
            mine = [c for c in runs if c["method"] == r["method"] and c["partitions"] == r["partitions"]
                    and c["subscriptions"] == args.check_subscriptions]
            harness = max(mine[0]["engine_cpu_s"]) / max(mine[0]["steady_batches"], 1) if mine else float("nan")
            spark_cpu = max(r["partition_engine_cpu_s"])
            stretch = sum(r["partition_engine_wall_s"]) / max(sum(r["partition_engine_cpu_s"]), 1e-9)
            lines.append(f"| {r['method']} | {r['partitions']} | {harness:.3f} | {spark_cpu:.3f} "
                         f"| {spark_cpu / harness if harness else float('nan'):.2f} | {stretch:.1f} |")
        lines += ["", "Event cost per report byte (b): " + ", ".join(f"{m} {f.per_report_byte * 1e9:.2f} ns"
                                                                   for m, f in fitted.items())]
    if args.memory_check:
        from skype.sizing.model import partition_bytes

        m, n, P, b, got = args.memory_check.split(":")
        projected, _ = partition_bytes(profiles[m], float(n), int(P), int(b))
        lines += ["", f"Memory check: {m}, {float(n):,.0f} subscriptions, P = {P}, batches of {b}: projected "
                  f"{projected / 1e9:.2f} GB per partition, measured {float(got) / 1e9:.2f} GB "
                  f"(ratio {float(got) / projected:.2f}; memory basis: {profiles[m].memory_basis})"]
    table_fixed = fixed
    if args.table_fixed:
        points = [(int(a), float(b)) for a, b in (x.split(":") for x in args.table_fixed.split(","))]
        table_fixed = FixedCost.fit(points, cores=args.calibration_cores)
        fitted = {}  # the event costs of (b) carry this machine's load; (c) shows they are not needed
        lines += ["", f"Sizing table's fixed cost: F(P, K) = {table_fixed.f0:.3f} s + {table_fixed.f_task:.3f} core-s x P / K "
                  f"from {args.table_fixed} ({args.table_fixed_source or 'given'}); CPU costs unstretched"]
    lines += ["", f"Projection: executors of {args.cores} cores and {args.executor_gib} GiB ({args.jvm_gib} GiB JVM heap), "
              f"batches of {args.batch_size or 'the measured size'}, target {args.target:g} msg/s, "
              f"memory x {args.memory_factor:g}"
              + (", event cost (b) of each method" if fitted else ""), "",
              "| method | subscriptions | executors (memory) | partitions | memory per executor (GiB) | "
              "throughput (msg/s) | executors for the target | throughput there |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for m, prof in profiles.items():
        for n in [int(float(x)) for x in args.project_sizes.split(",")]:
            s = size(prof, fitted.get(m, table_fixed), n, cores_per_executor=args.cores, executor_bytes=args.executor_gib * (1 << 30),
                     jvm_bytes=args.jvm_gib * (1 << 30), target_msgs_per_s=args.target, batch_size=args.batch_size,
                     memory_factor=args.memory_factor)
            lines.append(f"| {m} | {n:,} | {s.executors:,} | {s.partitions:,} | {s.executor_bytes / (1 << 30):.1f} "
                         f"| {s.throughput_msgs_per_s:,.0f} | {s.executors_for_target if s.executors_for_target else 'not reached'} "
                         f"| {s.throughput_at_target or 0:,.0f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.table_out:
        Path(args.table_out).write_text(text)
    if args.profiles_out:
        Path(args.profiles_out).write_text(json.dumps({m: p.as_dict() for m, p in profiles.items()}, indent=1,
                                                      default=float) + "\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python bench/spark_sizing.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="per-partition costs in process")
    m.add_argument("--dataset", default="tweets")
    m.add_argument("--sizes", default="20000,50000,100000", help="subscription counts N")
    m.add_argument("--num-messages", type=int, default=30_000)
    m.add_argument("--window", type=int, default=5_000)
    m.add_argument("--batch-size", type=int, default=2_000)
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--methods", default="location,prefix,agrid")
    m.add_argument("--partition-counts", default="1,2,4,8")
    m.add_argument("--out", required=True)
    m.add_argument("--resume", action="store_true", help="keep the runs already in --out")
    m.set_defaults(func=cmd_measure)
    j = sub.add_parser("project", help="fit, project, check")
    j.add_argument("--costs", required=True, help="the JSON of `measure`")
    j.add_argument("--calibration", required=True,
                   help="bench/spark_sizing_check.py's JSON: its calibration runs (else its runs) give the fixed cost")
    j.add_argument("--calibration-cores", type=int, default=2, help="cores of the calibration runs (local[2]: 2)")
    j.add_argument("--check", help="bench/spark_sizing_check.py's JSON of the workload to check")
    j.add_argument("--check-subscriptions", type=int, default=50_000)
    j.add_argument("--project-sizes", default="1e6,1e7,1e8")
    j.add_argument("--cores", type=int, default=4, help="cores per executor")
    j.add_argument("--executor-gib", type=float, default=16.0)
    j.add_argument("--jvm-gib", type=float, default=2.0)
    j.add_argument("--target", type=float, default=5_000.0, help="throughput to reach (msg/s)")
    j.add_argument("--batch-size", type=int, default=None, help="batch size of the projection (default: measured)")
    j.add_argument("--table-fixed", default=None, metavar="P:S,...",
                   help="the sizing table's fixed cost from these measured (P, seconds per batch) on "
                        "--calibration-cores cores instead of the calibration runs (e.g. a quiet machine's)")
    j.add_argument("--table-fixed-source", default="", help="where --table-fixed was measured (printed)")
    j.add_argument("--memory-factor", type=float, default=1.0,
                   help="multiply the projected partition memory by this measured ratio (an engine host's peak "
                        "over the projection, e.g. of the 1M run)")
    j.add_argument("--memory-check", default=None, metavar="METHOD:N:P:B:BYTES",
                   help="a measured engine host's peak (BYTES) at N subscriptions over P partitions, batches of B: "
                        "printed against the projected partition memory")
    j.add_argument("--table-out")
    j.add_argument("--profiles-out")
    j.set_defaults(func=cmd_project)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
