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

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from collections.abc import Iterator
from typing import Any

import numpy as np

from skype import io
from skype.api import EngineBase
from skype.cli.inputs import add_workload_args, load_inputs, window_of
from skype.workload import Inputs
from skype.cli.peer import add_peer_generate_args, peer_generate
from skype.cli.report import peak_rss_bytes, print_table, progress_bar

ENGINES = ("core", "reference")


def add_engine_args(p: argparse.ArgumentParser) -> None:
    from skype.engine import BUFFERS, INDEXES, MESSAGE_INDEXES

    g = p.add_argument_group("engine")
    g.add_argument("--engine", choices=ENGINES, default="core", help="the Cython core (default) or the brute-force reference")
    g.add_argument("--index", choices=INDEXES, default="blocks", help="subscription index of the core (default: blocks)")
    g.add_argument("--buffer", choices=BUFFERS, default="cskyband", help="result buffer of the core (default: cskyband)")
    g.add_argument("--kmax", type=int, default=60, help="kmax of the kmax buffer (default: %(default)s)")
    g.add_argument("--skyband-ratio", type=float, default=0.8, help="theta / kScore of the Skyband buffer (default: %(default)s)")
    g.add_argument("--block-size", type=int, default=64, help="postings per block of the block index (default: %(default)s)")
    g.add_argument("--bands", type=int, default=8, help="alpha-bands per posting list of the block index (default: %(default)s)")
    g.add_argument("--leaf-capacity", type=int, default=1000, help="subscriptions per IGPT quadtree leaf (default: %(default)s)")
    g.add_argument("--groups", type=int, default=10, help="alpha-groups per IGPT posting list (default: %(default)s)")
    g.add_argument("--message-index", choices=MESSAGE_INDEXES, default=None,
                   help="the window's index for re-evaluations: per-term lists in arrival order, or per-term "
                        "quadtrees (default: quadtree for the exact buffer, lists otherwise)")
    g.add_argument("--micro-batch", type=int, default=1,
                   help="messages whose subscriptions are found together, each posting list read once for "
                        "them all (default: %(default)s, one at a time)")
    g.add_argument("--reverse-map", action=argparse.BooleanOptionalAction, default=True,
                   help="keep per message the subscriptions that buffered it (default); --no-reverse-map finds "
                        "them at expiry by disseminating the message again: less memory, more work per expiry")
    g.add_argument("--exact-holders", action=argparse.BooleanOptionalAction, default=True,
                   help="clear a message's reverse-map entry when a buffer drops it, so that expiry visits only "
                        "the buffers still holding it (default); --no-exact-holders keeps entries until expiry")
    g.add_argument("--registration", choices=("replay", "search", "search-bands", "search-mask64"), default="search",
                   help="how a large registration batch finds each subscription's first messages: search a "
                        "static index of the window, per-term k-d trees (default), or its older weight-band "
                        "layout (search-bands), or the trees with the earlier 64-bit entry masks (search-mask64), "
                        "or replay the window through a temporary index")
    g.add_argument("--timers", action="store_true",
                   help="per-phase clocks in the engine's stats and the metrics (off by default: they cost a "
                        "little on every phase)")


def engine_options(args: argparse.Namespace) -> dict:
    """Keyword arguments of skype.Engine from the engine options."""
    options = dict(index=args.index, buffer=args.buffer, kmax=args.kmax, skyband_ratio=args.skyband_ratio,
                   block_size=args.block_size, bands=args.bands, leaf_capacity=args.leaf_capacity, groups=args.groups,
                   reverse_map=args.reverse_map, message_index=args.message_index, micro_batch=args.micro_batch,
                   exact_holders=args.exact_holders, timers=args.timers)
    if args.registration != "search":  # the default stays out of saved plans
        options["registration"] = args.registration
    return options


def make_engine(args: argparse.Namespace, inputs: Inputs) -> EngineBase:
    window = window_of(args)
    if args.engine == "reference":
        from skype.reference import ReferenceEngine

        return ReferenceEngine(bounds=inputs.bounds, vocabulary=inputs.vocabulary, **window)
    from skype.engine import Engine

    # the query window only when the inputs use the other kinds or snapshot queries
    used = set(inputs.peer_kinds())
    snapshots = bool(used - {"topk with until"})
    # per-term trees from the start when something will read them (no build at the first query)
    term_trees = "eager" if used & {"knn", "terms", "snapshot queries"} else "lazy"
    return Engine(bounds=inputs.bounds, vocabulary=inputs.vocabulary, snapshots=snapshots, term_trees=term_trees,
                  **engine_options(args), **window)


