"""Scale-out of DSkype on Spark, measured with stream-only accounting (issue 25, deliverable 5).

    python bench/spark_scaleout.py --dataset tweets --num-subs 20000 --num-messages 30000 \
        --window 5000 --batch-size 1000 --methods location,prefix,agrid --adaptive-rebalance tornado \
        --partition-counts 1,2,4,8,16 --master 'local[2]' --run-root out/scaleout --out scaleout.json \
        --table-out scaleout.md

**Protocol.**  One seeded workload (every run loads the same ``Inputs``).  The centralized side
is ``simulate``'s stream: all subscriptions registered first (timed apart), then the messages
published in batches of ``--batch-size``; each batch's engine CPU seconds and work counters are
kept.  The machine's speed drifts between minutes, so each Spark run's reference CPU is the median
of the centralized runs nearest it: ``--central-repeats`` before the first run, one after each
(:class:`NearestReference`).  The Spark side runs every ``(method, P)`` over the same stream in one shared session.  A
*stream batch* is a Spark batch whose partitions applied no subscription command (registration
batches are timed apart) and that is not the stream's last (it also writes the final results);
with ``--window`` larger than ``--batch-size`` and at least 20 stream batches, there is a steady
state.  The centralized batches covering the same messages (``first_seq`` .. ``upto`` of the
partition rows) are the reference work.

**Per (method, P)**, over the stream batches:

* per-partition work: engine CPU seconds (``engine_cpu_s``, the host thread's CPU time: less
  noisy than wall time on a shared machine) and the deterministic counters of
  :mod:`skype.dskype.work` (postings scanned, candidates, admissions), summed per partition;
* ``busiest_share``: the busiest partition's work over the centralized stream work, in CPU
  seconds and in postings (the target: <= 1.5/P at P = 8);
* the per-batch fixed cost: the median over stream batches of Spark's ``triggerExecution`` minus
  the slowest partition's engine and report wall seconds (what the batch costs besides the work);
* the critical path per batch: the busiest partition's mean work per batch (CPU) + the fixed cost;
* ``speedup_vs_simulate``: centralized stream CPU per batch over the critical path, i.e. what P
  cores, each running one partition, would give against ``simulate`` (the fixed cost included).

Wall-clock figures are indicative on a loaded machine; the counters are deterministic.  Any method
name the distributed command accepts works (``--methods``); adaptive ones run with
``--adaptive-rebalance`` (live rebalancing).
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

COUNTERS = ("postings", "candidates", "admits")


def _pair(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    return key.strip().replace("-", "_"), value.strip()


def build_parser() -> argparse.ArgumentParser:
    """The bench's options; any other option of the ``distributed`` command (or of the engine)
    goes by ``--option NAME=VALUE`` into the same mapping that :meth:`RunSettings.from_options`
    and :func:`skype.simulate.load_inputs` read (absent ones at their defaults)."""
    p = argparse.ArgumentParser(prog="python bench/spark_scaleout.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    w = p.add_argument_group("workload")
    w.add_argument("--dataset", default="geonames")
    w.add_argument("--num-subs", type=int)
    w.add_argument("--num-messages", type=int)
    w.add_argument("--window", type=int)
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--batch-size", type=int, default=10_000, help="messages per micro-batch (default: %(default)s)")
    w.add_argument("--range-cut", help="prefix's range cut (the distributed command's --range-cut)")
    w.add_argument("--option", type=_pair, action="append", default=[], metavar="NAME=VALUE",
                   help="any other option of the distributed command or the engine (repeat)")
    w.add_argument("--conf", type=_pair, action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark configuration entry (repeat)")
    b = p.add_argument_group("scale-out bench")
    b.add_argument("--methods", default="location,prefix,agrid", help="methods to measure (comma-separated)")
    b.add_argument("--partition-counts", default="1,2,4,8,16", help="values of P (comma-separated)")
    b.add_argument("--adaptive-rebalance", default="tornado",
                   help="--rebalance policy of the adaptive methods (default: %(default)s)")
    b.add_argument("--master", default="local[2]")
    b.add_argument("--driver-memory", default="2g")
    b.add_argument("--run-root", default="out/scaleout", help="one run directory per (method, P) under it")
    b.add_argument("--out", help="JSON of every run's figures")
    b.add_argument("--table-out", help="Markdown table")
    b.add_argument("--central-repeats", type=int, default=3,
                   help="centralized runs before the first Spark run; one more follows each, and a Spark "
                        "run's reference is the median of the repeats + 1 nearest it (default: %(default)s)")
    return p


def options_of(args: argparse.Namespace) -> dict:
    """The mapping of options the library reads: the parsed ones and the ``--option`` pairs
    (values parsed as JSON where they parse: numbers, booleans)."""
    out = {k: v for k, v in vars(args).items() if k not in ("option", "conf") and v is not None}
    for key, value in args.option:
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def centralized_stream(args, inputs) -> dict:
    """``simulate``'s stream, one batch at a time: registration timed apart, then per batch of
    ``--batch-size`` messages the engine CPU seconds and work counters, keyed by first seq."""
    from skype.simulate import make_engine
    from skype.dskype.work import counter_delta, engine_counters

    engine = make_engine(options_of(args), inputs)
    t0 = time.process_time()
    engine.subscribe_batch(inputs.subscriptions)
    engine.subscribe_batch(inputs.others)
    registration_cpu = time.process_time() - t0
    batches: dict[int, dict] = {}
    seq = 0
    for op, payload in inputs.steps:
        if op != "msgs":
            raise SystemExit("the scale-out bench expects a workload whose commands all come first")
        for chunk in payload.batches(args.batch_size):
            before = engine_counters(engine)
            t = time.process_time()
            engine.publish_batch(chunk)
            cpu = time.process_time() - t
            work = counter_delta(before, engine_counters(engine))
            work.pop("cpu_ns")
            batches[seq] = dict(work, cpu_s=cpu, messages=len(chunk))
            seq += len(chunk)
    return {"registration_cpu_s": registration_cpu, "batches": batches}


def median_reference(runs: list[dict]) -> dict:
    """One centralized reference from several runs of :func:`centralized_stream` (each from a
    fresh engine): the counters are the same in every run; each batch's CPU seconds (and the
    registration's) are the median over the runs."""
    out = copy.deepcopy(runs[0])
    for seq, batch in out["batches"].items():
        batch["cpu_s"] = statistics.median(r["batches"][seq]["cpu_s"] for r in runs)
    out["registration_cpu_s"] = statistics.median(r["registration_cpu_s"] for r in runs)
    out["stream_cpu_s_runs"] = [round(sum(b["cpu_s"] for b in r["batches"].values()), 3) for r in runs]
    return out


