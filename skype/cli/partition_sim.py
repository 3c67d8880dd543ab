"""``python -m skype.run partition-sim``: route a workload through distribution methods.

No engine and no Spark: the router alone.  For each method and partition count P it

1. takes the first ``--sample-size`` messages as the build sample and estimates every
   subscription's threshold theta_s by running an engine over the sample's last ``--window``
   messages (``--thresholds``: ``auto`` = ``skype.Engine`` if built, else the reference engine;
   ``kscore`` = the reference's kScore by a vectorised brute force, for large runs; ``none``),
2. builds the method from the subscriptions, the sample and the thresholds,
3. routes the subscriptions, then streams the remaining messages through the router in batches
   of ``--batch-size``, and reports (definitions in ``skype/partitioning/measure.py``):
   replication ratio (copies per subscription), communication per message (copies per message,
   the paper's measure), per-partition load (replicas x messages that meet there), load
   imbalance (max / mean) and routing time per message.

``--rebalance POLICY`` runs over time instead (with ``--drift KIND`` on a drifting stream):
intervals of ``--interval`` messages, a rebalancing decision after each; see
``skype/cli/partition_timeline.py``.

``--metrics-out`` writes JSON: one run gives a flat object with ``replication_ratio``,
``communication_per_message``, ``load_imbalance``, ``route_us_per_message`` and more; several
runs give ``{"workload": ..., "runs": [...]}``.  ``--sweep`` runs P = 4, 8, 16, 32, 64, 128 for
all six methods and writes a plot (``--plot-out``) and a Markdown table plus a CSV next to it
(``--table-out``).  Defaults (tweets, 10,000 subscriptions, 30,000 messages, a 2,000-message
warm-up window) run in seconds; pass ``--num-subs 100000`` for the issue's target size.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path
from typing import Any


from skype.cli.inputs import add_workload_args, load_inputs, window_of
from skype.cli.partition_timeline import POLICY_CHOICES, policies_arg, policy_param_arg
from skype.report import print_table, progress_bar
from skype.partitioning import METHOD_PARAMS, METHODS, THRESHOLD_ENGINES, build_distribution, estimate_thresholds
from skype.partitioning.measure import measure_routing
from skype.partitioning.ranges import CUTS
from skype.partitioning.registry import concat_subscriptions
from skype.partitioning.thresholds import resolve_engine
from skype.errors import InputError, invalid_choice
from skype.model import MessageBatch

REFINE_CHOICES = ("sstd", "ps2stream")  # the policies that fit every adaptive method

SWEEP_PARTITIONS = (4, 8, 16, 32, 64, 128)
DEFAULT_NUM_SUBS = 10_000
DEFAULT_NUM_MESSAGES = 30_000
DEFAULT_SAMPLE = 10_000
DEFAULT_WARMUP = 2_000
METRIC_COLUMNS = ("replication_ratio", "communication_per_message", "communication_cut_vs_hashing", "load_imbalance",
                  "postings_imbalance", "route_us_per_message", "build_s")


def partitions_arg(text: str) -> list[int]:
    """``"32"`` or ``"4,8,16"``."""
    try:
        values = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected P or a comma list like 4,8,16, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"partition counts must be integers >= 1, got {text!r}")
    return values


def _warmup_count(args: argparse.Namespace, sample: MessageBatch) -> int:
    """Messages of the warm-up window: ``--window``, or the sample's last ``--window-seconds``."""
    if args.window is None and args.window_seconds is None:
        return min(DEFAULT_WARMUP, len(sample))
    window = window_of(args)
    if "window" in window:
        return min(int(window["window"]), len(sample))
    if len(sample) == 0:
        return 0
    return int((sample.t > sample.t[-1] - float(window["window_seconds"])).sum())


def _methods(args: argparse.Namespace) -> list[str]:
    if args.sweep or args.method == "all":
        return list(METHODS)
    if args.method not in METHODS:
        raise invalid_choice("method", args.method, (*METHODS, "all"))
    return [args.method]


def _cut_vs_hashing(runs: list[dict]) -> None:
    """communication_cut_vs_hashing = 1 - comm(method) / comm(hashing) at the same P (hashing: P)."""
    for run in runs:
        run["communication_cut_vs_hashing"] = 1.0 - run["communication_per_message"] / run["num_partitions"]


def markdown_table(runs: list[dict]) -> str:
    """Pivot tables (methods x P) of the swept measures."""
    parts = sorted({r["num_partitions"] for r in runs})
    methods = [m for m in METHODS if any(r["method"] == m for r in runs)]
    cell = {(r["method"], r["num_partitions"]): r for r in runs}
    titles = {
        "communication_per_message": ("Communication per message (copies)", "{:.2f}"),
        "communication_cut_vs_hashing": ("Communication cut against hashing", "{:.0%}"),
        "replication_ratio": ("Replication ratio (copies per subscription)", "{:.2f}"),
        "load_imbalance": ("Load imbalance (max / mean of replicas x messages)", "{:.2f}"),
        "postings_imbalance": ("Postings imbalance (max / mean of the term postings scanned)", "{:.2f}"),
        "route_us_per_message": ("Routing time (µs per message, whole batches)", "{:.2f}"),
    }
    out = []
    for key, (title, fmt) in titles.items():
        out.append(f"**{title}**\n")
        out.append("| method | " + " | ".join(f"P={p}" for p in parts) + " |")
        out.append("|---|" + "---:|" * len(parts))
        for m in methods:
            vals = [fmt.format(cell[(m, p)][key]) if (m, p) in cell else "" for p in parts]
            out.append(f"| {m} | " + " | ".join(vals) + " |")
        out.append("")
    return "\n".join(out)


