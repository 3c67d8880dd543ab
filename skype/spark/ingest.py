"""Ingestion without the driver: executors read the raw streams and tokenize them.

``distributed --vocabulary FILE`` with raw files (``--messages``/``--subscriptions`` files, or
``--messages-dir``/``--commands-dir`` of raw JSONL or Parquet files) plans the run from samples
only and leaves the streams to the executors:

* **Vocabulary, shipped once.**  The file is copied into the run directory under a name holding
  its content hash and added with ``SparkContext.addFile``; every executor's Python worker loads it
  once (``SparkFiles``, falling back to the run directory) and keeps it across tasks.
* **Parallel reads.**  With a ``vocabulary`` option the ``skype_stream`` source
  (:class:`skype.spark.sources.PairedStreamReader`: its offsets and batch plan) reads each stream
  with a :class:`RawFilesReader` (records consumed, files in name order), which splits each micro-batch into input partitions of at most ``split`` records, each read by its own
  task, which parses, validates and vectorises its records (:mod:`skype.dskype.records`).  Records
  the engine would reject go to ``DIR/dead-letters/ingest-*.jsonl`` and keep their positions.
* **Unseen terms** get hashed ids every process agrees on; a run-wide registry
  (``DIR/unseen-terms``, :class:`skype.dskype.vocabulary.TermClaims`) turns a collision into E080.
* **The distribution from a sample of the stream**: the first ``--sample-size`` messages and
  subscribe commands, read and vectorised on the driver (:func:`sample_inputs`).
* **What the driver holds**: the samples, per stream file its name and record count, and the
  per-batch metrics; nothing that grows with the messages or the subscriptions.  The stream length
  (for the final top-k from the stages) is counted by streaming the message files once.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path


from skype.errors import InputError
from skype.spark.readers import (DEFAULT_SPLIT, RawFilesReader, RawPiece, StreamFilesReader,  # noqa: F401  (re-exported)
                                 _file_format, count_records, jsonl_marks, raw_reader, read_raw_piece)

INGEST_SETTINGS = ("vocabulary", "messages_dir", "commands_dir", "ingest_split")  # of the source: DIR/ingest.json, for restarts


def vocabulary_copy(run_dir: Path, path: str) -> Path:
    """Copy the vocabulary file into the run directory as ``vocabulary-<hash>.json`` (the hash
    makes the name unique per content: ``addFile`` refuses one name with two contents)."""
    from skype.dskype.vocabulary import FrozenVocabulary

    FrozenVocabulary.load(path)  # checked once, here, with a clear error
    digest = hashlib.blake2b(Path(path).read_bytes(), digest_size=8).hexdigest()
    target = run_dir / f"vocabulary-{digest}.json"
    if not target.exists():
        shutil.copyfile(path, target)
    return target


def ship_vocabulary(spark, path: Path) -> None:
    """Send the vocabulary file to every executor once (``SparkFiles``).  Its name holds its
    content hash: a name the session already shipped (another run of the same file) is the same
    content, so Spark's refusal to register it again from another path is harmless."""
    try:
        spark.sparkContext.addFile(str(path))
    except Exception as err:  # py4j wraps the JVM's IllegalArgumentException
        if "already registered" not in str(err):
            raise


# --------------------------------------------------------------------------- the data source


# --------------------------------------------------------------------------- planning from samples


def stream_files(directory: str) -> list[str]:
    """The stream files of a directory, in name order (as the sources read them)."""
    names = sorted(n for n in os.listdir(directory) if not n.startswith((".", "_")) and _file_format(n))
    return [os.path.join(directory, n) for n in names]


def link_stream_file(source: str, directory: Path) -> None:
    """A one-file stream directory for ``--messages FILE``: a symbolic link to the file (the run
    directory and the file must be visible to every executor)."""
    fmt = _file_format(source)
    if fmt is None:
        raise InputError("E024", path=source)
    directory.mkdir(parents=True, exist_ok=True)
    link = directory / f"part-00000000.{'parquet' if fmt == 'parquet' else 'jsonl'}"
    if not link.exists():
        os.symlink(os.path.abspath(source), link)


def count_stream(directory: str) -> int:
    """Records in a stream directory (streamed, constant memory)."""
    return sum(count_records(p) for p in stream_files(directory))


