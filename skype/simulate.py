"""Run one engine over a stream, from its inputs to its outputs: the library form of ``simulate``.

>>> from skype import simulate
>>> settings = simulate.SimulateSettings.from_options({"dataset": "tweets", "num_subs": 50,
...                                                     "num_messages": 300, "window": 100})
>>> run = simulate.run(settings)
>>> run.metrics["messages"], run.metrics["subscriptions"]
(300, 50)

A run's settings come in four groups, each built from one mapping of options by
:meth:`SimulateSettings.from_options` (the option names are the command line's, with ``_`` for
``-``: ``{"num_subs": 50, "window": 100}``; absent options take the defaults below, unknown ones
are ignored, so ``vars(args)`` of a parsed command line is a valid mapping):

- **source**: where the subscriptions and the stream come from (:class:`skype.workload.WorkloadSpec`);
- **engine**: which engine, its structures and its window (:class:`EngineSettings`);
- **sink**: where the results, metrics, result changes and query answers go (:class:`SinkSettings`);
- **control**: how the stream is driven and measured (:class:`ControlSettings`).

Subscriptions are registered before the stream starts; an events workload interleaves subscribe
and unsubscribe with messages.  With ``fill_window`` the paper's protocol runs instead: the
first ``window`` messages (a time window: those within ``window_seconds`` of the first) fill the
window before the subscriptions register (in one bulk ``subscribe_batch``), then ``turnover``
windows of messages are published unmeasured, and only the messages after them are measured
(:func:`split_fill` takes them from the head of the stream, up to its first subscribe or
unsubscribe step).  So a count window of N with ``fill_window`` measures the messages after the
first (1 + W) * N.  The metrics :func:`run_stream` returns are those of ``simulate --metrics-out``
(``docs/engine.md``); AMP, EMP, re-evaluations, throughput and ``phases`` count only the measured
messages, from the engine's cumulative counters (:func:`work_counts`) differenced around them.

The command line (:mod:`skype.cli.simulate`) only parses options into this mapping; the benches,
the tests and the experiments call this module.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from skype import io
from skype.api import EngineBase
from skype.engine_settings import (DEFAULT_WINDOW, ENGINES, REGISTRATIONS, EngineSettings, Options, engine_options,
                                   pick, window_of)
from skype.model import DEFAULT_BOUNDS
from skype.report import peak_rss_bytes, progress_bar, release_free_memory, rss_bytes
from skype.workload import Inputs, WorkloadSpec, load_workload

__all__ = ["DEFAULT_WINDOW", "ENGINES", "REGISTRATIONS", "ControlSettings", "EngineSettings", "SimulateRun",
           "SimulateSettings", "SinkSettings", "engine_options", "kind_counts", "load_inputs", "make_engine",
           "phase_counts", "phase_delta", "run", "run_stream", "split_fill", "window_of", "work_counts",
           "workload_spec"]


def workload_spec(options: Options) -> WorkloadSpec:
    """The source settings of the options.  ``drift_start`` defaults to ``sample_size`` (the
    distribution's cost sample, when the options have one), else 0."""
    start = options.get("drift_start")
    if start is None:
        start = options.get("sample_size") or 0
    sub_terms = options.get("sub_terms")
    derived: dict[str, Any] = {"drift_start": int(start)}
    if sub_terms is not None:
        derived["sub_terms"] = tuple(sub_terms)
    if options.get("bounds") is None:
        derived["bounds"] = DEFAULT_BOUNDS
    return pick(WorkloadSpec, options, **derived)


def load_inputs(options: Options | WorkloadSpec, *, stream: bool = False) -> Inputs:
    """The workload of the options (:func:`skype.workload.load_workload`, which validates every
    record once); ``stream``: a generated tweets stream stays generated chunk by chunk."""
    spec = options if isinstance(options, WorkloadSpec) else workload_spec(options)
    return load_workload(spec, stream=stream)


def _engine_settings_of(options: Options | EngineSettings) -> EngineSettings:
    return options if isinstance(options, EngineSettings) else EngineSettings.from_options(options)


def make_engine(options: Options | EngineSettings, inputs: Inputs) -> EngineBase:
    """The engine of the options over the inputs' space and vocabulary.  A core engine keeps the
    query window only when the inputs use the other kinds or snapshot queries, and builds its
    per-term trees from the start when something will read them."""
    settings = _engine_settings_of(options)
    window = settings.window_spec
    if settings.engine == "reference":
        from skype.reference import ReferenceEngine

        return ReferenceEngine(bounds=inputs.bounds, vocabulary=inputs.vocabulary, **window)
    from skype.engine import Engine

    used = set(inputs.peer_kinds())
    snapshots = bool(used - {"topk with until"})
    term_trees = "eager" if used & {"knn", "terms", "snapshot queries"} else "lazy"
    return Engine(settings.options(snapshots=snapshots, term_trees=term_trees), bounds=inputs.bounds,
                  vocabulary=inputs.vocabulary, **window)


@dataclass(frozen=True)
class SinkSettings:
    """Where a run's outputs go (None: not written)."""

    results_out: str | None = None   # the final top-k of every subscription (JSONL or Parquet)
    metrics_out: str | None = None   # the run metrics (JSON)
    changes_out: str | None = None   # every result change (JSONL)
    answers_out: str | None = None   # the snapshot queries' answers (JSONL)


@dataclass(frozen=True)
class ControlSettings:
    """How the stream is driven and measured."""

    batch_size: int = 1000           # messages per engine call
    fill_window: bool = False        # the paper's protocol (the module docstring)
    turnover: float = 1.0            # with fill_window: windows published unmeasured after registration
    stream: bool = True              # a generated tweets workload stays generated chunk by chunk
    progress: bool | None = False    # a progress bar on stderr (None: when stderr is a terminal)


@dataclass(frozen=True)
class SimulateSettings:
    """Everything that shapes a ``simulate`` run, in four groups."""

    source: WorkloadSpec = field(default_factory=WorkloadSpec)
    engine: EngineSettings = field(default_factory=EngineSettings)
    sink: SinkSettings = field(default_factory=SinkSettings)
    control: ControlSettings = field(default_factory=ControlSettings)

    @classmethod
    def from_options(cls, options: Options) -> SimulateSettings:
        """The four groups from one mapping of options (the module docstring)."""
        return cls(source=workload_spec(options), engine=EngineSettings.from_options(options),
                   sink=pick(SinkSettings, options), control=pick(ControlSettings, options))


@dataclass
class SimulateRun:
    """A finished run: its engine (final state: results, statistics) and its metrics."""

    engine: EngineBase
    metrics: dict[str, Any]


def run(settings: SimulateSettings | Options) -> SimulateRun:
    """Load the source, build the engine, stream it (:func:`run_stream`) and write the sinks."""
    if not isinstance(settings, SimulateSettings):
        settings = SimulateSettings.from_options(settings)
    control, sink = settings.control, settings.sink
    inputs = load_inputs(settings.source, stream=control.stream)
    engine = make_engine(settings.engine, inputs)
    window = settings.engine.window_spec
    metrics = run_stream(engine, inputs, batch_size=control.batch_size, progress=control.progress,
                         changes_out=sink.changes_out, fill_window=window if control.fill_window else None,
                         answers_out=sink.answers_out, turnover=control.turnover,
                         release_subscriptions=control.stream)
    metrics["engine"] = settings.engine.describe()
    metrics.update(window)
    if sink.results_out:
        io.write_objects(sink.results_out, io.kind_result_objects(engine.results_by_kind()))
    if sink.metrics_out:
        Path(sink.metrics_out).parent.mkdir(parents=True, exist_ok=True)
        Path(sink.metrics_out).write_text(json.dumps(metrics, indent=2, default=float) + "\n")
    return SimulateRun(engine, metrics)


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


def work_counts(engine: EngineBase) -> dict[str, float]:
    """The engine's cumulative arrivals, expirations, re-evaluations and microseconds spent on
    arrivals and expiries (the query kinds' window included); two readings differenced give the
    figures of the messages between them."""
    s = engine.stats()
    q = s.get("queries") or {}  # the core's query kinds: their own window, timed apart
    return {"arrivals": s["arrivals"], "expirations": s["expirations"],
            "arrival_us": s["amp_us"] * s["arrivals"] + q.get("amp_us", 0.0) * q.get("arrivals", 0),
            "expiry_us": s["emp_us"] * s["expirations"] + q.get("emp_us", 0.0) * q.get("expirations", 0),
            # the steps' netting: the query core's always, the top-k core's with --timers
            "flush_us": 1e6 * (q.get("flush_s", 0.0) + ((s.get("phases") or {}).get("seconds") or {}).get("flush", 0.0)),
            "reevaluations": s["reevaluations"]}


def part_seconds(engine: EngineBase) -> dict[str, float]:
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
    memory: list[dict[str, Any]] = []
    _memory_stage(memory, "loaded", engine)
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
        _memory_stage(memory, "filled", engine)
    t0 = time.perf_counter()
    engine.subscribe_batch(inputs.subscriptions)
    engine.subscribe_batch(inputs.others)
    t_subscribe = time.perf_counter() - t0
    if release_subscriptions:
        inputs.subscriptions = inputs.subscriptions.slice(0, 0)
    _memory_stage(memory, "registered", engine)
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
        _memory_stage(memory, "turned over", engine)
    before = work_counts(engine)
    parts_before = part_seconds(engine)
    phases_before = phase_counts(engine)
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
                engine.subscribe_batch([payload])
            elif op == "unsub":
                engine.unsubscribe(payload)
            elif op == "query":
                query_fields = {k: v for k, v in payload.items() if k not in ("qid", "kind")}
                tq = time.perf_counter()
                answer = engine.query(payload["kind"], **query_fields)
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
    _memory_stage(memory, "measured", engine)
    stats = engine.stats()
    after = work_counts(engine)
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
        "parts_us": {k: 1e6 * (v - parts_before.get(k, 0.0)) / n if n else 0.0 for k, v in part_seconds(engine).items()},
        "other_us": (1e6 * wall - (after["arrival_us"] - before["arrival_us"]) - (after["expiry_us"] - before["expiry_us"])
                     - (after["flush_us"] - before["flush_us"])) / n if n else 0.0,
        "stream_s": wall,
        "generate_s": generate[0],
        "fill_s": fill_s,
        "subscribe_s": t_subscribe,
        "peak_rss_bytes": max(peak_rss_bytes(), memory[-1]["peak_rss_bytes"]),
        "memory_stages": memory,
        "reevaluations": after["reevaluations"] - before["reevaluations"],
        "avg_buffer_size": stats["avg_buffer_size"],
        "result_changes": changes,
        "snapshot_queries": n_queries,
        "snapshot_query_us": 1e6 * query_s / n_queries if n_queries else 0.0,
        "subscriptions_by_kind": kind_counts(engine),
        "rejected_records": sum(rejected.values()),
        "rejected_by_code": rejected,
        "phases": phase_delta(phases_before, phase_counts(engine)),
        "engine_stats": stats,
    }


