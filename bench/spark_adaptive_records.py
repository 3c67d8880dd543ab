"""What an adaptive pipeline's partitions keep and receive on Spark, counted on the job's own code.

The streaming job's code (routing, both stateful processors, the durable state) is driven batch by
batch without a JVM, as the tests drive it (``tests/spark_fixtures.LocalPipeline``; only Spark's
shuffles are replaced).  Every unit is forced to another owner twice (versions written before
batches 1 and 2, :func:`spark_fixtures.rotate_owners`), so hand-overs are counted too.  After
every batch, per partition:

* ``hosted``: the subscriptions in its engine;
* ``kept``: the subscription records it keeps in memory: its hosted set plus the records of its
  pending commands, plus, with a ledger (the code before issue 25's deliverable 2), the ledger;
* ``logged``: the subscribe records in its durable log (deltas, snapshot, hand-over entries);
* ``command rows``: the command rows routed to all partitions over the run, per command of the
  stream.

Run it against another checkout (the base) with that checkout first on ``PYTHONPATH``: the bench
takes ``LocalPipeline`` from the ``tests/`` next to the ``skype`` package it imports.  Counters
only (no timing): the same figures on every machine for a seed.  Usage::

    nice python bench/spark_adaptive_records.py --num-subs 20000 --num-messages 4000 --partitions 4,16
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np


def _logged_subscribes(entry: bytes) -> int:
    from skype.dskype import codec
    from skype.dskype.codec import OP_SUB

    cols = codec.unpack(entry)
    if "switch" in cols:  # a hand-over's entry: the records and pending commands received
        return len(cols["rec_ids"]) + int((cols["pen_op"] == OP_SUB).sum())
    return int((cols["op"] == OP_SUB).sum()) if "op" in cols else 0


def _kept(core) -> int:
    """Subscription records a partition keeps in memory (hosted, pending, a ledger if any)."""
    from skype.dskype.codec import OP_SUB

    ledger = getattr(core.handover, "ledger", None)
    pending = int((core.pending.op == OP_SUB).sum())
    return (len(ledger) if ledger is not None else len(core.hosted)) + pending


def run(method: str, partitions: int, a) -> dict:
    import skype

    sys.path.insert(0, str(Path(skype.__file__).resolve().parents[1] / "tests"))
    from spark_fixtures import LocalPipeline, rotate_owners

    from skype.dskype.plan import RunSettings
    from skype.simulate import load_inputs
    from skype.dskype.durable import Meta
    from skype.dskype.rebalancing import attach, rebalance_dir
    from skype.run import build_parser
    from skype.spark.hosts import InProcessHosts
    from skype.dskype.durable import join_pieces

    args = build_parser().parse_args(["distributed", "--dataset", a.dataset, "--num-subs", str(a.num_subs),
                                      "--num-messages", str(a.num_messages), "--window", str(a.window),
                                      "--drift", "hotspot", "--drift-start", "0", "--seed", str(a.seed),
                                      "--method", method, "--partitions", str(partitions),
                                      "--batch-size", str(a.batch_size)])
    inputs = load_inputs(vars(args))
    InProcessHosts.clear()
    with tempfile.TemporaryDirectory() as tmp:
        pipe = LocalPipeline(Path(tmp) / "run", RunSettings.from_options(vars(args), inputs.bounds), inputs)
        attach(pipe.plan, "never", inputs)
        directory = rebalance_dir(pipe.plan.run_dir, method)
        keys = sorted(k for pipe_ in pipe.plan.pipelines for k in pipe_.partition_keys)
        peak = {"hosted": 0, "kept": 0, "logged": 0}
        final: dict = {}
        live = 0
        while not pipe.done():
            if pipe.batch in (1, 2):
                rotate_owners(directory, pipe.batch, pipe.position, pipe.batch)
            pipe.step()
            objects = {k: entry[2] for (stage, k), entry in InProcessHosts._registry.objects.items()
                       if stage == "partition"}
            hosted = [len(objects[k].hosted) for k in keys]
            kept = [_kept(objects[k]) for k in keys]
            logged = []
            for k in keys:
                meta = Meta.from_blob(pipe.partitions.peekValueState("meta", k)[0])
                log = {int(i[0]): bytes(v[0]) for i, v in pipe.partitions.peekMapState("log", k).items()}
                logged.append(sum(_logged_subscribes(e) for e in join_pieces(meta.log_ids, log)))
            live = sum(hosted)
            final = {"hosted": hosted, "kept": kept, "logged": logged}
            for name, values in final.items():
                peak[name] = max(peak[name], max(values))
        parts = [m for ms in pipe.metrics for m in ms if m["stage"] == "partition"]
        command_rows = sum(m["commands"] for m in parts)
        commands = pipe.commands.num_rows if pipe.commands is not None else 0
        bound = 1.5 * live / partitions  # replication 1: one owner per subscription
        return {"method": method, "partitions": partitions, "subscriptions_live_at_end": live,
                "commands": commands, "batches": pipe.batch, "command_rows_per_command": round(command_rows / commands, 3),
                "handed_over": sum(m.get("handover_in", 0) for m in parts),
                "hosted_max_end": max(final["hosted"]), "kept_max_end": max(final["kept"]),
                "logged_max_end": max(final["logged"]), "hosted_peak": peak["hosted"], "kept_peak": peak["kept"],
                "logged_peak": peak["logged"], "bound_1.5_S_over_P": round(bound, 1),
                "meets_kept": bool(max(final["kept"]) <= bound)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-subs", type=int, default=20_000)
    p.add_argument("--num-messages", type=int, default=4_000)
    p.add_argument("--window", type=int, default=2_000)
    p.add_argument("--batch-size", type=int, default=1_000)
    p.add_argument("--partitions", default="4,16")
    p.add_argument("--dataset", default="tweets")
    p.add_argument("--methods", default="agrid")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also append the rows to this JSON-lines file")
    a = p.parse_args(argv)
    for method in a.methods.split(","):
        for parts in (int(x) for x in a.partitions.split(",")):
            row = run(method, parts, a)
            print(json.dumps(row), flush=True)
            if a.json:
                with open(a.json, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    raise SystemExit(main())
