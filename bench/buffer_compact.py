"""Paired A/B of two checkouts on the steady-state protocol (a benchmark, not a test): compact
buffers (docs/engine.md, "Compact buffers") against the layout before them, or any two trees.

Each round runs ``python -m skype.run simulate --fill-window --timers`` once in tree A, then
once in tree B (A B A B ...: a drifting machine hits both alike), each with its own
``PYTHONPATH``; it prints every run's AMP, EMP, throughput, per-phase seconds per message and
buffer memory, then the median of each and the ratio B/A of the medians.  The deterministic
counters (admissions, result changes) must agree between the trees: a mismatch is reported and
the exit code is 1.

    python bench/buffer_compact.py --a /path/to/main --b /path/to/buf-compact
    python bench/buffer_compact.py --a A --b B --subs 1000000 --window 1000000 --rounds 3 --json ab.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

PHASES = ("enter", "disseminate", "admit", "expire", "reevaluate", "flush")


def run_once(tree: str, args) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "m.json")
        cmd = [sys.executable, "-m", "skype.run", "simulate", "--dataset", args.dataset, "--num-subs", str(args.subs),
               "--num-messages", str(3 * args.window), "--window", str(args.window), "--fill-window", "--timers",
               "--seed", str(args.seed), "--no-progress", "--metrics-out", out]
        subprocess.run(cmd, cwd=tree, env={**os.environ, "PYTHONPATH": tree}, check=True, stdout=subprocess.DEVNULL)
        with open(out) as fh:
            m = json.load(fh)
    n = m["messages"]
    ph = m["phases"]
    e = m["engine_stats"]
    return {
        "amp_us": m["amp_us"], "emp_us": m["emp_us"], "throughput": m["throughput_msgs_per_s"],
        **{f"{p}_us": ph["seconds"][p] / n * 1e6 for p in PHASES if p in ph["seconds"]},
        "buffers_mb": e["memory_bytes"]["buffers"] / 1e6,
        "bytes_per_entry": e["memory_bytes"]["buffers"] / max(1, e["buffered_entries"]),
        "peak_rss_mb": m["peak_rss_bytes"] / 1e6,
        "admits": ph["counts"]["admit"], "result_changes": m["result_changes"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--a", required=True, help="checkout A (its root: skype/ with the built core)")
    p.add_argument("--b", required=True, help="checkout B")
    p.add_argument("--subs", type=int, default=200_000)
    p.add_argument("--window", type=int, default=200_000)
    p.add_argument("--dataset", default="tweets")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", help="write every run and the medians here")
    args = p.parse_args(argv)
    runs: dict[str, list[dict]] = {"a": [], "b": []}
    for r in range(args.rounds):
        for side in ("a", "b"):
            res = run_once(getattr(args, side), args)
            runs[side].append(res)
            print(f"round {r + 1} {side.upper()}: " + ", ".join(f"{k} {v:.4g}" for k, v in res.items()), flush=True)
    med = {side: {k: statistics.median(x[k] for x in rs) for k in rs[0]} for side, rs in runs.items()}
    print(f"{'figure':<18}{'A (median)':>14}{'B (median)':>14}{'B/A':>8}")
    for k in med["a"]:
        a, b = med["a"][k], med["b"][k]
        print(f"{k:<18}{a:>14.4g}{b:>14.4g}{(b / a if a else float('nan')):>8.3f}")
    same = all(x["admits"] == y["admits"] and x["result_changes"] == y["result_changes"]
               for x, y in zip(runs["a"], runs["b"]))
    if not same:
        print("the trees' deterministic counters differ (admissions or result changes)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"args": vars(args), "runs": runs, "medians": med}, fh, indent=1)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
