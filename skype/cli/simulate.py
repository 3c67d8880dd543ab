"""``python -m skype.run simulate``: run an engine over a workload, write results and metrics.

Subscriptions are registered before the stream starts; ``--events`` interleaves subscribe and
unsubscribe with messages.  ``--fill-window`` is the paper's protocol instead: the first
``window`` messages (a time window: those within ``window_seconds`` of the first) fill the window
before the subscriptions register (in one bulk ``subscribe_batch``), and only the messages after
them are measured.  After the registration, ``--turnover W`` windows of messages (default 1 with
``--fill-window``; a time window: those within W * ``window_seconds`` of the first) are published
unmeasured, so that every message the subscriptions registered against has expired and AMP, EMP,
flush and throughput are steady-state figures.  The fill and the turnover take messages from
the head of the stream only: with ``--events`` they stop at the first subscribe or unsubscribe
event.  So a count window of N with ``--fill-window`` measures the messages after the first
(1 + W) * N.

A generated ``tweets`` workload is streamed: its messages are generated chunk by chunk as the
engine reads them (:mod:`skype.data.streaming`, the same messages as ``--no-stream``, which holds
the whole stream first), and the subscriptions' arrays are dropped once registered.

Metrics (``--metrics-out``, JSON): ``messages`` (measured), ``fill_messages``, ``turnover_messages``,
``turnover_s``, ``subscriptions``, ``generate_s`` (seconds spent generating the measured messages
of a streamed workload, left out of ``stream_s`` and the throughput),
``amp_us`` (mean time per arriving message), ``emp_us`` (mean time per expiring message),
``flush_us`` (the netting of each message's events, per measured message: the query kinds'
always, the top-k core's with ``--timers``), ``other_us`` (the rest of ``stream_s`` per
measured message: Python around the cores, change-log merges; AMP + EMP + flush + other
= ``stream_s`` / ``messages`` when every message arrives and one expires), ``parts_us``
(the same time by part, per measured message: each query kind with its netting, the query
window's upkeep, the top-k core's AMP + EMP),
``throughput_msgs_per_s`` (measured messages per wall second, arrival and expiry together),
``subscribe_s`` (the registration time), ``fill_s``, ``peak_rss_bytes``, ``reevaluations``,
``avg_buffer_size``, ``rejected_records``, ``result_changes`` and the engine's own statistics
(cumulative, the fill included).  AMP, EMP, re-evaluations and throughput count only the measured
messages; so does ``phases`` (the engine's per-phase counters, and its per-phase seconds with
``--timers``: stats()["phases"] over the measured stream).
"""

# This module only parses the options; skype.simulate.run runs them (the docstring above is the
# command's --help, the protocol is skype.simulate's).
from __future__ import annotations

import argparse
import sys

from skype import io, simulate
from skype.cli.inputs import add_workload_args
from skype.cli.peer import add_peer_generate_args, peer_generate
from skype.report import print_table, simulate_rows
from skype.simulate import ENGINES, REGISTRATIONS

ENGINE_DEFAULTS = simulate.EngineSettings()
CONTROL_DEFAULTS = simulate.ControlSettings()


def add_engine_args(p: argparse.ArgumentParser) -> None:
    from skype.engine import BUFFERS, INDEXES, MESSAGE_INDEXES

    g = p.add_argument_group("engine")
    g.add_argument("--engine", choices=ENGINES, default=ENGINE_DEFAULTS.engine, help="the Cython core (default) or the brute-force reference")
    g.add_argument("--index", choices=INDEXES, default=ENGINE_DEFAULTS.index, help="subscription index of the core (default: %(default)s)")
    g.add_argument("--buffer", choices=BUFFERS, default=ENGINE_DEFAULTS.buffer, help="result buffer of the core (default: cskyband)")
    g.add_argument("--kmax", type=int, default=ENGINE_DEFAULTS.kmax, help="kmax of the kmax buffer (default: %(default)s)")
    g.add_argument("--skyband-ratio", type=float, default=ENGINE_DEFAULTS.skyband_ratio, help="theta / kScore of the Skyband buffer (default: %(default)s)")
    g.add_argument("--block-size", type=int, default=ENGINE_DEFAULTS.block_size, help="postings per block of the block index (default: %(default)s)")
    g.add_argument("--bands", type=int, default=ENGINE_DEFAULTS.bands, help="alpha-bands per posting list of the block index (default: %(default)s)")
    g.add_argument("--leaf-capacity", type=int, default=ENGINE_DEFAULTS.leaf_capacity, help="subscriptions per IGPT quadtree leaf (default: %(default)s)")
    g.add_argument("--groups", type=int, default=ENGINE_DEFAULTS.groups, help="alpha-groups per IGPT posting list (default: %(default)s)")
    g.add_argument("--message-index", choices=MESSAGE_INDEXES, default=ENGINE_DEFAULTS.message_index,
                   help="the window's index for re-evaluations: per-term lists in arrival order, or per-term "
                        "quadtrees (default: quadtree for the exact buffer, lists otherwise)")
    g.add_argument("--micro-batch", type=int, default=ENGINE_DEFAULTS.micro_batch,
                   help="messages whose subscriptions are found together, each posting list read once for "
                        "them all (default: %(default)s, one at a time)")
    g.add_argument("--reverse-map", action=argparse.BooleanOptionalAction, default=ENGINE_DEFAULTS.reverse_map,
                   help="keep per message the subscriptions that buffered it (default); --no-reverse-map finds "
                        "them at expiry by disseminating the message again: less memory, more work per expiry")
    g.add_argument("--exact-holders", action=argparse.BooleanOptionalAction, default=ENGINE_DEFAULTS.exact_holders,
                   help="clear a message's reverse-map entry when a buffer drops it, so that expiry visits only "
                        "the buffers still holding it (default); --no-exact-holders keeps entries until expiry")
    g.add_argument("--registration", choices=REGISTRATIONS, default=ENGINE_DEFAULTS.registration,
                   help="how a large registration batch finds each subscription's first messages: search a "
                        "static index of the window, per-term k-d trees (default), or replay the window through a "
                        "temporary index (the search's oracle: the same buffers)")
    g.add_argument("--timers", action="store_true",
                   help="per-phase clocks in the engine's stats and the metrics (off by default: they cost a "
                        "little on every phase)")


