"""``partition-sim --rebalance POLICY``: methods and rebalancing policies over time.

The stream (with ``--drift KIND``, a drifting one) runs through each method with each policy in
intervals of ``--interval`` messages (:mod:`skype.partitioning.timeline`).  Per interval: load
per partition, imbalance (max / mean), communication per message, replication, and the moves
made (units, subscriptions and bytes moved).  ``--metrics-out`` writes every run as JSON,
``--plot-out`` a PNG of the imbalance over the stream's hours, one line per method and policy.

Policies pair with methods as their papers do (``paper``: agrid-tornado, kdt-ps2stream,
qt-sstd, aqwa-aqwa); ``ps2stream`` and ``sstd`` also run on any adaptive method; every method,
static ones included, runs with ``never``.  Pairs that do not fit are skipped and listed.
``--policy-param KEY=VALUE`` passes a keyword parameter to every policy whose ``decide`` takes it
(numbers, or true/false for flags); the others ignore it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from skype.cli.inputs import load_inputs
from skype.report import print_table
from skype.errors import InputError, invalid_choice
from skype.partitioning import ADAPTIVE_METHODS, METHOD_PARAMS, build_distribution, estimate_thresholds
from skype.partitioning.rebalance import COMPATIBLE, PAPER_POLICY, POLICIES
from skype.partitioning.thresholds import resolve_engine
from skype.partitioning.timeline import run_timeline

POLICY_CHOICES = (*POLICIES, "paper")


def policies_arg(text: str) -> list[str]:
    values = [v.strip() for v in text.split(",") if v.strip()]
    for v in values:
        if v not in POLICY_CHOICES:
            raise argparse.ArgumentTypeError(f"unknown policy {v!r}; choose from {', '.join(POLICY_CHOICES)}")
    return values


def policy_param_arg(text: str) -> tuple[str, float]:
    """``KEY=VALUE`` for the policies' keyword parameters (numbers; true/false for flags)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    low = value.strip().lower()
    if low in ("true", "false"):
        return key.strip(), float(low == "true")
    try:
        return key.strip(), float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"the value of {key!r} must be a number or true/false, got {value!r}") from None


def policy_params_for(policy: str, given: list[tuple[str, float]] | None) -> dict:
    """The ``--policy-param`` values the policy's ``decide`` accepts (the others are for other
    policies of the same run); booleans where the policy's default is one."""
    import inspect

    from skype.partitioning import rebalance

    if policy == "never" or not given:
        return {}
    module = getattr(rebalance, policy)
    params = inspect.signature(module.decide).parameters
    out: dict = {}
    for key, value in given:
        if key in params:
            default = params[key].default
            out[key] = bool(value) if isinstance(default, bool) else (int(value) if isinstance(default, int) else value)
    return out