def first_records(directory: str, kind: str, limit: int, vocab, bounds, default_at: int | None = None):
    """The first ``limit`` records of a raw stream directory as (events batch, dead letters)."""
    batches, dead, taken, position = [], [], 0, 0
    for path in stream_files(directory):
        if taken >= limit:
            break
        take = min(count_records(path), limit - taken)
        batch, bad = read_raw_piece(RawPiece(path, 0, take, position), kind, vocab, bounds, default_at)
        batches.append(batch)
        dead += bad
        taken += take
        position += take
    return batches, dead


def sample_inputs(messages_dir: str, commands_dir: str, vocab, bounds, sample_size: int, description: str):
    """The distribution's build input from the stream itself: its first ``sample_size`` messages
    and its first ``sample_size`` subscribe commands (placement is a pure function of a record and
    the tables built here, so a sample routes every later record exactly; ``docs/spark-design.md``)."""
    messages = first_records(messages_dir, "messages", sample_size, vocab, bounds)[0]
    commands = first_records(commands_dir, "commands", sample_size, vocab, bounds, 0)[0]
    return inputs_from_events(messages, commands, vocab, bounds, description)


def inputs_from_events(message_batches, command_batches, vocab, bounds, description: str):
    """Stream-event batches of a sample -> the distribution's build input (messages, subscribes),
    restricted to the vocabulary's known terms (:func:`known_terms_only`)."""
    import numpy as np

    from skype.workload import Inputs
    from skype.model import MessageBatch
    from skype.partitioning.registry import concat_subscriptions, empty_subscriptions
    from skype.dskype.codec import OP_SUB
    from skype.dskype.routing import events_from_arrow

    messages = [events_from_arrow(b)[0] for b in message_batches]
    subs = []
    for batch in command_batches:
        commands = events_from_arrow(batch)[2]
        subs.append(commands.subs.take(np.flatnonzero(commands.op == OP_SUB)))
    sample_subs = known_terms_only(concat_subscriptions(subs), vocab.num_known) if subs else empty_subscriptions()
    sample_msgs = known_terms_only(MessageBatch.concat(messages), vocab.num_known) if messages else None
    if sample_msgs is None or len(sample_msgs) == 0:
        raise InputError("E085", detail=f"no valid message in the sample of {description} to build the "
                                        "distribution from")
    return Inputs(vocab, sample_subs, [("msgs", sample_msgs)], bounds, description)


def plan_kafka_run(spark, run_dir: Path, settings, *, vocabulary: str):
    """Plan a Kafka run from a sample of the topics themselves: the first ``--sample-size``
    records of each (a batch read), converted on the executors as the stream will be.  Not run
    against a broker in the tests (there is none); its conversion is :func:`inputs_from_events`."""
    from skype.dskype.plan import plan_run
    from skype.spark.sources import kafka_sample
    from skype.dskype.vocabulary import FrozenVocabulary

    run_dir = Path(run_dir)
    saved = run_dir / "ingest.json"
    if (run_dir / "run.json").exists() and saved.exists():
        for name, value in json.loads(saved.read_text()).items():
            setattr(settings.source, name, value)
        return plan_run(run_dir, settings)
    run_dir.mkdir(parents=True, exist_ok=True)
    settings.source.vocabulary = str(vocabulary_copy(run_dir, vocabulary).resolve())
    ship_vocabulary(spark, Path(settings.source.vocabulary))
    vocab = FrozenVocabulary.load(settings.source.vocabulary)
    bounds = tuple(settings.distribution.bounds)
    sample = [kafka_sample(spark, settings.source.kafka_bootstrap, topic, kind, settings.distribution.sample_size, settings.source.vocabulary,
                           bounds).to_batches()
              for topic, kind in ((settings.source.messages_topic, "messages"), (settings.source.commands_topic, "commands"))]
    from skype.model import Bounds

    inputs = inputs_from_events(sample[0], sample[1], vocab, Bounds(*bounds), f"topic {settings.source.messages_topic}")
    plan = plan_run(run_dir, settings, inputs)
    saved.write_text(json.dumps({k: getattr(settings.source, k) for k in INGEST_SETTINGS}, indent=2))
    return plan


