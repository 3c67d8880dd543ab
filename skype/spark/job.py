"""The programmatic entry of DSkype on Spark: :func:`run` plans a run, streams it, returns metrics.

``run(settings, workload, spark=None)`` is what ``python -m skype.run distributed`` and
``spark-submit skype/cli/spark_submit.py`` call once they have parsed their options.  ``workload`` is
either a loaded :class:`skype.workload.Inputs` (the driver stages it as stream files, or, with
``settings.source.messages_dir``, reads it from existing stream directories) or :class:`RawStreams`: the
executors read and tokenize raw files, stream directories or Kafka topics with a shipped
vocabulary, and the driver loads a sample only.  Invariant: every check that can refuse a run
(E023, E048, E063, E135, E136) runs before a Spark session starts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from skype.errors import InputError

if TYPE_CHECKING:
    from skype.dskype.plan import RunSettings
    from skype.workload import Inputs


@dataclass(frozen=True)
class RawStreams:
    """A workload the executors ingest with the ``vocabulary`` file (``python -m skype.run
    vocabulary``): raw ``messages`` and ``subscriptions`` files, or, without them, the run
    settings' raw stream directories (``messages_dir``/``commands_dir``) or Kafka topics."""

    vocabulary: str
    messages: str | None = None
    subscriptions: str | None = None

    def check(self, settings: RunSettings) -> None:
        if settings.source.kind == "kafka":
            return
        files, dirs = bool(self.messages), bool(settings.source.messages_dir)
        if files == dirs or (files and not self.subscriptions) or (dirs and self.subscriptions):
            raise InputError("E023", what="--vocabulary", expected="given with --messages and --subscriptions files, "
                                                                   "or with --messages-dir and --commands-dir",
                             value=self.vocabulary)
        if settings.source.ingest_split < 1:
            raise InputError("E023", what="--ingest-split", expected="an integer >= 1", value=settings.source.ingest_split)


def default_run_directory() -> Path:
    """``out/dskype-<time>``, absolute."""
    return Path(f"out/dskype-{time.strftime('%Y%m%d-%H%M%S')}").resolve()


def per_method(path: str, method: str, several: bool) -> str:
    """``r.jsonl`` -> ``r.<method>.jsonl`` when a run has several methods."""
    if not several:
        return path
    p = Path(path)
    return str(p.with_name(f"{p.stem}.{method}{p.suffix}"))


