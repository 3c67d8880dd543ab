"""What the rebalancer's statistics cost when they come from the partitions' reports, against the
driver's replay of the staged stream (issue 25, deliverable 2; :mod:`skype.dskype.loadstats`).

The streaming job's code is driven batch by batch without a JVM, as the tests drive it
(``tests/spark_fixtures.LocalPipeline``), with the partitions reporting (``rebalance_stats =
"reports"``).  After every batch the same metrics rows go to two rebalancers: the one the
pipeline follows (statistics from the reports) and a second one replaying the staged stream into
its own directory (its versions are not used), in alternating order.  Per batch:

* ``report_bytes``: the reports' size (base64) summed over the partitions, and partition 0's
  (it carries the message side);
* ``report_s``: the partitions' seconds spent building their reports (summed), against their
  engine seconds (``engine_s``, which includes them);
* ``driver_reports_s`` / ``driver_replay_s``: the rebalancer's ``after_batch`` (advance, fold,
  decide, write) with each source, and the moves each decided (``moves``, ``replay_moves``; the
  two differ only through the messages per partition, module docstring of ``loadstats``).

Seconds are indicative (a shared machine); bytes are deterministic for a seed.  Usage::

    nice python bench/spark_loadstats.py --num-subs 20000 --num-messages 10000 --partitions 4 \\
        --batch-size 1000 --window 2000 [--method agrid] [--policy tornado] [--json out.jsonl]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


def run(a) -> dict:
    import skype

    sys.path.insert(0, str(Path(skype.__file__).resolve().parents[1] / "tests"))
    from spark_fixtures import LocalPipeline

    from skype.dskype.plan import RunSettings
    from skype.simulate import load_inputs
    from skype.dskype.rebalancing import Rebalancer, attach, policy_of
    from skype.run import build_parser
    from skype.spark.hosts import InProcessHosts

    args = build_parser().parse_args(["distributed", "--dataset", a.dataset, "--num-subs", str(a.num_subs),
                                      "--num-messages", str(a.num_messages), "--window", str(a.window),
                                      "--drift", "hotspot", "--drift-start", "0", "--seed", str(a.seed),
                                      "--method", a.method, "--partitions", str(a.partitions),
                                      "--batch-size", str(a.batch_size), "--rebalance", a.policy])
    inputs = load_inputs(vars(args))
    settings = RunSettings.from_options(vars(args), inputs.bounds)
    settings.distribution.rebalance_stats = "reports"
    InProcessHosts.clear()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        pipe = LocalPipeline(Path(tmp) / "run", settings, inputs)
        reports = attach(pipe.plan, a.policy, inputs)[0]
        replay = Rebalancer(Path(tmp) / "replay", pipe.plan.pipelines[0].distribution,
                            policy_of(a.policy, a.method), inputs, 0, source="replay")
        b = 0
        while not pipe.done():
            pipe.step()
            stages = pipe.metrics[-1]
            spare = copy.deepcopy(stages)
            timed = {}
            for name in (("reports", "replay") if b % 2 == 0 else ("replay", "reports")):
                t0 = time.perf_counter()
                if name == "reports":
                    decision = reports.after_batch(b, stages)
                else:
                    replayed = replay.after_batch(b, spare)
                timed[name] = time.perf_counter() - t0
            parts = sorted((m for m in stages if m["stage"] == "partition"), key=lambda m: m["partition"])
            rows.append({"batch": b, "report_bytes": sum(m["load_stats_bytes"] for m in parts),
                         "report_bytes_p0": parts[0]["load_stats_bytes"],
                         "report_s": sum(m["load_stats_s"] for m in parts),
                         "engine_s": sum(m["engine_s"] for m in parts),
                         "commands": sum(m["due_commands"] for m in parts),
                         "driver_reports_s": timed["reports"], "driver_replay_s": timed["replay"],
                         "moved": decision.get("version") is not None,
                         "replay_moved": replayed.get("version") is not None})
            b += 1
    summary = {key: statistics.median(r[key] for r in rows)
               for key in ("report_bytes", "report_bytes_p0", "report_s", "engine_s", "driver_reports_s",
                           "driver_replay_s")}
    return {"method": a.method, "policy": a.policy, "partitions": a.partitions, "batches": len(rows),
            "moves": sum(r["moved"] for r in rows), "replay_moves": sum(r["replay_moved"] for r in rows), "median": summary, "batch_0": rows[0], "rows": rows}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="tweets")
    p.add_argument("--num-subs", type=int, default=20_000)
    p.add_argument("--num-messages", type=int, default=10_000)
    p.add_argument("--window", type=int, default=2_000)
    p.add_argument("--batch-size", type=int, default=1_000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--method", default="agrid")
    p.add_argument("--policy", default="tornado")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    out = run(a)
    print(json.dumps({k: v for k, v in out.items() if k != "rows"}, indent=2, default=float))
    if a.json:
        with open(a.json, "a") as fh:
            fh.write(json.dumps(out, default=float) + "\n")


if __name__ == "__main__":
    main()
