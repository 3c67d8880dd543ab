"""Measurement harness shared by ``bench/`` and ``python -m skype.run experiments``.

A run is described by a :class:`RunSpec`.  :func:`prepare` builds the seeded workload (cached
per process), fills the window with the first ``window`` messages, then registers the
subscriptions into the full window in one ``subscribe_batch`` (the core registers a large batch
in bulk, one replay of the window), and returns a :class:`Prepared` run whose remaining messages
are measured in steady state: the paper's protocol, which assumes registered subscriptions and
starts timing once the window is full (``simulate --fill-window`` is the same protocol).
``fill_s`` and ``subscribe_s`` (the registration time) come with the metrics, and
``bulk_fallbacks`` (bulk-registered buffers whose scan needed the message index).  :func:`measure` drives the whole stream and reports:

* ``amp_us`` / ``emp_us``: mean time per arriving / expiring message (the engine's own clocks);
* ``disseminate_us`` / ``admit_us``: the part of AMP spent in the subscription index alone
  (finding and verifying the subscriptions a message enters) and in the buffer admissions, which
  every index pays alike (the engine's phase clocks, on in every run);
* ``us_per_msg`` and ``throughput_msgs_per_s``: wall time of the measured stream;
* ``reevals_per_1000``: re-evaluations (and threshold refreshes) per 1000 measured messages;
* ``avg_buffer_size``; ``candidates_per_affected`` (verified candidates per subscription whose
  buffer the message entered; 1 is the limit); ``index_bytes_per_sub`` (subscription index and
  table); ``rss_bytes`` (resident set after the run).

Work counters, which do not depend on the machine's load, come with the times:
``entries_visited_per_msg`` (posting entries the subscription index touched per message),
``groups_skipped_per_msg`` (alpha-groups pruned whole), ``reeval_work_per_expiry`` (message-index
steps of re-evaluations and threshold refreshes per expiring message).  ``measure(...,
trace=True)`` also returns the raw counters of every chunk (``trace``), so that a phase of the
stream (for example the paper's first 10% of a window) can be summarised afterwards with
:func:`summarize_trace`.
"""

from __future__ import annotations

import gc
import time
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from typing import Any

import numpy as np

from skype.api import EngineBase
from skype.errors import SkypeError
from skype.data.workloads import Workload, make_workload


@dataclass(frozen=True)
class RunSpec:
    dataset: str = "tweets"
    num_subs: int = 20_000
    window: int | None = 20_000  # count window (messages)
    window_seconds: float | None = None  # or a time window (the generated stream is ~1 msg/s)
    measured: int = 5_000  # messages measured after the window is full
    engine: str = "core"  # core | reference
    index: str = "igpt"
    buffer: str = "cskyband"
    sub_terms: tuple[int, int] = (1, 3)
    k: int = 20
    sub_keywords: str = "message"
    seed: int = 0
    params: tuple[tuple[str, Any], ...] = ()  # extra skype.Engine keyword arguments

    @property
    def label(self) -> str:
        if self.engine == "reference":
            return "reference"
        return f"{self.index.upper()}-{ {'cskyband': 'cSkyband', 'skyband': 'Skyband', 'kmax': 'Kmax', 'exact': 'Exact'}[self.buffer] }"

    def with_(self, **changes) -> RunSpec:
        return replace(self, **changes)

    @property
    def window_messages(self) -> int:
        if self.window is not None:
            return self.window
        assert self.window_seconds is not None, "a RunSpec has a count or a time window"
        return int(self.window_seconds)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["params"] = dict(self.params)
        return d


@lru_cache(maxsize=8)
def workload(dataset: str, num_subs: int, num_messages: int, sub_terms: tuple[int, int], k: int,
             sub_keywords: str, seed: int) -> Workload:
    return make_workload(dataset, num_subs=num_subs, num_messages=num_messages, seed=seed,
                         sub_terms=sub_terms, k=k, sub_keywords=sub_keywords)


def workload_for(spec: RunSpec) -> Workload:
    # a time window of T seconds holds about T messages (one message per second on average)
    n = spec.window_messages + spec.measured
    if spec.window_seconds is not None:
        n = int(spec.window_seconds * 1.1) + spec.measured
    return workload(spec.dataset, spec.num_subs, n, tuple(spec.sub_terms), spec.k, spec.sub_keywords, spec.seed)


