"""Workload options shared by the subcommands: the command line's half of :mod:`skype.workload`.

A workload is either generated (``--dataset``) or read from files (``--messages`` and
``--subscriptions``, or ``--events``).  The options parse into a
:class:`skype.workload.WorkloadSpec` (:func:`skype.simulate.workload_spec`, which holds the rule);
:func:`skype.workload.load_workload` validates the records
once (``--on-error fail`` stops at the first bad record, ``skip`` counts them by error code).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from skype import io, simulate
from skype.data.drift import DRIFT_KINDS, make_drift
from skype.data.workloads import DATASETS, SUB_KEYWORDS
from skype.errors import InputError
from skype.model import DEFAULT_BOUNDS, Bounds
from skype.simulate import DEFAULT_WINDOW
from skype.workload import Inputs

DEFAULT_NUM_SUBS = 20_000
DEFAULT_NUM_MESSAGES = 50_000


def term_range(text: str) -> tuple[int, int]:
    """``"1..3"``, ``"1,3"`` or ``"2"`` -> (lo, hi)."""
    parts = text.replace("..", ",").split(",")
    try:
        lo, hi = (int(parts[0]), int(parts[-1]))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a range like 1..3, got {text!r}") from None
    if not 1 <= lo <= hi:
        raise argparse.ArgumentTypeError(f"expected 1 <= lo <= hi, got {text!r}")
    return lo, hi


def bounds_arg(text: str) -> Bounds:
    try:
        return Bounds.parse(text)
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_workload_args(p: argparse.ArgumentParser, *, window: bool = True) -> None:
    g = p.add_argument_group("workload (generated)")
    g.add_argument("--dataset", choices=DATASETS, default="geonames", help="generated workload (default: geonames)")
    g.add_argument("--num-subs", type=int, default=DEFAULT_NUM_SUBS, help="subscriptions to generate (default: %(default)s)")
    g.add_argument("--num-messages", type=int, default=DEFAULT_NUM_MESSAGES, help="messages to generate (default: %(default)s)")
    g.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
    g.add_argument("--sub-terms", type=term_range, default=(1, 3), metavar="LO..HI", help="terms per subscription (default: 1..3)")
    g.add_argument("--k", type=int, default=20, help="k of generated subscriptions (default: %(default)s)")
    g.add_argument("--drift", choices=DRIFT_KINDS, default="none",
                   help="drift the generated stream over time (skype.data.drift; default: none)")
    g.add_argument("--drift-start", type=int, default=None, metavar="N",
                   help="messages before the drift begins (default: partition-sim's --sample-size, else 0)")
    g.add_argument("--sub-keywords", choices=SUB_KEYWORDS, default="message",
                   help="draw subscription terms from a message (paper) or from a Zipf law")
    f = p.add_argument_group("workload (files: JSONL or Parquet, see README)")
    f.add_argument("--messages", metavar="FILE", help="message stream")
    f.add_argument("--subscriptions", metavar="FILE", help="subscriptions registered before the stream starts")
    f.add_argument("--events", metavar="FILE", help="interleaved sub/unsub/msg events (replaces --messages)")
    f.add_argument("--on-error", choices=("fail", "skip"), default="fail",
                   help="bad records: stop naming the record (default), or skip and count them")
    f.add_argument("--vocabulary", metavar="FILE",
                   help="weigh terms with this vocabulary file (python -m skype.run vocabulary) instead of the "
                        "document frequencies of the whole stream; unseen terms get its hashed ids")
    if window:
        w = p.add_argument_group("window and space")
        ex = w.add_mutually_exclusive_group()
        ex.add_argument("--window", type=int, help=f"count window of N messages (default: {DEFAULT_WINDOW})")
        ex.add_argument("--window-seconds", type=float, help="time window of T seconds")
        w.add_argument("--bounds", type=bounds_arg, default=DEFAULT_BOUNDS, metavar="MINX,MINY,MAXX,MAXY",
                       help="space bounds (default: -180,-90,180,90)")


def window_of(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed window options (:func:`skype.simulate.window_of`)."""
    return simulate.window_of(vars(args))


def drift_start(args: argparse.Namespace) -> int:
    return simulate.workload_spec(vars(args)).drift_start


def load_inputs(args: argparse.Namespace, *, stream: bool = False) -> Inputs:
    """The workload of a subcommand's parsed options (:func:`skype.simulate.load_inputs`)."""
    return simulate.load_inputs(vars(args), stream=stream)


def write_drift_files(args, workload) -> int:
    """``generate --drift KIND``: the subscriptions registered first, the drifted messages, and,
    with ``--events-out``, the whole drifted stream (arrivals and departures included) as events."""
    from skype.report import print_table

    d = make_drift(args.drift, workload, start=drift_start(args), seed=args.seed)
    if len(d.arrivals) and not args.events_out:
        raise InputError("E062", kind=args.drift, detail=f"{len(d.arrivals)} subscriptions arrive mid-stream: "
                                                           "give --events-out to write them")
    vocab = workload.vocabulary
    n_msg = io.write_objects(args.messages_out, io.message_objects(d.messages, vocab))
    n_sub = io.write_objects(args.subscriptions_out, io.subscription_objects(workload.subscriptions, vocab))
    rows = [("dataset", f"{args.dataset}, drift {args.drift}"), ("messages", f"{n_msg} -> {args.messages_out}"),
            ("subscriptions", f"{n_sub} -> {args.subscriptions_out}")]
    if args.events_out:
        def events():
            for op, payload in d.steps():
                if op == "msgs":
                    yield from ({"op": "msg", **obj} for obj in io.message_objects(payload, vocab))
                elif op == "sub":
                    yield from ({"op": "sub", **obj} for obj in io.subscription_objects(payload, vocab))
                else:
                    yield {"op": "unsub", "id": payload}
        rows.append(("events", f"{io.write_objects(args.events_out, events())} -> {args.events_out}"))
    print_table("generate", rows, file=sys.stdout)
    return 0