def run(settings: RunSettings, workload: Inputs | RawStreams, spark: Any = None, *,
        run_dir: str | Path | None = None, results_out: str | None = None, master: str = "local[*]",
        driver_memory: str | None = None, conf: dict[str, str] | None = None, answers_out: str | None = None) -> dict:
    """Plan, stream and measure one run; returns its metrics (``docs/spark.md``): a method's
    metrics dict, or ``{"runs": [one per method]}`` when ``settings.distribution.methods`` has several.

    ``spark``: an existing session (the Spark app, tests); else one is made from ``master``,
    ``driver_memory`` (None: a quarter of the machine's memory in local mode, between 1g and 8g) and
    ``conf`` and stopped at the end.  ``run_dir`` (default
    ``out/dskype-<time>``) holds the checkpoint, stream files, events and results; the same
    directory resumes a stopped run.  ``results_out``: write every subscription's final result
    there (the records of ``simulate --results-out``; one file per method when there are
    several).  ``answers_out``: the answers of the snapshot queries (``{"op": "query"}``), the
    lines of ``simulate --answers-out`` (one file per method when there are several)."""
    from skype import io
    from skype.dskype import kinds, rebalancing, snapshots
    from skype.dskype import results as run_results
    from skype.dskype.plan import plan_run
    from skype.spark import runtime

    if (settings.source.messages_dir is None) != (settings.source.commands_dir is None):
        raise InputError("E023", what="--messages-dir and --commands-dir", expected="given together",
                         value=settings.source.messages_dir or settings.source.commands_dir)
    if settings.sink.kind == "console" and results_out:
        raise InputError("E023", what="--results-out", expected="used with --sink files (results fold the events)",
                         value=results_out)
    raw = isinstance(workload, RawStreams)
    if answers_out and (raw or settings.source.messages_dir or settings.source.kind != "files" or settings.sink.kind == "console"):
        raise InputError("E136", what="--answers-out",
                         detail="no --vocabulary, --messages-dir or Kafka, and not --sink console")
    # adaptive methods: table versions travel in the stream-files source's offsets; statistics
    # come from a replay of a staged stream or from the partitions' reports (skype.dskype.loadstats)
    rebalancing.check_rebalance(settings.distribution.rebalance, settings.distribution.methods,
                                staged=not (raw or settings.source.messages_dir or settings.source.kind != "files"),
                                versioned=settings.source.kind == "files", stats=settings.distribution.rebalance_stats)
    # the executors see a relative run directory from their own working directory: resolve it here
    run_path = Path(run_dir).resolve() if run_dir is not None else default_run_directory()
    t0 = time.perf_counter()
    kind_of: dict[int, str] = {}
    vocabulary = None
    asked: list[dict] = []  # snapshot queries by ordinal (skype.dskype.snapshots)
    own = spark is None
    if isinstance(workload, RawStreams):
        workload.check(settings)
        if settings.source.kind == "kafka":
            # the distribution from a sample of the topics: the session is needed to plan
            from skype.spark.ingest import plan_kafka_run

            if own:
                spark = runtime.make_session(master, driver_memory=driver_memory, extra=dict(conf or {}))
            plan = plan_kafka_run(spark, run_path, settings, vocabulary=workload.vocabulary)
            description = f"topics {settings.source.messages_topic}, {settings.source.commands_topic} (executor ingestion)"
        else:
            # executors read and tokenize the raw streams: the driver loads samples only
            from skype.spark.ingest import plan_ingest_run

            plan = plan_ingest_run(run_path, settings, vocabulary=workload.vocabulary,
                                   messages_file=workload.messages, subscriptions_file=workload.subscriptions)
            # adaptive pipelines: statistics from the partitions' reports (no workload to replay)
            plan.rebalancers = rebalancing.attach(plan, settings.distribution.rebalance, None, settings.distribution.rebalance_load)
            description = f"{workload.messages or settings.source.messages_dir} (executor ingestion)"
    else:
        inputs = workload
        # range/knn/terms and until: skype.dskype.kinds (what each method serves; refusals E048)
        kinds.refuse(inputs, settings.distribution.methods, open_end=bool(settings.source.kind != "files" or settings.source.messages_dir
                                                             or settings.control.stop_after_batches or settings.control.timeout_s))
        kind_of, vocabulary = kinds.kind_map(inputs), inputs.vocabulary
        if answers_out:
            asked = snapshots.asked_queries(inputs)
        if settings.distribution.engine == "core":
            settings.distribution.engine_options.update(kinds.engine_options(inputs))
        # before planning: planning stages the stream and records the settings (run.json)
        snapshots.refuse_summaries(inputs, runtime.summarised_methods(settings))
        plan = plan_run(run_path, settings, inputs)
        plan.rebalancers = rebalancing.attach(plan, settings.distribution.rebalance, inputs, settings.distribution.rebalance_load)
        description = inputs.description
    t_plan = time.perf_counter() - t0
    if spark is None:
        spark = runtime.make_session(master, driver_memory=driver_memory, extra=dict(conf or {}))
    several = len(plan.pipelines) > 1
    runs = []
    try:
        outcome = runtime.run_query(spark, plan)
        for pipe in plan.pipelines:
            metrics = run_results.run_metrics(plan, outcome, pipe)
            metrics.update(input=description, plan_s=t_plan, run_dir=str(run_path), resumed=plan.resumed,
                           master=spark.conf.get("spark.master", ""))
            metrics.update(rebalancing.rebalancing_report(plan, outcome, pipe))
            if results_out:
                run_results.check_results_visible(plan, pipe, metrics.get("result_events", 0))
                results = run_results.final_results(plan, pipe)
                metrics["subscriptions"] = io.write_objects(per_method(results_out, pipe.method, several),
                                                            kinds.result_objects(results, kind_of, vocabulary))
                metrics["results_from"] = "stages" if run_results.stage_result_files(plan, pipe) else "events"
            if answers_out:
                metrics["snapshot_answers"] = snapshots.write_answers(
                    per_method(answers_out, pipe.method, several), plan.answers_dir_of(pipe), asked,
                    settings.distribution.partitions, pipe.distribution.capabilities.whole_window, not outcome.stopped_early,
                    run_results.completed_batch(plan))
            runs.append(metrics)
    except BaseException:
        if own:  # a JVM that died (of want of memory) cannot be stopped: keep the run's own error
            try:
                spark.stop()
            except Exception:  # noqa: BLE001, S110 - the error being raised says what happened
                pass
        raise
    if own:
        spark.stop()
    return runs[0] if not several else {"runs": runs}