def make_engine(spec: RunSpec, w: Workload) -> EngineBase:
    window = {"window": spec.window} if spec.window is not None else {"window_seconds": spec.window_seconds}
    if spec.engine == "reference":
        from skype.reference import ReferenceEngine

        return ReferenceEngine(vocabulary=w.vocabulary, bounds=w.bounds, **window)
    from skype.engine import Engine

    # topk experiments: no query window; the phase clocks on (two clock reads a phase, well under
    # 1% of a message), so that the dissemination shows apart from the admissions
    params = {"snapshots": False, "timers": True, **dict(spec.params), "index": spec.index, "buffer": spec.buffer}
    return Engine(params, vocabulary=w.vocabulary, bounds=w.bounds, **window)


@dataclass
class Prepared:
    spec: RunSpec
    engine: EngineBase
    workload: Workload
    start: int  # first measured message
    setup_s: dict = field(default_factory=dict)

    def turn_over(self, messages: int, chunk: int = 20_000) -> int:
        """Publish ``messages`` messages after the fill, unmeasured (the paper's turnover: the
        buffers reach their steady state), ``chunk`` at a time; the measured messages then start
        after them.  Returns the new ``start``."""
        msgs, end = self.workload.messages, self.start + messages
        for a in range(self.start, end, chunk):
            self.engine.publish_batch(msgs.slice(a, min(a + chunk, end)))
        self.start = end
        return end

    def chunks(self, size: int):
        msgs = self.workload.messages
        for a in range(self.start, len(msgs), size):
            yield msgs.slice(a, a + size)


def prepare(spec: RunSpec) -> Prepared:
    w = workload_for(spec)
    engine = make_engine(spec, w)
    msgs = w.messages
    if spec.window is not None:
        fill = spec.window
    else:
        fill = int(np.searchsorted(msgs.t, msgs.t[0] + spec.window_seconds, side="right"))
    t0 = time.perf_counter()
    engine.publish_batch(msgs.slice(0, fill))
    t1 = time.perf_counter()
    engine.subscribe_batch(w.subscriptions)
    t2 = time.perf_counter()
    return Prepared(spec, engine, w, fill, {"fill_s": t1 - t0, "subscribe_s": t2 - t1})


def snapshot(engine: EngineBase) -> dict:
    s = engine.stats()
    d = s.get("dissemination", {})
    seconds = (s.get("phases") or {}).get("seconds") or {}
    return {
        "disseminate_s": seconds.get("disseminate") or 0.0, "admit_s": seconds.get("admit") or 0.0,
        "arrivals": s["arrivals"], "expirations": s["expirations"],
        "arrival_us_total": s["amp_us"] * s["arrivals"], "expiry_us_total": s["emp_us"] * s["expirations"],
        "reevaluations": s["reevaluations"] + s.get("threshold_refreshes", 0),
        "candidates": d.get("candidates", 0), "admitted": d.get("admitted", 0),
        "entries_visited": d.get("entries_visited", 0), "groups_skipped": d.get("groups_skipped", 0),
        "reevaluation_work": s.get("reevaluation_work", 0),
        "avg_buffer_size": s["avg_buffer_size"],
    }


def publish_paired(engines: dict[str, EngineBase], messages: Any, first: int, measured: int,
                   chunk: int) -> dict[str, float]:
    """Publish ``messages`` [first, first + measured) to every engine, ``chunk`` messages at a
    time, each engine leading in turn (the order rotates chunk by chunk, so a machine whose speed
    drifts slows them alike); every engine must report the first one's result changes, chunk by
    chunk (SkypeError otherwise).  Returns each engine's CPU seconds (``time.process_time``)."""
    names = list(engines)
    cpu = dict.fromkeys(names, 0.0)
    for c, a in enumerate(range(first, first + measured, chunk)):
        part = messages.slice(a, min(a + chunk, first + measured))
        rows = {}
        for name in names[c % len(names):] + names[:c % len(names)]:
            t = time.process_time()
            log = engines[name].publish_batch(part)
            cpu[name] += time.process_time() - t
            rows[name] = sorted(zip(log.at.tolist(), log.sub.tolist(), log.msg.tolist(), log.entered.tolist()))
        for name in names[1:]:
            if rows[name] != rows[names[0]]:
                raise SkypeError(f"chunk {c}: {name}'s result changes differ from {names[0]}'s")
    return cpu


def _delta(before: dict, after: dict, key: str) -> float:
    return after.get(key, 0) - before.get(key, 0)