class NearestReference:
    """The centralized reference of each Spark run, measured around it: the machine's speed drifts
    (the same centralized stream took 2.0 s of CPU in one process and 3.1 s in another a minute
    later, while runs within one process agree to 5%), so a reference measured once at the start
    is off for later runs.  Before the first run ``repeats`` runs; after every Spark run one more;
    a run's reference is the median of the ``repeats + 1`` runs nearest it."""

    def __init__(self, args, inputs, repeats: int) -> None:
        self.args, self.inputs, self.repeats = args, inputs, max(1, repeats)
        self.runs = [centralized_stream(args, inputs) for _ in range(self.repeats)]

    def before(self) -> dict:
        return median_reference(self.runs[-self.repeats:])

    def after_run(self) -> dict:
        self.runs.append(centralized_stream(self.args, self.inputs))
        return median_reference(self.runs[-(self.repeats + 1):])


def stream_batches(run_dir: Path, last_upto: int) -> list[dict]:
    """The run's metrics records of stream batches (module docstring), in batch order."""
    out = []
    for path in sorted((run_dir / "metrics").glob("batch-*.json")):
        record = json.loads(path.read_text())
        parts = [m for m in record["stages"] if m.get("stage") == "partition"]
        if not parts or any(int(m["commands"]) for m in parts):
            continue
        if max(int(m["upto"]) for m in parts) >= last_upto:
            continue
        out.append(record)
    return out


