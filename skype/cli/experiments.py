"""``python -m skype.run experiments``: reproduce the paper's centralized experiments (§8.1).

Measures every experiment (kmax and Skyband tuning, alpha-groups, IPT vs IGPT, IGPT vs CIQ,
EMP per buffer and Table 4, keywords, k, subscriptions, window, Zipf keywords, time window) on
generated workloads, then writes into ``--out`` (default ``results/``):

  results.json   every run's raw metrics, the plan, the machine and the command line
  report.md      machine and versions, the paper's claims next to the measured values, and
                 one section per experiment with its figures and tables
  fig*.png       one figure per paper figure (matplotlib)

``--quick`` runs tiny sizes (about a minute); the default size finishes in under 30 minutes on
2 cores.  ``--only`` picks experiments; ``--replot`` redraws the figures and the report from
``results.json`` without measuring.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any
from pathlib import Path

from skype.report import print_table
from skype.errors import InputError, invalid_choice


def _names(text: str, choices, what: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise InputError("E023", what=what, expected="a comma-separated list of names", value=text)
    for n in names:
        if n not in choices:
            raise invalid_choice(what, n, choices)
    return list(dict.fromkeys(names))


def _positive(value: int | None, what: str) -> None:
    if value is not None and value < 1:
        raise InputError("E023", what=what, expected=">= 1", value=value)


def scale_of(args: argparse.Namespace):
    """The run's sizes: ``--quick`` or the default, with explicit options on top."""
    from dataclasses import replace

    from skype.data.workloads import DATASETS
    from skype.experiments.design import DEFAULT_SCALE, MEASURED_FRACTION, QUICK_SCALE

    base = QUICK_SCALE if args.quick else DEFAULT_SCALE
    for value, what in ((args.size, "--size"), (args.window, "--window"), (args.measured, "--measured"),
                        (args.chunk, "--chunk")):
        _positive(value, what)
    num_subs = args.size or base.num_subs
    window = args.window or (args.size if args.size else base.window)
    measured = args.measured or (max(1, round(MEASURED_FRACTION * window)) if (args.size or args.window)
                                 else base.measured)
    changes: dict[str, Any] = dict(num_subs=num_subs, window=window, measured=measured)
    if args.datasets:
        changes["datasets"] = tuple(_names(args.datasets, DATASETS, "dataset"))
    if args.seed is not None:
        changes["seed"] = args.seed
    if args.chunk:
        changes["chunk"] = args.chunk
    return replace(base, **changes)


def cmd_experiments(args: argparse.Namespace) -> int:
    from skype.experiments import runner
    from skype.experiments.suite import EXPERIMENTS

    names = _names(args.only, EXPERIMENTS, "experiment") if args.only else list(EXPERIMENTS)
    out = Path(args.out)
    command = command_line(args)
    if args.replot:
        report = runner.replot(out, names if args.only else None, command=command)
        print_table("experiments (re-plotted)", [("report", report), ("results", out / runner.RESULTS_FILE)])
        return 0
    scale = scale_of(args)
    doc = runner.run_suite(names, scale, out, command=command, progress=args.progress)
    print_table("experiments", [
        ("experiments", ", ".join(names)),
        ("sizes", f"{scale.num_subs:,} subscriptions, window {scale.window:,}, {scale.measured:,} measured"),
        ("runs", len(doc["results"])), ("time", f"{doc['elapsed_s']:.0f} s"),
        ("report", out / runner.REPORT_FILE), ("results", out / runner.RESULTS_FILE),
    ], file=sys.stdout)
    return 0


def command_line(args: argparse.Namespace) -> str:
    """The command, rebuilt from the parsed options (for the report)."""
    parts = ["python -m skype.run experiments"]
    for flag in ("quick", "replot"):
        if getattr(args, flag):
            parts.append(f"--{flag}")
    for opt in ("out", "only", "size", "window", "measured", "datasets", "seed", "chunk"):
        value = getattr(args, opt)
        if value is not None and not (opt == "out" and value == "results"):
            parts.append(f"--{opt} {shlex.quote(str(value))}")
    return " ".join(parts)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("experiments", help="reproduce the paper's centralized experiments (figures + report)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny sizes, about a minute (what the tests run)")
    p.add_argument("--out", default="results", metavar="DIR", help="output directory (default: %(default)s)")
    p.add_argument("--only", metavar="NAME[,NAME...]",
                   help="run only these experiments: tuning, groups, pruning, dissemination, reevaluation, "
                        "keywords, k, subscriptions, window, zipf, time_window")
    p.add_argument("--size", type=int, metavar="N", help="subscriptions (the window defaults to the same size)")
    p.add_argument("--window", type=int, metavar="N", help="count window in messages (the time-window experiment "
                                                           "uses as many seconds)")
    p.add_argument("--measured", type=int, metavar="M", help="messages measured after the window is full")
    p.add_argument("--datasets", metavar="NAME[,NAME]", help="datasets of the main comparisons; sweeps run on the "
                                                            "first (default: tweets,geonames)")
    p.add_argument("--seed", type=int, help="workload seed (default: 0)")
    p.add_argument("--chunk", type=int, metavar="N", help="messages per engine call (default: 1000; quick: 250)")
    p.add_argument("--replot", action="store_true", help="redraw figures and report from DIR/results.json")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bars on stderr (default: when stderr is a terminal)")
    p.set_defaults(func=cmd_experiments)