def engine_options(args: argparse.Namespace) -> dict:
    """Keyword arguments of skype.Engine from the parsed engine options (:func:`skype.simulate.engine_options`)."""
    return simulate.engine_options(vars(args))


def cmd_simulate(args: argparse.Namespace) -> int:
    metrics = simulate.run(vars(args)).metrics
    print_table("simulate", simulate_rows(metrics), file=sys.stdout)
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    """Write a generated workload as files (the formats ``simulate`` reads)."""
    from skype.data.workloads import make_workload

    w = make_workload(args.dataset, num_subs=args.num_subs, num_messages=args.num_messages, seed=args.seed,
                      sub_terms=args.sub_terms, k=args.k, sub_keywords=args.sub_keywords)
    if args.drift != "none":
        from skype.cli.inputs import write_drift_files

        return write_drift_files(args, w)
    n_msg = io.write_objects(args.messages_out, io.message_objects(w.messages, w.vocabulary,
                                                                    w.texts if args.text else None))
    sub_records, peer_rows = peer_generate(args, w)
    n_sub = io.write_objects(args.subscriptions_out, sub_records)
    print_table("generate", [("dataset", args.dataset), ("messages", f"{n_msg} -> {args.messages_out}"),
                             ("subscriptions", f"{n_sub} -> {args.subscriptions_out}")] + peer_rows, file=sys.stdout)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help="run the engine over a workload (the main job)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_workload_args(p)
    add_engine_args(p)
    p.add_argument("--fill-window", action="store_true",
                   help="the paper's protocol: fill the window with the first messages, then register the "
                        "subscriptions, then publish --turnover windows unmeasured, then measure the rest")
    p.add_argument("--turnover", type=float, default=CONTROL_DEFAULTS.turnover, metavar="W",
                   help="with --fill-window: windows of messages published after the registration and before "
                        "the measured stream, so that it runs in steady state (default: %(default)s)")
    p.add_argument("--stream", action=argparse.BooleanOptionalAction, default=CONTROL_DEFAULTS.stream,
                   help="generate a tweets workload chunk by chunk as the engine reads it (default), the same "
                        "messages; --no-stream holds the whole stream in memory first")
    o = p.add_argument_group("output")
    o.add_argument("--results-out", metavar="FILE", help="final top-k of every subscription (JSONL or Parquet)")
    o.add_argument("--metrics-out", metavar="FILE", help="run metrics as JSON")
    o.add_argument("--changes-out", metavar="FILE", help="every result change as JSONL")
    o.add_argument("--answers-out", metavar="FILE",
                   help="the answers of the snapshot queries ({\"op\": \"query\"} events) as JSONL")
    o.add_argument("--batch-size", type=int, default=CONTROL_DEFAULTS.batch_size, help="messages per engine call (default: %(default)s)")
    o.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar on stderr (default: when stderr is a terminal)")
    p.set_defaults(func=cmd_simulate)

    g = sub.add_parser("generate", help="write a generated workload to files",
                       description=cmd_generate.__doc__)
    add_workload_args(g, window=False)
    g.add_argument("--messages-out", required=True, metavar="FILE")
    g.add_argument("--subscriptions-out", required=True, metavar="FILE")
    g.add_argument("--text", action="store_true", help="write message text (geonames) instead of exact terms")
    add_peer_generate_args(g)
    g.set_defaults(func=cmd_generate)