def measure_run(args, inputs, spark, method: str, P: int, reference: NearestReference) -> dict:
    from skype.dskype.plan import RunSettings
    from skype.partitioning import capabilities_of
    from skype.spark.job import run

    a = copy.copy(args)
    a.method, a.partitions = (method,), P
    a.rebalance = args.adaptive_rebalance if capabilities_of(method).adaptive else "never"
    settings = RunSettings.from_options(options_of(a), inputs.bounds)
    run_dir = Path(args.run_root).resolve() / f"{method}-P{P}"
    if run_dir.exists():
        raise SystemExit(f"{run_dir} exists: remove it or pick another --run-root")
    t0 = time.perf_counter()
    metrics = run(settings, inputs, spark, run_dir=run_dir)
    wall = time.perf_counter() - t0
    central = reference.after_run()
    latency = dict(zip(range(len(metrics["batch_latency_ms"])), metrics["batch_latency_ms"]))
    progress_ms = {}
    for path in sorted((run_dir / "metrics").glob("batch-*.json")):
        b = int(path.stem.split("-")[1])
        progress_ms[b] = latency.get(b)
    records = stream_batches(run_dir, int(inputs.num_messages))
    cpu = np.zeros(P)
    counters = {name: np.zeros(P) for name in COUNTERS}
    fixed, busiest_batch, central_cpu, central_postings = [], [], 0.0, 0
    covered = 0
    for r in records:
        parts = [m for m in r["stages"] if m.get("stage") == "partition"]
        for m in parts:
            p = int(m["partition"])
            cpu[p] += float(m.get("engine_cpu_s", 0.0))
            for name in COUNTERS:
                counters[name][p] += int(m.get("work", {}).get(name, 0))
        first = min(int(m["first_seq"]) for m in parts)
        upto = max(int(m["upto"]) for m in parts)
        for s in range(first, upto, args.batch_size):
            c = central["batches"].get(s)
            if c is not None:
                central_cpu += c["cpu_s"]
                central_postings += c["postings"]
                covered += c["messages"]
        busiest_batch.append(max(float(m.get("engine_cpu_s", 0.0)) for m in parts))
        ms = progress_ms.get(int(r["batch"]))
        if ms is not None:
            slowest = max(float(m["engine_s"]) + float(m["report_s"]) for m in parts)
            fixed.append(ms / 1000.0 - slowest)
    n = len(records)
    busiest = int(np.argmax(cpu)) if P else 0
    fixed_s = statistics.median(fixed) if fixed else float("nan")
    per_batch_central = central_cpu / n if n else float("nan")
    critical = cpu.max() / n + fixed_s if n else float("nan")
    return {
        "method": method, "partitions": P, "rebalance": a.rebalance, "stream_batches": n, "messages": covered,
        "batches": metrics["batches"], "wall_s": wall,
        "engine_cpu_s_per_partition": cpu.round(4).tolist(),
        **{f"{name}_per_partition": counters[name].astype(int).tolist() for name in COUNTERS},
        "central_stream_cpu_s": central_cpu, "central_postings": central_postings,
        "central_stream_cpu_s_runs": central["stream_cpu_s_runs"],
        "busiest_share_cpu": float(cpu.max() / central_cpu) if central_cpu else float("nan"),
        "busiest_share_postings": (float(counters["postings"].max() / central_postings)
                                   if central_postings else float("nan")),
        "busiest_partition": busiest,
        "fixed_cost_s_per_batch": fixed_s,
        "fixed_cost_s_all": [round(x, 4) for x in fixed],
        "busiest_cpu_s_per_batch": cpu.max() / n if n else float("nan"),
        "busiest_cpu_s_per_batch_max": max(busiest_batch, default=float("nan")),
        "critical_path_s_per_batch": critical,
        "central_cpu_s_per_batch": per_batch_central,
        "speedup_vs_simulate": per_batch_central / critical if n and critical > 0 else float("nan"),
        "speedup_engine_only": (per_batch_central / (cpu.max() / n)) if n and cpu.max() > 0 else float("nan"),
        "communication_per_message": metrics.get("communication_per_message"),
        "replication_ratio": metrics.get("replication_ratio"),
        "batch_latency_ms_p50_steady": metrics.get("batch_latency_ms_p50_steady"),
    }


def table(rows: list[dict]) -> str:
    lines = ["| method | P | stream batches | busiest / centralized (CPU) | busiest / centralized (postings) "
             "| 1.5/P | fixed cost / batch (s) | busiest CPU / batch (s) | critical path / batch (s) "
             "| centralized CPU / batch (s) | speed-up vs simulate | engine-only speed-up |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['method']} | {r['partitions']} | {r['stream_batches']} | {r['busiest_share_cpu']:.3f} "
                     f"| {r['busiest_share_postings']:.3f} | {1.5 / r['partitions']:.3f} "
                     f"| {r['fixed_cost_s_per_batch']:.3f} | {r['busiest_cpu_s_per_batch']:.3f} "
                     f"| {r['critical_path_s_per_batch']:.3f} | {r['central_cpu_s_per_batch']:.3f} "
                     f"| {r['speedup_vs_simulate']:.2f} | {r['speedup_engine_only']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from skype.simulate import load_inputs
    from skype.spark.runtime import make_session

    args = build_parser().parse_args(argv)
    if args.batch_size >= (args.window or 0):
        raise SystemExit("the protocol needs a batch smaller than the window (--batch-size < --window)")
    inputs = load_inputs(options_of(args))
    reference = NearestReference(args, inputs, args.central_repeats)
    central = reference.before()
    print(f"centralized: registration {central['registration_cpu_s']:.2f} s CPU, "
          f"{len(central['batches'])} stream batches, stream CPU per run {central['stream_cpu_s_runs']}",
          file=sys.stderr)
    spark = make_session(args.master, driver_memory=args.driver_memory, extra=dict(args.conf))
    rows = []
    try:
        for method in [m.strip() for m in args.methods.split(",") if m.strip()]:
            for P in [int(x) for x in args.partition_counts.split(",")]:
                row = measure_run(args, inputs, spark, method, P, reference)
                rows.append(row)
                print(json.dumps({k: row[k] for k in ("method", "partitions", "stream_batches", "busiest_share_cpu",
                                                      "busiest_share_postings", "fixed_cost_s_per_batch",
                                                      "speedup_vs_simulate")}), file=sys.stderr, flush=True)
                if args.out:  # after every run: a long sweep keeps what it measured
                    Path(args.out).write_text(json.dumps({"argv": sys.argv[1:], "central": {
                        "registration_cpu_s": central["registration_cpu_s"],
                        "stream_cpu_s_runs": [round(sum(b["cpu_s"] for b in r["batches"].values()), 3)
                                              for r in reference.runs]},
                        "runs": rows}, indent=2, default=float) + "\n")
    finally:
        spark.stop()
    text = table(rows)
    print(text)
    if args.table_out:
        Path(args.table_out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