def run_options(options: Mapping[str, Any], spark: Any = None) -> tuple[RunSettings, Path, dict]:
    """One run from one mapping of options (the ``distributed`` command's names, ``_`` for ``-``;
    :meth:`skype.dskype.plan.RunSettings.from_options`): refuse what needs no workload, load the
    workload (or, with ``vocabulary``, name the raw streams), build the settings, :func:`run`,
    write ``metrics_out``.  Returns the settings, the run directory and the metrics.  ``spark``:
    an existing session; else one is made from ``master``."""
    import json

    from skype.dskype import rebalancing
    from skype.dskype.plan import RunSettings
    from skype.report import machine_info
    from skype.simulate import load_inputs

    method = options.get("method") or ("prefix",)
    method = (method,) if isinstance(method, str) else tuple(method)
    source = options.get("source") or "files"
    rebalancing.check_rebalance(options.get("rebalance") or "never", method,
                                staged=not (options.get("vocabulary") or options.get("messages_dir") or source != "files"),
                                versioned=source == "files")
    workload: Inputs | RawStreams
    if options.get("vocabulary"):
        if options.get("events"):
            raise InputError("E023", what="--events", expected="left out with --vocabulary (give --messages and "
                                                               "--subscriptions, or the stream directories)",
                             value=options["events"])
        workload = RawStreams(options["vocabulary"], options.get("messages"), options.get("subscriptions"))
        from skype.model import DEFAULT_BOUNDS

        bounds = options.get("bounds") or DEFAULT_BOUNDS
    else:
        workload = load_inputs(options)
        bounds = workload.bounds
    settings = RunSettings.from_options(options, bounds)
    run_dir = run_directory(options)
    out = run(settings, workload, spark, run_dir=run_dir, results_out=options.get("results_out"),
              answers_out=options.get("answers_out"), master=options.get("master") or "local[*]",
              driver_memory=options.get("driver_memory"), conf=dict(options.get("conf") or ()))
    metrics_out = options.get("metrics_out")
    if metrics_out:
        Path(metrics_out).parent.mkdir(parents=True, exist_ok=True)
        Path(metrics_out).write_text(json.dumps(dict(out, machine=machine_info()), indent=2, default=float) + "\n")
    return settings, run_dir, out


def run_directory(options: Mapping[str, Any]) -> Path:
    """The run directory (``checkpoint``) as an absolute path: executors resolve a relative one
    against their own working directory (a standalone Worker's is its application folder), and
    would write the events and results there instead of into the directory the driver reads."""
    checkpoint = options.get("checkpoint")
    return Path(checkpoint).resolve() if checkpoint else default_run_directory()
