"""The window store's bytes by component (issue 23, deliverable 7), after the paper's protocol:
fill a count window of N tweets, register N subscriptions, publish two more windows.

    PYTHONPATH=. python bench/window_memory.py --size 200000 [--seed 0]

Prints ``Engine.window_memory_parts()`` (the window store's) in MB and in bytes per window message, the engine's
``stats()["memory_bytes"]``, and the process's resident set after each step next to the engine's
own bytes (what the process holds outside the engine).  Deterministic for a seed (the sizes do
not depend on timing; the RSS to a few MB).
"""

from __future__ import annotations

import argparse

from skype.engine import Engine
from skype.workload import WorkloadSpec, load_workload


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS")) / 1024


def step(name: str, engine=None) -> None:
    own = sum(engine.stats()["memory_bytes"].values()) / 2**20 if engine is not None else 0.0
    print(f"{name:<28} RSS {rss_mb():7.0f} MB   engine {own:7.0f} MB")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=200_000, help="subscriptions and window (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    n = args.size
    step("imports")
    inputs = load_workload(WorkloadSpec(dataset="tweets", num_subs=n, num_messages=3 * n, seed=args.seed), stream=True)
    step("workload (streamed)")
    engine = Engine(bounds=inputs.bounds, vocabulary=inputs.vocabulary, window=n)
    messages = inputs.steps[0][1]
    for batch in messages.slice(0, n).batches(1000):
        engine.publish_batch(batch)
    step("window filled", engine)
    engine.subscribe_batch(inputs.subscriptions)
    step("registered", engine)
    for turn in (1, 2):
        for batch in messages.slice(turn * n, (turn + 1) * n).batches(1000):
            engine.publish_batch(batch)
        step(f"turnover {turn}", engine)
    parts = engine.window_memory_parts()
    print("window (MB):       ", {k: round(v / 2**20, 1) for k, v in parts.items()})
    print("window (B/message):", {k: round(v / n, 1) for k, v in parts.items()})
    print("engine (MB):       ", {k: round(v / 2**20, 1) for k, v in engine.stats()["memory_bytes"].items()})


if __name__ == "__main__":
    main()
