"""The Spark driver of ``serve --engine spark``: ``python -m skype.spark.live_driver RUN_DIR``.

Started (and started again when it dies) by the service (:mod:`skype.service.spark_backend`).  It runs
DSkype (:func:`skype.spark.job.run`) over the service's stream directories ``RUN_DIR/in/messages``
and ``RUN_DIR/in/commands`` as an open stream, one micro-batch every ``trigger_ms``, until it is
stopped; events go to ``RUN_DIR/events/<method>/``, the Spark checkpoint to ``RUN_DIR/spark``.
Its settings are ``RUN_DIR/live.json``, written by the service.  The partitions' engines keep the
query window (``snapshots``): the service stages snapshot queries as commands of the stream.

A new run plans its distribution from what the directories hold when it starts: the
subscriptions staged so far and up to ``sample_size`` messages (with the vocabulary of
``live.json``); a run directory that has a plan (``run.json``) resumes with it, from the
checkpoint, so a killed driver continues exactly where its last committed batch ended.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

SAMPLE = 10_000
STARTED = time.time()  # the process's start (this module is its main): phases count from it


def phase(name: str, **more) -> None:
    """One line of the driver's start-up timeline in ``driver.log`` (wall-clock ``at``, seconds
    since the process started): what a restart spends before its first batch
    (``bench/service_spark_restart.py`` reads them)."""
    print("skype live_driver " + json.dumps({"phase": name, "at": time.time(), "s": time.time() - STARTED, **more}),
          file=sys.stderr, flush=True)


def planning_inputs(run_dir: Path, cfg: dict, sample: bool = True):
    """The workload the plan is made from: the staged subscriptions (the last record of each id
    still subscribed) and the first staged messages.  ``sample`` false (a resumed run, whose plan
    is in ``run.json``): none of them, the vocabulary and bounds only (reading every staged
    subscription again would only delay the restart)."""
    import pyarrow as pa

    from skype.model import Bounds, MessageBatch, SubscriptionBatch, TermMatrix
    from skype.text import Vocabulary
    from skype.workload import Inputs
    import pyarrow.parquet as pq
    import numpy as np

    def table(directory: Path, limit: int | None = None):
        parts, count = [], 0
        for path in sorted(directory.glob("part-*.parquet")):
            parts.append(pq.read_table(path))
            count += parts[-1].num_rows
            if limit is not None and count >= limit:
                break
        return pa.concat_tables(parts, promote_options="default") if parts else None

    def terms(tab) -> TermMatrix:
        ids = tab.column("term_ids").combine_chunks()
        weights = tab.column("weights").combine_chunks()
        return TermMatrix(np.asarray(ids.offsets, np.int64), np.asarray(ids.values, np.int64),
                          np.asarray(weights.values, np.float64))

    commands = table(run_dir / "in" / "commands") if sample else None
    live: dict[int, int] = {}
    if commands is not None:
        for row, (op, sid) in enumerate(zip(commands.column("op").to_pylist(), commands.column("id").to_pylist())):
            if op == "sub":
                live[int(sid)] = row
            elif op == "unsub":  # a query's id is its ordinal, not a subscription
                live.pop(int(sid), None)
    if live and commands is not None:
        subs_table = commands.take(sorted(live.values()))
        c = {name: subs_table.column(name).to_numpy() for name in ("id", "x", "y", "k", "alpha")}
        subs = SubscriptionBatch(c["id"], c["x"], c["y"], c["k"], c["alpha"], terms(subs_table))
    else:
        from skype.partitioning.registry import empty_subscriptions

        subs = empty_subscriptions()
    steps = []
    messages = table(run_dir / "in" / "messages", SAMPLE) if sample else None
    if messages is not None:
        messages = messages.slice(0, SAMPLE)
        m = {name: messages.column(name).to_numpy() for name in ("id", "x", "y", "t")}
        steps.append(("msgs", MessageBatch(m["id"], m["x"], m["y"], m["t"], terms(messages))))
    return Inputs(Vocabulary.from_dict(cfg["vocabulary"]), subs, steps, Bounds(*cfg["bounds"]),
                  "the live service's stream")


def engine_options(run_dir: Path) -> dict:
    """The partitions' engines keep the query window (the service stages snapshot queries:
    :mod:`skype.service.spark_queries`); a run planned before that resumes with its own options."""
    meta = run_dir / "run.json"
    if meta.exists():
        return dict(json.loads(meta.read_text())["settings"].get("engine_options", {}))
    return {"snapshots": True}


def run_driver(run_dir: str | Path) -> dict:
    """Run the live stream of ``run_dir`` until stopped (SIGTERM) or killed; its metrics."""
    from skype.dskype.plan import RunSettings
    from skype.model import Bounds
    from skype.spark import runtime
    from skype.spark.job import run

    phase("imported")
    run_dir = Path(run_dir).resolve()
    cfg = json.loads((run_dir / "live.json").read_text())
    options = {"method": cfg["method"], "partitions": cfg["partitions"], "window": cfg["window"],
               "messages_dir": str(run_dir / "in" / "messages"), "commands_dir": str(run_dir / "in" / "commands"),
               "trigger_seconds": cfg["trigger_ms"] / 1000.0, "batch_size": cfg["batch_size"],
               "sample_size": SAMPLE}
    settings = RunSettings.from_options(options, Bounds(*cfg["bounds"]))
    settings.distribution.engine_options.update(engine_options(run_dir))
    resumed = (run_dir / "run.json").exists()
    inputs = planning_inputs(run_dir, cfg, sample=not resumed)
    phase("inputs", resumed=resumed)
    spark = runtime.make_session(cfg["master"], driver_memory=cfg.get("driver_memory"))
    phase("session")
    return run(settings, inputs, spark, run_dir=run_dir)


def main(argv: list[str] | None = None) -> int:
    import signal

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m skype.spark.live_driver RUN_DIR", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    run_driver(args[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