def split_fill(steps: list, window: dict[str, Any]) -> tuple[list, list]:
    """The leading messages that fill the window, and the steps after them.  A count window of
    N takes the first N messages; a time window of T those with t <= t_first + T (the harness's
    rule).  Only messages at the head of the stream count: the fill stops at the first
    subscribe or unsubscribe step."""
    fill: list = []
    rest = list(steps)
    need = window.get("window")
    t_end: float | None = None
    while rest and rest[0][0] == "msgs":
        batch = rest[0][1]
        if need is not None:
            take = min(need, len(batch))
            need -= take
        else:
            if t_end is None and len(batch):
                t_end = float(batch.t[0]) + window["window_seconds"]
            take = int(np.searchsorted(batch.t, t_end, side="right")) if t_end is not None else 0
        if take:
            fill.append(batch.slice(0, take))
        if take < len(batch):
            rest[0] = ("msgs", batch.slice(take, len(batch)))
            break
        rest.pop(0)
        if need == 0:
            break
    return fill, rest


def _counts(engine: EngineBase) -> dict[str, float]:
    s = engine.stats()
    q = s.get("queries") or {}  # the core's query kinds: their own window, timed apart
    return {"arrivals": s["arrivals"], "expirations": s["expirations"],
            "arrival_us": s["amp_us"] * s["arrivals"] + q.get("amp_us", 0.0) * q.get("arrivals", 0),
            "expiry_us": s["emp_us"] * s["expirations"] + q.get("emp_us", 0.0) * q.get("expirations", 0),
            # the steps' netting: the query core's always, the top-k core's with --timers
            "flush_us": 1e6 * (q.get("flush_s", 0.0) + ((s.get("phases") or {}).get("seconds") or {}).get("flush", 0.0)),
            "reevaluations": s["reevaluations"]}


def _parts_s(engine: EngineBase) -> dict[str, float]:
    """Seconds by part: the query kinds (each with its netting), their window, the top-k core."""
    s = engine.stats()
    q = s.get("queries") or {}
    return {**{k: v.get("time_s", 0.0) for k, v in (q.get("kinds") or {}).items()},
            **({"query window": q.get("window_upkeep_s", 0.0)} if q else {}),
            "topk": (s["amp_us"] * s["arrivals"] + s["emp_us"] * s["expirations"]) / 1e6}