def _memory_stage(stages: list[dict[str, Any]], stage: str, engine: EngineBase) -> None:
    """Append the process's RSS now and its peak so far, and the engine's bytes, after ``stage``:
    the peak's growth between two stages says in which one it happened (a registration's
    transients raise the peak without staying resident).  The heap's free pages go back to the OS
    first: what a stage freed (the loader's temporaries, the registration's scratch, the extra
    holder lists of the registration's messages) would otherwise stay resident to the end;
    ``untrimmed_rss_bytes`` is the RSS before that."""
    untrimmed = rss_bytes()
    release_free_memory()
    s = engine.stats()
    engine_bytes = s.get("memory_bytes") or {}
    rss = rss_bytes()       # the kernel's high-water mark can lag the current figure by a few pages
    stages.append({"stage": stage, "rss_bytes": rss, "untrimmed_rss_bytes": untrimmed,
                   "peak_rss_bytes": max(rss, untrimmed, peak_rss_bytes(),
                                         stages[-1]["peak_rss_bytes"] if stages else 0),
                   "engine_bytes": sum(v for v in engine_bytes.values() if isinstance(v, (int, float))),
                   "engine_parts": {**engine_bytes, **(s.get("memory_parts") or {})}})


def _timed(chunks: Iterator[Any], total: list[float]) -> Iterator[Any]:
    """The items of ``chunks``, adding the seconds spent producing them to ``total[0]``."""
    while True:
        t0 = time.perf_counter()
        item = next(chunks, None)
        total[0] += time.perf_counter() - t0
        if item is None:
            return
        yield item


def phase_counts(engine: EngineBase) -> dict[str, Any]:
    """The engine's cumulative instruments (core engines: stats()["phases"]; others: none)."""
    return engine.stats().get("phases") or {}


def phase_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
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


def kind_counts(engine: EngineBase) -> dict[str, int]:
    """Subscriptions per query kind: ``topk`` and each other kind the engine holds."""
    return engine.kind_counts()