def write_table(path: str, runs: list[dict], workload: dict) -> list[Path]:
    """The Markdown pivot tables at ``path`` and the long-format CSV next to it."""
    md = Path(path).with_suffix(".md")
    md.parent.mkdir(parents=True, exist_ok=True)
    desc = ", ".join(f"{k}={v}" for k, v in workload.items())
    md.write_text(f"Workload: {desc}\n\n{markdown_table(runs)}\n", encoding="utf-8")
    csv_path = md.with_suffix(".csv")
    cols = ["method", "num_partitions", "subscriptions", "messages", *METRIC_COLUMNS, "max_replication",
            "max_communication", "total_load", "route_us_per_subscription"]
    with open(csv_path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
        writer.writeheader()
        for run in runs:
            writer.writerow(run)
    return [md, csv_path]


def write_plot(path: str, runs: list[dict], title: str) -> Path:
    """Four panels against P (log2 axis), one line per method; Agg canvas, no pyplot state."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 7), dpi=72)
    FigureCanvasAgg(fig)
    panels = [("communication_per_message", "copies per message"), ("replication_ratio", "copies per subscription"),
              ("load_imbalance", "load max / mean"), ("route_us_per_message", "routing µs per message")]
    for idx, (key, label) in enumerate(panels):
        ax = fig.add_subplot(2, 2, idx + 1)
        for method in METHODS:
            pts = sorted((r["num_partitions"], r[key]) for r in runs if r["method"] == method)
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, marker="o", markersize=3, label=method)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("partitions P")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        if key == "communication_per_message":
            ax.set_yscale("log", base=2)
            ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    return out


def cmd_partition_sim(args: argparse.Namespace) -> int:
    if args.method != "all" and args.method not in METHODS:
        raise invalid_choice("method", args.method, (*METHODS, "all"))
    if args.rebalance:
        from skype.cli.partition_timeline import cmd_partition_timeline

        return cmd_partition_timeline(args, [args.method], _warmup_count)
    methods = _methods(args)
    partitions = list(SWEEP_PARTITIONS) if args.sweep else args.partitions
    if args.batch_size < 1 or args.sample_size < 1:
        raise InputError("E023", what="--batch-size and --sample-size", expected="integers >= 1",
                         value=(args.batch_size, args.sample_size))
    t0 = time.perf_counter()
    inputs = load_inputs(args)
    inputs.refuse_peer_kinds("partition-sim")
    subs = concat_subscriptions([inputs.subscriptions] + [b for op, b in inputs.steps if op == "sub"])
    messages = inputs.messages()
    n_sample = min(args.sample_size, len(messages))
    sample = messages.slice(0, n_sample)
    stream = messages.slice(n_sample, len(messages)) if n_sample < len(messages) else messages
    warmup = _warmup_count(args, sample)
    engine = resolve_engine(args.thresholds)
    t1 = time.perf_counter()
    thresholds = estimate_thresholds(subs, sample, inputs.vocabulary, warmup, engine, bounds=inputs.bounds)
    theta_s = time.perf_counter() - t1
    workload = {"input": inputs.description, "subscriptions": len(subs), "sample_messages": len(sample),
                "stream_messages": len(stream), "warmup_window": warmup, "threshold_engine": engine}
    params = {"bounds": inputs.bounds, "cut": args.range_cut, **({"n1": args.n1} if args.n1 else {}),
              **({"refine": args.refine} if args.refine else {})}
    runs: list[dict[str, Any]] = []
    bar = progress_bar(total=len(methods) * len(partitions), desc="runs", enabled=args.progress)
    bar.unit = "run"
    try:
        for num_partitions in partitions:
            for method in methods:
                kwargs = {k: v for k, v in params.items() if k in METHOD_PARAMS[method]}
                tb = time.perf_counter()
                dist = build_distribution(method, num_partitions, subs, sample, inputs.vocabulary, thresholds, **kwargs)
                build_s = time.perf_counter() - tb
                report = measure_routing(dist, subs, thresholds, stream, batch_size=args.batch_size, build_s=build_s)
                runs.append(report.as_dict())
                bar.update(1)
    finally:
        bar.close()
    _cut_vs_hashing(runs)
    summary = {"theta_positive_fraction": float((thresholds > 0).mean()) if len(subs) else 0.0,
               "theta_mean": float(thresholds.mean()) if len(subs) else 0.0, "thresholds_s": theta_s,
               "wall_s": time.perf_counter() - t0}
    if args.metrics_out:
        Path(args.metrics_out).parent.mkdir(parents=True, exist_ok=True)
        if len(runs) == 1:
            payload: dict[str, Any] = {**runs[0], "workload": workload, **summary}
        else:
            payload = {"workload": workload, **summary, "runs": runs}
        Path(args.metrics_out).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    written = []
    table_out = args.table_out or ("partition-sweep.md" if args.sweep else None)
    plot_out = args.plot_out or ("partition-sweep.png" if args.sweep else None)
    if table_out:
        written += write_table(table_out, runs, workload)
    if plot_out:
        title = (f"{inputs.description}: {len(subs):,} subscriptions, {len(stream):,} routed messages, "
                 f"theta from {engine} over {warmup:,} messages")
        written.append(write_plot(plot_out, runs, title))
    print_table("partition-sim", [(k, v) for k, v in workload.items()] +
                [("theta > 0 (fraction)", f"{summary['theta_positive_fraction']:.3f}"),
                 ("wall time (s)", f"{summary['wall_s']:.1f}")], file=sys.stdout)
    header = f"  {'method':<14} {'P':>4} {'repl':>6} {'comm/msg':>9} {'cut':>5} {'imbal':>6} {'post':>6} {'us/msg':>7} {'build s':>8}"
    print(header)
    for r in runs:
        print(f"  {r['method']:<14} {r['num_partitions']:>4} {r['replication_ratio']:>6.3f} "
              f"{r['communication_per_message']:>9.3f} {r['communication_cut_vs_hashing']:>5.0%} "
              f"{r['load_imbalance']:>6.3f} {r['postings_imbalance']:>6.3f} {r['route_us_per_message']:>7.2f} {r['build_s']:>8.3f}")
    for path in written:
        print(f"  wrote {path}")
    sys.stdout.flush()
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("partition-sim", help="route a workload through a distribution method (no engine, no Spark)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_workload_args(p)
    p.set_defaults(dataset="tweets", num_subs=DEFAULT_NUM_SUBS, num_messages=DEFAULT_NUM_MESSAGES)
    g = p.add_argument_group("distribution")
    g.add_argument("--method", default="all", metavar="M",
                   help=f"one of {', '.join(METHODS)}, or all (default: %(default)s)")
    g.add_argument("--partitions", type=partitions_arg, default=[32], metavar="P[,P...]",
                   help="partition count, or a comma list (default: 32)")
    g.add_argument("--sweep", action="store_true",
                   help=f"all methods x P = {','.join(map(str, SWEEP_PARTITIONS))}; writes the plot and tables")
    g.add_argument("--n1", type=int, default=None, help="outer partitions of the hybrids (a divisor of P; "
                   "default: the largest divisor <= sqrt(P))")
    g.add_argument("--range-cut", choices=CUTS, default="balanced",
                   help="term ranges of keyword, prefix and the hybrids: 'balanced' makes the largest range's "
                        "work on the sample (postings scanned, messages received) the least possible, 'bisection' "
                        "is the paper's Algorithm 4, 'work' also weighs the subscriptions a range holds (default: %(default)s)")
    g.add_argument("--sample-size", type=int, default=DEFAULT_SAMPLE,
                   help="messages used to build (the rest are streamed; default: %(default)s)")
    g.add_argument("--thresholds", choices=THRESHOLD_ENGINES, default="auto",
                   help="engine giving theta_s over the warm-up window (--window, default "
                        f"{DEFAULT_WARMUP} messages; default: %(default)s)")
    g.add_argument("--batch-size", type=int, default=1000, help="messages per routing call (default: %(default)s)")
    g.add_argument("--refine", choices=REFINE_CHOICES, default=None, metavar="POLICY",
                   help="adaptive methods: after the build, run this rebalancing policy on the sample "
                        f"(one of {', '.join(REFINE_CHOICES)}) and keep the "
                        "most balanced layout it reached (default: the papers' builds only)")
    r = p.add_argument_group("over time (skype.partitioning.timeline; see skype/cli/partition_timeline.py)")
    r.add_argument("--rebalance", type=policies_arg, default=None, metavar="POLICY[,POLICY...]",
                   help=f"run over time with rebalancing: {', '.join(POLICY_CHOICES)} (paper: each adaptive "
                        "method's own policy); with --method all: location, prefix and the adaptive methods")
    r.add_argument("--policy-param", type=policy_param_arg, action="append", default=None, metavar="KEY=VALUE",
                   help="a keyword parameter of the policies that take it, repeatable: e.g. horizon=1 (plan on the "
                        "replicas forecast one interval ahead), cut=false (no runtime cuts of a hot leaf)")
    r.add_argument("--interval", type=int, default=5000,
                   help="messages per interval of the over-time report (default: %(default)s)")
    o = p.add_argument_group("output")
    o.add_argument("--metrics-out", metavar="FILE", help="metrics as JSON")
    o.add_argument("--plot-out", metavar="FILE", help="PNG plot of the runs (default with --sweep: partition-sweep.png)")
    o.add_argument("--table-out", metavar="FILE",
                   help="Markdown tables (+ CSV next to it; default with --sweep: partition-sweep.md)")
    o.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar on stderr (default: when stderr is a terminal)")
    p.set_defaults(func=cmd_partition_sim)