def run_stream(engine: EngineBase, inputs: Inputs, *, batch_size: int, progress: bool | None,
               changes_out: str | None = None, fill_window: dict[str, Any] | None = None,
               answers_out: str | None = None, turnover: float = 1.0,
               release_subscriptions: bool = False) -> dict[str, Any]:
    """Register the subscriptions, stream every step through ``engine``; returns run metrics.
    With ``fill_window`` (the window, as :func:`window_of` returns it), the window is filled
    first, then ``turnover`` windows of messages go through unmeasured, and only the messages after
    them are measured (see the module docstring).  ``release_subscriptions``: once registered,
    ``inputs.subscriptions`` is replaced by an empty batch (the engine holds its own copy), so
    that a large registration does not stay in memory through the stream."""
    steps = inputs.steps
    fill_s = 0.0
    fill_n = 0
    if fill_window is not None:
        fill, steps = split_fill(steps, fill_window)
        t0 = time.perf_counter()
        for part in fill:
            for chunk in part.batches(batch_size):
                engine.publish_batch(chunk)          # no subscription yet: no result changes
        fill_s = time.perf_counter() - t0
        fill_n = sum(len(p) for p in fill)
    t0 = time.perf_counter()
    engine.subscribe_batch(inputs.subscriptions)
    engine.subscribe_many(inputs.others)
    t_subscribe = time.perf_counter() - t0
    if release_subscriptions:
        inputs.subscriptions = inputs.subscriptions.slice(0, 0)
    turnover_s, turnover_n = 0.0, 0
    if fill_window is not None and turnover > 0:
        size = fill_window.get("window")
        span = ({"window": int(round(turnover * size))} if size is not None
                else {"window_seconds": turnover * fill_window["window_seconds"]})
        turn, steps = split_fill(steps, span)
        t0 = time.perf_counter()
        for part in turn:
            for chunk in part.batches(batch_size):
                engine.publish_batch(chunk)
        turnover_s = time.perf_counter() - t0
        turnover_n = sum(len(p) for p in turn)
    before = _counts(engine)
    parts_before = _parts_s(engine)
    phases_before = _phase_counts(engine)
    measured = sum(len(b) for op, b in steps if op == "msgs")
    changes = 0
    sink = open(changes_out, "w", encoding="utf-8") if changes_out else None
    answers = open(answers_out, "w", encoding="utf-8") if answers_out else None
    bar = progress_bar(total=measured, desc="messages", enabled=progress)
    published = fill_n + turnover_n
    query_s, n_queries = 0.0, 0
    generate = [0.0]
    t0 = time.perf_counter()
    try:
        for op, payload in steps:
            if op == "sub":
                engine.subscribe_batch(payload)
            elif op == "ksub":
                engine.subscribe_many([payload])
            elif op == "unsub":
                engine.unsubscribe(payload)
            elif op == "query":
                fields = {k: v for k, v in payload.items() if k not in ("qid", "kind")}
                tq = time.perf_counter()
                answer = engine.query(payload["kind"], **fields)
                query_s += time.perf_counter() - tq
                n_queries += 1
                if answers is not None:
                    answers.write(json.dumps({"qid": payload["qid"], "after": published, "kind": payload["kind"],
                                              "answer": io.answer_entries(payload["kind"], answer)}) + "\n")
            else:
                for chunk in _timed(payload.batches(batch_size), generate):
                    log = engine.publish_batch(chunk)
                    changes += len(log)
                    published += len(chunk)
                    if sink is not None:
                        for c in engine.named_changes(log):
                            sink.write(json.dumps({"sub": c.sub_id, "entered": list(c.entered), "left": list(c.left)}) + "\n")
                    bar.update(len(chunk))
    finally:
        bar.close()
        for fh in (sink, answers):
            if fh is not None:
                fh.close()
    wall = time.perf_counter() - t0 - generate[0]    # a streamed workload's generation is not the engine's
    stats = engine.stats()
    after = _counts(engine)
    n = measured
    arrivals = after["arrivals"] - before["arrivals"]
    expirations = after["expirations"] - before["expirations"]
    rejected = dict(sorted(inputs.rejected.items()))
    return {
        "input": inputs.description,
        "messages": n,
        "fill_messages": fill_n,
        "turnover_messages": turnover_n,
        "turnover_s": turnover_s,
        "subscriptions": stats["subscriptions"],
        "window_size": stats["window_size"],
        "amp_us": (after["arrival_us"] - before["arrival_us"]) / arrivals if arrivals else 0.0,
        "emp_us": (after["expiry_us"] - before["expiry_us"]) / expirations if expirations else 0.0,
        "throughput_msgs_per_s": n / wall if wall > 0 else 0.0,
        # per measured message: AMP + EMP + flush + other = stream_s / messages (other: Python, merges)
        "flush_us": (after["flush_us"] - before["flush_us"]) / n if n else 0.0,
        "parts_us": {k: 1e6 * (v - parts_before.get(k, 0.0)) / n if n else 0.0 for k, v in _parts_s(engine).items()},
        "other_us": (1e6 * wall - (after["arrival_us"] - before["arrival_us"]) - (after["expiry_us"] - before["expiry_us"])
                     - (after["flush_us"] - before["flush_us"])) / n if n else 0.0,
        "stream_s": wall,
        "generate_s": generate[0],
        "fill_s": fill_s,
        "subscribe_s": t_subscribe,
        "peak_rss_bytes": peak_rss_bytes(),
        "reevaluations": after["reevaluations"] - before["reevaluations"],
        "avg_buffer_size": stats["avg_buffer_size"],
        "result_changes": changes,
        "snapshot_queries": n_queries,
        "snapshot_query_us": 1e6 * query_s / n_queries if n_queries else 0.0,
        "subscriptions_by_kind": _kind_counts(engine),
        "rejected_records": sum(rejected.values()),
        "rejected_by_code": rejected,
        "phases": _phase_delta(phases_before, _phase_counts(engine)),
        "engine_stats": stats,
    }


def _timed(chunks: Iterator[Any], total: list[float]) -> Iterator[Any]:
    """The items of ``chunks``, adding the seconds spent producing them to ``total[0]``."""
    while True:
        t0 = time.perf_counter()
        item = next(chunks, None)
        total[0] += time.perf_counter() - t0
        if item is None:
            return
        yield item