def raw_events(spark, plan):
    """Both streams of a planned run, read (files or Kafka) and tokenized by the executors."""
    s = plan.settings
    ship_vocabulary(spark, Path(s.source.vocabulary))
    if s.source.kind == "kafka":
        from skype.spark.sources import kafka_events

        kafka = dict(dead_letters=str(plan.dead_letters_dir), vocabulary=s.source.vocabulary, bounds=tuple(s.distribution.bounds))
        messages = kafka_events(spark, s.source.kafka_bootstrap, s.source.messages_topic, "messages", s.control.batch_size,
                                dense=s.window.kind == "count", **kafka)
        commands = kafka_events(spark, s.source.kafka_bootstrap, s.source.commands_topic, "commands", **kafka)
        return messages.unionByName(commands)
    from skype.dskype.plan import rebalance_dir_of
    from skype.spark.session import commands_cap
    from skype.spark.sources import paired_events

    tables = {pipe.index: d for pipe in plan.pipelines if (d := rebalance_dir_of(plan, pipe)) is not None}
    return paired_events(spark, plan.messages_dir, plan.commands_dir, s.control.batch_size, commands_cap(spark, s),
                         tables=tables, vocabulary=s.source.vocabulary, bounds=",".join(repr(float(b)) for b in s.distribution.bounds),
                         claims=str(plan.run_dir / "unseen-terms"), deadLetters=str(plan.dead_letters_dir),
                         split=s.source.ingest_split)


def plan_ingest_run(run_dir: Path, settings, *, vocabulary: str, messages_file: str | None = None,
                    subscriptions_file: str | None = None):
    """Plan a run whose executors ingest the raw streams (module docstring): copy the vocabulary
    into the run directory, make one-file stream directories for ``--messages``/``--subscriptions``
    files (links), count the messages, and build the distributions from the streams' samples.
    ``settings.source.messages_dir``/``commands_dir`` name the raw directories when no files are given."""
    from skype.model import Bounds
    from skype.dskype.plan import plan_run
    from skype.dskype.vocabulary import FrozenVocabulary, TermClaims

    run_dir = Path(run_dir)
    saved = run_dir / "ingest.json"
    if (run_dir / "run.json").exists() and saved.exists():  # resumed: the first run's vocabulary and streams
        for name, value in json.loads(saved.read_text()).items():
            setattr(settings.source, name, value)
        return plan_run(run_dir, settings)
    run_dir.mkdir(parents=True, exist_ok=True)
    settings.source.vocabulary = str(vocabulary_copy(run_dir, vocabulary).resolve())
    if messages_file is not None:
        link_stream_file(messages_file, run_dir / "stream" / "raw-messages")
        settings.source.messages_dir = str(run_dir / "stream" / "raw-messages")
        commands = run_dir / "stream" / "raw-commands"
        if subscriptions_file is not None:
            link_stream_file(subscriptions_file, commands)
        commands.mkdir(parents=True, exist_ok=True)
        settings.source.commands_dir = str(commands)
    vocab = FrozenVocabulary.load(settings.source.vocabulary)
    vocab.on_unseen = TermClaims(run_dir / "unseen-terms", vocab).claim
    bounds = Bounds(*settings.distribution.bounds)
    inputs = sample_inputs(settings.source.messages_dir, settings.source.commands_dir, vocab, bounds, settings.distribution.sample_size,
                           description=f"{messages_file or settings.source.messages_dir} (executor ingestion)")
    # a fixed stream (files given) has a known end: the stages then send the final top-k
    length = count_stream(settings.source.messages_dir) if messages_file is not None else None
    plan = plan_run(run_dir, settings, inputs, stream_messages=length)
    saved.write_text(json.dumps({k: getattr(settings.source, k) for k in INGEST_SETTINGS}, indent=2))
    return plan


def known_terms_only(batch, num_known: int):
    """The sample's records restricted to the vocabulary's known terms (records left without one
    dropped).  The distributions size their term tables by the largest id they are built with;
    unseen terms' hashed ids would make them ``slots`` long.  Later records with unseen terms are
    routed by the id's value (``(t - V) mod P``), whatever the sample held."""
    import numpy as np

    from skype.model import TermMatrix
    from skype.text import normalize_rows

    terms = batch.terms
    keep = terms.ids < num_known
    rows = np.repeat(np.arange(len(batch), dtype=np.int64), np.diff(terms.indptr))[keep]
    lens = np.bincount(rows, minlength=len(batch))
    indptr = np.zeros(len(batch) + 1, np.int64)
    np.cumsum(lens, out=indptr[1:])
    batch = batch.take(np.arange(len(batch)))
    weights = normalize_rows(rows, terms.weights[keep], len(batch)) if len(rows) else terms.weights[keep]
    batch.terms = TermMatrix(indptr, terms.ids[keep], weights)  # unit length again (cost model only)
    return batch.take(np.flatnonzero(lens > 0))
