"""Benchmark fixtures: seeded workloads at three sizes and a steady-state runner.

``pytest bench/`` runs the default size (a few minutes on 2 cores); ``--size medium``
(100k subscriptions, 100k-message window) and ``--size paper`` (1M subscriptions, a 1M-message
window, the paper's scale: needs ~3 GB and a long setup) are opt-in, and so is ``--size steady``
(100k / 100k with two whole windows measured: the steady-state buffer comparison).  Every benchmark times
steady-state chunks of messages after the window is full and the subscriptions are registered;
``extra_info`` carries the per-message metrics (AMP, EMP, re-evaluations per 1000 messages,
buffer size, candidates per affected subscription, index bytes per subscription, RSS).
"""

from __future__ import annotations

import pytest

from skype.experiments.harness import RunSpec, prepare, snapshot, summarize

SIZES = {
    "small": dict(num_subs=20_000, window=20_000, measured=4_000),
    "medium": dict(num_subs=100_000, window=100_000, measured=10_000),
    "paper": dict(num_subs=1_000_000, window=1_000_000, measured=100_000),
    # the steady-state buffer comparison: two whole windows streamed after the fill
    "steady": dict(num_subs=100_000, window=100_000, measured=200_000),
}
# The brute-force reference is measured on fewer messages (it is 100-1000x slower).
REFERENCE_MEASURED = {"small": 300, "medium": 200, "paper": 100, "steady": 200}
CHUNK = 250


def pytest_addoption(parser):
    parser.addoption("--size", choices=sorted(SIZES), default="small", help="benchmark workload size")


@pytest.fixture(scope="session")
def size(request) -> str:
    return request.config.getoption("--size")


def spec_for(size: str, **changes) -> RunSpec:
    base = dict(SIZES[size])
    if changes.get("engine") == "reference":
        base["measured"] = REFERENCE_MEASURED[size]
    base.update(changes)
    return RunSpec(**base)


def run_steady_state(benchmark, spec: RunSpec, chunk: int = CHUNK) -> dict:
    """Time ``spec``'s measured messages chunk by chunk; returns the metrics (also saved in
    the benchmark's extra_info)."""
    prep = prepare(spec)
    chunks = list(prep.chunks(chunk))
    it = iter(chunks)
    before = snapshot(prep.engine)
    benchmark.pedantic(lambda: prep.engine.publish_batch(next(it)), rounds=len(chunks), iterations=1)
    messages = sum(len(c) for c in chunks)
    wall = benchmark.stats.stats.total
    metrics = summarize(prep, before, snapshot(prep.engine), wall, messages)
    metrics.update(size=f"{spec.num_subs} subscriptions, window {spec.window or spec.window_seconds}",
                   chunk_messages=chunk)
    benchmark.extra_info.update({k: (round(v, 3) if isinstance(v, float) else v) for k, v in metrics.items()})
    return metrics