def _phase_counts(engine: EngineBase) -> dict[str, Any]:
    """The engine's cumulative instruments (core engines: stats()["phases"]; others: none)."""
    return engine.stats().get("phases") or {}


def _phase_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The instruments over the measured stream: counts, band postings and seconds differenced."""
    if not after:
        return {}
    out: dict[str, Any] = {"timers": after.get("timers", False)}
    for key in ("counts", "seconds"):
        a, b = after.get(key), before.get(key) or {}
        out[key] = None if a is None else {
            name: (None if v is None else v - (b.get(name) or 0)) for name, v in a.items()}
    bands_a, bands_b = after.get("band_postings"), before.get("band_postings") or []
    out["band_postings"] = None if bands_a is None else [
        v - (bands_b[i] if i < len(bands_b) else 0) for i, v in enumerate(bands_a)]
    return out


def _kind_counts(engine: EngineBase) -> dict[str, int]:
    counts = {"topk": len(engine.subscription_ids())}
    for kind, _ in engine._kinds.values():
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def cmd_simulate(args: argparse.Namespace) -> int:
    inputs = load_inputs(args, stream=args.stream)
    engine = make_engine(args, inputs)
    metrics = run_stream(engine, inputs, batch_size=args.batch_size, progress=args.progress, changes_out=args.changes_out,
                         fill_window=window_of(args) if args.fill_window else None, answers_out=args.answers_out,
                         turnover=args.turnover, release_subscriptions=args.stream)
    metrics["engine"] = args.engine if args.engine == "reference" else f"core ({args.index}, {args.buffer})"
    metrics.update(window_of(args))
    if args.results_out:
        io.write_objects(args.results_out, io.kind_result_objects(engine.results_by_kind()))
    if args.metrics_out:
        Path(args.metrics_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.metrics_out).write_text(json.dumps(metrics, indent=2, default=float) + "\n")
    rows = [
        ("input", metrics["input"]), ("engine", metrics["engine"]),
        ("window", metrics.get("window") or f"{metrics.get('window_seconds')} s"),
        ("subscriptions", metrics["subscriptions"]), ("messages", metrics["messages"]),
        ("window fill (msgs, s)", f"{metrics['fill_messages']:,}, {metrics['fill_s']:.1f}"),
        ("turnover (msgs, s)", f"{metrics['turnover_messages']:,}, {metrics['turnover_s']:.1f}"),
        ("registration (s)", f"{metrics['subscribe_s']:.2f}"),
        ("AMP (us/arriving msg)", f"{metrics['amp_us']:.2f}"), ("EMP (us/expiring msg)", f"{metrics['emp_us']:.2f}"),
        ("flush, other (us/msg)", f"{metrics['flush_us']:.2f}, {metrics['other_us']:.2f}"),
        ("throughput (msgs/s)", f"{metrics['throughput_msgs_per_s']:,.0f}"),
        ("re-evaluations", metrics["reevaluations"]), ("avg buffer size", f"{metrics['avg_buffer_size']:.2f}"),
        ("result changes", metrics["result_changes"]), ("rejected records", metrics["rejected_records"]),
        ("peak RSS (MB)", f"{metrics['peak_rss_bytes'] / 2**20:,.0f}"),
    ]
    print_table("simulate", rows, file=sys.stdout)
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
    p.add_argument("--turnover", type=float, default=1.0, metavar="W",
                   help="with --fill-window: windows of messages published after the registration and before "
                        "the measured stream, so that it runs in steady state (default: %(default)s)")
    p.add_argument("--stream", action=argparse.BooleanOptionalAction, default=True,
                   help="generate a tweets workload chunk by chunk as the engine reads it (default), the same "
                        "messages; --no-stream holds the whole stream in memory first")
    o = p.add_argument_group("output")
    o.add_argument("--results-out", metavar="FILE", help="final top-k of every subscription (JSONL or Parquet)")
    o.add_argument("--metrics-out", metavar="FILE", help="run metrics as JSON")
    o.add_argument("--changes-out", metavar="FILE", help="every result change as JSONL")
    o.add_argument("--answers-out", metavar="FILE",
                   help="the answers of the snapshot queries ({\"op\": \"query\"} events) as JSONL")
    o.add_argument("--batch-size", type=int, default=1000, help="messages per engine call (default: %(default)s)")
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