def summarize(prep: Prepared, before: dict, after: dict, wall_s: float, messages: int) -> dict:
    from skype.report import peak_rss_bytes

    stats = prep.engine.stats()
    arrivals = after["arrivals"] - before["arrivals"]
    expirations = after["expirations"] - before["expirations"]
    admitted = after["admitted"] - before["admitted"]
    out = {
        "label": prep.spec.label,
        "messages": messages,
        "amp_us": (after["arrival_us_total"] - before["arrival_us_total"]) / arrivals if arrivals else 0.0,
        "emp_us": (after["expiry_us_total"] - before["expiry_us_total"]) / expirations if expirations else 0.0,
        "disseminate_us": 1e6 * _delta(before, after, "disseminate_s") / arrivals if arrivals else 0.0,
        "admit_us": 1e6 * _delta(before, after, "admit_s") / arrivals if arrivals else 0.0,
        "us_per_msg": 1e6 * wall_s / messages if messages else 0.0,
        "throughput_msgs_per_s": messages / wall_s if wall_s > 0 else 0.0,
        "reevals_per_1000": 1000.0 * (after["reevaluations"] - before["reevaluations"]) / messages if messages else 0.0,
        "avg_buffer_size": stats["avg_buffer_size"],
        "candidates_per_affected": (after["candidates"] - before["candidates"]) / admitted if admitted else 0.0,
        "affected_per_msg": admitted / messages if messages else 0.0,
        "index_bytes_per_sub": stats.get("index_bytes_per_subscription", 0.0),
        "entries_visited_per_msg": _delta(before, after, "entries_visited") / messages if messages else 0.0,
        "groups_skipped_per_msg": _delta(before, after, "groups_skipped") / messages if messages else 0.0,
        "reeval_work_per_expiry": _delta(before, after, "reevaluation_work") / expirations if expirations else 0.0,
        "bulk_fallbacks": stats.get("bulk_fallbacks", 0),
        "rss_bytes": current_rss_bytes(),
        "peak_rss_bytes": peak_rss_bytes(),
        **prep.setup_s,
    }
    return out


def current_rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as fh:
            import os

            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


TRACE_KEYS = ("arrivals", "expirations", "arrival_us_total", "expiry_us_total", "reevaluations",
              "entries_visited", "reevaluation_work")


def measure(spec: RunSpec, chunk: int = 1000, progress=None, trace: bool = False, on_start=None) -> dict:
    """Prepare and run ``spec``; returns the metrics (see the module docstring).

    ``on_start(n)`` is called once the run is prepared, with the number of messages it will
    measure (for a time window, those after the first ``window_seconds`` of the stream);
    ``progress(n)`` after every chunk of ``n`` messages.  With ``trace``, the result
    also holds ``trace``: one row per chunk with its message count, wall seconds, the deltas of
    the counters in ``TRACE_KEYS`` and the average buffer size at the chunk's end.
    """
    gc.collect()
    t_workload = time.perf_counter()
    workload_for(spec)
    workload_s = time.perf_counter() - t_workload
    prep = prepare(spec)
    prep.setup_s["workload_s"] = workload_s
    if on_start is not None:
        on_start(len(prep.workload.messages) - prep.start)
    before = snapshot(prep.engine)
    rows = []
    t0 = time.perf_counter()
    n = 0
    last = before
    for batch in prep.chunks(chunk):
        t_chunk = time.perf_counter()
        prep.engine.publish_batch(batch)
        n += len(batch)
        if trace:
            wall_chunk = time.perf_counter() - t_chunk
            now = snapshot(prep.engine)
            row = {key: now[key] - last[key] for key in TRACE_KEYS}
            row.update(messages=len(batch), wall_s=wall_chunk, avg_buffer_size=now["avg_buffer_size"])
            rows.append(row)
            last = now
        if progress is not None:
            progress(len(batch))
    wall = time.perf_counter() - t0
    result = summarize(prep, before, snapshot(prep.engine), wall, n)
    result["spec"] = spec.as_dict()
    if trace:
        result["trace"] = rows
    return result


def summarize_trace(rows: list[dict], first: int = 0, last: int | None = None) -> dict:
    """AMP, EMP, time per message and re-evaluations per 1000 messages over the trace rows
    ``first:last`` (as returned by ``measure(..., trace=True)``)."""
    part = rows[first:last]
    total = {key: sum(r[key] for r in part) for key in (*TRACE_KEYS, "messages", "wall_s")}
    msgs = total["messages"]
    return {
        "messages": msgs,
        "amp_us": total["arrival_us_total"] / total["arrivals"] if total["arrivals"] else 0.0,
        "emp_us": total["expiry_us_total"] / total["expirations"] if total["expirations"] else 0.0,
        "us_per_msg": 1e6 * total["wall_s"] / msgs if msgs else 0.0,
        "reevals_per_1000": 1000.0 * total["reevaluations"] / msgs if msgs else 0.0,
        "reeval_work_per_expiry": total["reevaluation_work"] / total["expirations"] if total["expirations"] else 0.0,
        "avg_buffer_size": part[-1]["avg_buffer_size"] if part else 0.0,
    }