def run_pairs(methods: list[str], policies: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """(method, policy) pairs to run, and the skipped ones."""
    pairs, skipped = [], []
    for method in methods:
        for policy in policies:
            chosen = PAPER_POLICY.get(method, "never") if policy == "paper" else policy
            if chosen == "never" or method in COMPATIBLE[chosen]:
                if (method, chosen) not in pairs:
                    pairs.append((method, chosen))
            else:
                skipped.append(f"{method}+{chosen}")
    return pairs, skipped


def write_timeline_plot(path: str, runs: list[dict], title: str) -> Path:
    """Imbalance per interval against stream hours, one line per method + policy (Agg canvas)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 5), dpi=80)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    from matplotlib import colormaps

    colors = colormaps["tab20"]
    for index, run in enumerate(runs):
        ivs = run["intervals"]
        t0 = ivs[0]["t_start"] if ivs and ivs[0]["t_start"] is not None else 0.0
        xs = [((iv["t_end"] or 0.0) - t0) / 3600.0 for iv in ivs]
        ax.plot(xs, [iv["imbalance"] for iv in ivs], marker="o", markersize=2.5, linewidth=1.2, color=colors(index % 20),
                linestyle="--" if run["policy"] == "never" else "-", label=f"{run['method']} + {run['policy']}")
    ax.axhline(1.5, color="grey", linewidth=0.8, linestyle=":")
    ax.set_xlabel("stream hours")
    ax.set_ylabel("load imbalance (max / mean)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    return out


def cmd_partition_timeline(args: argparse.Namespace, methods: list[str], warmup_of) -> int:
    if args.interval < 1 or args.batch_size < 1 or args.sample_size < 1:
        raise InputError("E023", what="--interval, --batch-size and --sample-size", expected="integers >= 1",
                         value=(args.interval, args.batch_size, args.sample_size))
    if len(args.partitions) != 1:
        raise InputError("E023", what="--partitions with --rebalance", expected="one partition count",
                         value=args.partitions)
    if args.method == "all":
        methods = ["location", "prefix", *ADAPTIVE_METHODS]
    num_partitions = args.partitions[0]
    pairs, skipped = run_pairs(methods, args.rebalance)
    if not pairs:
        raise invalid_choice("method and policy pair", f"{methods} x {args.rebalance}",
                             [f"{m}+{p}" for p, ms in COMPATIBLE.items() for m in ms])
    t0 = time.perf_counter()
    inputs = load_inputs(args)
    steps, sample_parts, seen = [], [], 0
    for op, payload in inputs.steps:  # the first --sample-size messages build; the rest stream
        if op == "msgs" and seen < args.sample_size:
            take = min(len(payload), args.sample_size - seen)
            sample_parts.append(payload.slice(0, take))
            seen += take
            if take < len(payload):
                steps.append((op, payload.slice(take, len(payload))))
            continue
        steps.append((op, payload))
    from skype.model import MessageBatch

    sample = MessageBatch.concat(sample_parts)
    subs = inputs.subscriptions
    engine = resolve_engine(args.thresholds)
    warmup = warmup_of(args, sample)
    thresholds = estimate_thresholds(subs, sample, inputs.vocabulary, warmup, engine, bounds=inputs.bounds)
    workload = {"input": inputs.description, "subscriptions": len(subs), "sample_messages": len(sample),
                "stream_messages": sum(len(b) for op, b in steps if op == "msgs"),
                "arrivals": sum(len(b) for op, b in steps if op == "sub"),
                "departures": sum(1 for op, _ in steps if op == "unsub"), "warmup_window": warmup,
                "threshold_engine": engine, "num_partitions": num_partitions, "interval_messages": args.interval,
                "policy_params": dict(getattr(args, "policy_param", None) or [])}
    runs: list[dict[str, Any]] = []
    for method, policy in pairs:
        kwargs = {"bounds": inputs.bounds} if "bounds" in METHOD_PARAMS[method] else {}
        if getattr(args, "refine", None) and "refine" in METHOD_PARAMS[method]:
            kwargs["refine"] = args.refine
        if getattr(args, "range_cut", None) and "cut" in METHOD_PARAMS[method]:
            kwargs["cut"] = args.range_cut
        tb = time.perf_counter()
        dist = build_distribution(method, num_partitions, subs, sample, inputs.vocabulary, thresholds, **kwargs)
        build_s = time.perf_counter() - tb
        tr = time.perf_counter()
        params = policy_params_for(policy, getattr(args, "policy_param", None))
        report = run_timeline(dist, policy, subs, thresholds, steps, interval=args.interval, batch_size=args.batch_size,
                              policy_params=params)
        report["policy_params"] = params
        report["build_s"], report["run_s"] = build_s, time.perf_counter() - tr
        runs.append(report)
    payload = {"workload": workload, "skipped": skipped, "wall_s": time.perf_counter() - t0, "runs": runs}
    written = []
    if args.metrics_out:
        Path(args.metrics_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.metrics_out).write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
        written.append(args.metrics_out)
    if args.plot_out:
        title = (f"{inputs.description}: {len(subs):,} subscriptions (+{workload['arrivals']:,} arriving), "
                 f"P = {num_partitions}, intervals of {args.interval:,} messages")
        given = getattr(args, "policy_param", None)
        if given:
            title += "\npolicies with " + ", ".join(f"{k}={v:g}" for k, v in given)
        written.append(write_timeline_plot(args.plot_out, runs, title))
    print_table("partition-sim over time", [(k, v) for k, v in workload.items()] +
                [("skipped pairs", ", ".join(skipped) or "none"), ("wall time (s)", f"{payload['wall_s']:.1f}")],
                file=sys.stdout)
    print(f"  {'method':<10} {'policy':<10} {'imb first':>9} {'imb max':>8} {'max>1st':>8} {'imb last':>9} "
          f"{'moved/h':>8} {'MB moved':>9} {'comm/msg':>9} {'repl':>5}")
    for r in runs:
        last = r["intervals"][-1] if r["intervals"] else {"replication_ratio": 0.0}
        print(f"  {r['method']:<10} {r['policy']:<10} {r['imbalance_first']:>9.2f} {r['imbalance_max']:>8.2f} "
              f"{r['imbalance_max_after_first']:>8.2f} {r['imbalance_last']:>9.2f} {r['moved_fraction_per_hour']:>8.2%} "
              f"{r['bytes_moved'] / 2**20:>9.2f} {r['communication_per_message']:>9.2f} {last['replication_ratio']:>5.2f}")
    for path in written:
        print(f"  wrote {path}")
    sys.stdout.flush()
    return 0
