"""Executor ingestion and Kafka order without a JVM: the vocabulary file and its hashed ids for
unseen terms (agreed by independent processes, collisions raised naming both terms, across
processes through the run's registry), raw records vectorised exactly as the centralized loader
does, and Kafka rows (Arrow tables shaped like the Kafka source's) turned into stream events with
one checked message order and command keys that keep commands of different topic partitions."""

from __future__ import annotations

import json

import numpy as np
import pytest

from skype.errors import InputError
from skype.model import DEFAULT_BOUNDS
from skype.dskype.vocabulary import FrozenVocabulary, TermClaims
from skype.text import Vocabulary, tokenize

pytestmark = pytest.mark.spark

DOCS = ["coffee paris metro", "paris museum", "coffee shop paris", "metro line paris", "tea shop"]


def _vocab(tmp_path, slots=1 << 20) -> FrozenVocabulary:
    vocab = FrozenVocabulary.from_sample((tokenize(d) for d in DOCS), slots=slots)
    vocab.save(tmp_path / "vocab.json")
    return FrozenVocabulary.load(tmp_path / "vocab.json")


def test_known_terms_weigh_as_the_plain_vocabulary(tmp_path):
    vocab = _vocab(tmp_path)
    plain = Vocabulary.build(tokenize(d) for d in DOCS)
    assert [vocab.term(i) for i in range(len(vocab))] == [plain.term(i) for i in range(len(plain))]
    for text in ("Paris coffee", "metro metro line", "tea"):
        got, want = vocab.vectorize_text(text), plain.vectorize_text(text)
        assert got[0].tolist() == want[0].tolist() and got[1].tobytes() == want[1].tobytes()


def test_unseen_terms_get_the_same_hashed_id_in_every_process(tmp_path):
    a, b = _vocab(tmp_path), FrozenVocabulary.load(tmp_path / "vocab.json")  # two executors' copies
    ids_a = [a.id(t) for t in ("croissant", "louvre", "seine")]
    ids_b = [b.id(t) for t in ("seine", "louvre", "croissant")][::-1]
    assert ids_a == ids_b
    assert all(len(a) <= i < a.id_limit for i in ids_a) and len(set(ids_a)) == 3
    # weight of an unseen term: df 0, as the plain vocabulary gives a term it meets first
    plain = Vocabulary.build(tokenize(d) for d in DOCS)
    got, want = a.vectorize_text("croissant paris"), plain.vectorize_text("croissant paris")
    assert sorted(got[1].tolist()) == sorted(want[1].tolist())


def test_a_collision_is_an_error_naming_both_terms(tmp_path):
    vocab = _vocab(tmp_path, slots=1)  # every unseen term shares the one slot
    vocab.id("croissant")
    assert vocab.id("croissant") == len(vocab)
    with pytest.raises(InputError) as err:
        vocab.vectorize_text("paris baguette")
    assert err.value.code == "E080" and "'croissant'" in str(err.value) and "'baguette'" in str(err.value)


def test_collisions_across_processes_are_caught_by_the_run_registry(tmp_path):
    first, second = _vocab(tmp_path, slots=1), FrozenVocabulary.load(tmp_path / "vocab.json")
    for v in (first, second):
        v.on_unseen = TermClaims(tmp_path / "unseen-terms", v).claim
    first.id("croissant")
    assert second.id("croissant") == first.id("croissant")  # the same term: no conflict
    with pytest.raises(InputError) as err:
        second.id("baguette")  # this process never saw croissant itself
    assert err.value.code == "E080" and "croissant" in str(err.value) and "baguette" in str(err.value)


def test_bad_vocabulary_files_are_refused(tmp_path):
    path = tmp_path / "v.json"
    path.write_text(json.dumps({"terms": ["a"], "df": [1]}))
    with pytest.raises(InputError, match="E081"):
        FrozenVocabulary.load(path)
    good = _vocab(tmp_path).to_dict()
    path.write_text(json.dumps(dict(good, unseen={"slots": 2**33, "key": good["unseen"]["key"]})))
    with pytest.raises(InputError, match="E023"):
        FrozenVocabulary.load(path)


def test_raw_records_vectorise_as_the_centralized_loader(tmp_path):
    from skype import io, validate
    from skype.dskype.records import parse_lines, records_to_events

    vocab = _vocab(tmp_path)
    msgs = [{"id": 1, "x": 1.0, "y": 2.0, "t": 0.5, "text": "Paris croissant"},
            {"id": 2, "x": 500.0, "y": 2.0, "t": 0.6, "text": "tea"},  # outside the bounds: E002
            {"id": 3, "x": 3.0, "y": 4.0, "terms": {"Metro": 2.0, "louvre": 1.0}}]
    lines = [json.dumps(m).encode() for m in msgs[:2]] + [b"  \n", b"{not json", json.dumps(msgs[2]).encode()]
    batch, dead = records_to_events(parse_lines(lines, 100), "messages", vocab, DEFAULT_BOUNDS)
    assert batch.column("seq").to_pylist() == [100, 103]  # blank lines hold no position; dead ones keep theirs
    assert [(d["position"], d["code"]) for d in dead] == [(101, "E002"), (102, "E010")]
    check = FrozenVocabulary.load(tmp_path / "vocab.json")
    for row, msg in zip(range(2), (msgs[0], msgs[2])):
        _, _, _, t, ids, weights = validate.check_message(io.message_from_obj(msg), check, DEFAULT_BOUNDS, 103.0)
        assert batch.column("term_ids")[row].as_py() == ids.tolist()
        assert batch.column("weights")[row].as_py() == weights.tolist()
    assert batch.column("t").to_pylist() == [0.5, 103.0]  # no t: its position
    commands = [(0, {"id": 9, "x": 0.0, "y": 0.0, "k": 3, "alpha": 0.5, "text": "coffee louvre"}),
                (1, {"op": "unsub", "at": 4, "id": 9}),
                (2, {"op": "sub", "id": 10, "kind": "range", "rect": [0, 0, 1, 1]})]
    batch, dead = records_to_events(commands, "commands", vocab, DEFAULT_BOUNDS, default_at=0)
    assert batch.column("kind").to_pylist() == [1, 2] and batch.column("at").to_pylist() == [0, 4]
    assert batch.column("term_ids")[1].as_py() == []  # no record: it goes to every partition
    assert [(d["position"], d["code"]) for d in dead] == [(2, "E048")]


# --------------------------------------------------------------------------- Kafka order


def _kafka_rows(values, partitions, offsets):
    import pyarrow as pa

    return pa.record_batch({"value": pa.array([json.dumps(v).encode() for v in values], pa.binary()),
                            "partition": pa.array(partitions, pa.int32()), "offset": pa.array(offsets, pa.int64())})


MSG = {"id": 1, "x": 0.0, "y": 0.0, "t": 1.0, "term_ids": [2], "weights": [1.0]}


def test_kafka_messages_need_one_partition_and_dense_offsets_for_count_windows():
    from skype.dskype.ordering import kafka_rows_to_events

    events, dead = kafka_rows_to_events(_kafka_rows([MSG] * 3, [0, 0, 0], [7, 8, 9]), "messages", dense=True)
    assert events.column("seq").to_pylist() == [7, 8, 9] and not dead
    with pytest.raises(InputError) as err:
        kafka_rows_to_events(_kafka_rows([MSG] * 2, [0, 1], [7, 8]), "messages")
    assert err.value.code == "E082" and "partition 1" in str(err.value)
    gap = _kafka_rows([MSG] * 3, [0, 0, 0], [7, 8, 10])
    with pytest.raises(InputError) as err:
        kafka_rows_to_events(gap, "messages", dense=True)
    assert err.value.code == "E083" and "8 is followed by 10" in str(err.value)
    assert kafka_rows_to_events(gap, "messages", dense=False)[0].column("seq").to_pylist() == [7, 8, 10]


def _progress(batch, start, end, rows, topic="msgs"):
    source = {"description": f"KafkaV2[Subscribe[{topic}]]", "numInputRows": rows,
              "startOffset": None if start is None else {topic: {"0": start}}, "endOffset": {topic: {"0": end}}}
    return {"batchId": batch, "sources": [source, {"description": "KafkaV2[Subscribe[cmds]]", "numInputRows": 0,
                                                   "startOffset": {"cmds": {"0": 0}}, "endOffset": {"cmds": {"0": 9}}}]}


def test_kafka_offset_gaps_between_batches_stop_the_run():
    """The driver's check of each batch's source progress: the records read must fill the offset
    range the batch covered, which also catches a gap that falls between two micro-batches (the
    executors' per-batch check cannot see it).  Offsets as parsed JSON or as a JSON string."""
    from skype.dskype.ordering import check_offset_progress
    from skype.spark.runtime import OffsetCheck

    check_offset_progress(_progress(1, 10, 20, 10), "msgs")
    check_offset_progress(_progress(0, None, 20, 13), "msgs")  # first batch: no start offset
    for missing in ("null", "None"):  # how pyspark's SourceProgress prints an absent offset
        first = _progress(0, None, 20, 13)
        first["sources"][0]["startOffset"] = missing
        check_offset_progress(first, "msgs")
    as_strings = _progress(2, 20, 31, 11)
    as_strings["sources"][0].update(startOffset=json.dumps({"msgs": {"0": 20}}), endOffset='{"msgs": {"0": 31}}')
    check_offset_progress(as_strings, "msgs")
    with pytest.raises(InputError) as err:
        check_offset_progress(_progress(3, 31, 41, 9), "msgs")  # offset 31..40 hold 9 records
    assert err.value.code == "E083" and "batch 3 read 9 records of topic 'msgs'" in str(err.value)

    class Query:  # what the driver's loop reads of a streaming query
        def __init__(self, progress):
            self.recentProgress, self.lastProgress = progress, progress[-1]

    def settings(kind, source="kafka"):
        from types import SimpleNamespace

        return SimpleNamespace(source=SimpleNamespace(kind=source, messages_topic="msgs"),
                               window=SimpleNamespace(kind=kind))

    good = [_progress(0, None, 10, 10), _progress(1, 10, 20, 10)]
    check = OffsetCheck(settings("count"))
    assert check.passes(Query(good)) and check.checked == 1
    assert not check.passes(Query(good + [_progress(2, 20, 30, 9), _progress(3, 30, 40, 10)]))
    with pytest.raises(InputError, match="E083"):
        check.raise_error()
    assert check.checked == 1  # stopped at the batch with the gap
    one_by_one = OffsetCheck(settings("count"))
    one_by_one.checked = 1
    next_only = Query([_progress(2, 20, 30, 10)])
    next_only.recentProgress = []  # the next batch is read from lastProgress alone
    assert one_by_one.passes(next_only) and one_by_one.checked == 2
    next_only.lastProgress = _progress(3, 30, 40, 8)
    assert not one_by_one.passes(next_only)
    assert OffsetCheck(settings("time")).passes(Query([_progress(2, 20, 30, 9)]))  # time windows: gaps allowed
    assert OffsetCheck(settings("count", "files")).passes(Query([_progress(2, 20, 30, 9)]))


def test_kafka_commands_of_two_partitions_are_never_merged():
    from skype.dskype.codec import Commands
    from skype.dskype.ordering import OFFSET_BITS, kafka_rows_to_events
    from skype.dskype.routing import events_from_arrow

    sub = {"op": "sub", "id": 3, "x": 0.0, "y": 0.0, "k": 2, "alpha": 0.5, "term_ids": [1], "weights": [1.0]}
    rows = _kafka_rows([sub, dict(sub, id=4), {"op": "unsub", "id": 3}], [0, 1, 0], [5, 5, 6])
    events, dead = kafka_rows_to_events(rows, "commands")
    assert not dead
    commands = Commands.concat([events_from_arrow(events)[2]])
    assert sorted(commands.subs.ids.tolist()) == [3, 3, 4]  # keyed by offset alone, id 4 would be dropped
    assert sorted(commands.cseq.tolist()) == [5, 6, (1 << OFFSET_BITS) | 5]
    offset_only = Commands(commands.cseq % (1 << OFFSET_BITS), commands.at, commands.op, commands.subs, commands.nrep)
    assert len(Commands.concat([offset_only])) == 2  # what the old keying did
    with pytest.raises(InputError, match="E084"):
        kafka_rows_to_events(_kafka_rows([sub], [0], [1 << OFFSET_BITS]), "commands")


def test_kafka_raw_values_are_tokenized_with_the_vocabulary(tmp_path):
    from skype.dskype.ordering import kafka_rows_to_events

    vocab = _vocab(tmp_path)
    raw = {"id": 5, "x": 1.0, "y": 1.0, "t": 2.0, "text": "paris croissant"}
    events, dead = kafka_rows_to_events(_kafka_rows([raw, MSG], [0, 0], [0, 1]), "messages", vocab=vocab,
                                        bounds=DEFAULT_BOUNDS)
    assert not dead and sorted(events.column("seq").to_pylist()) == [0, 1]
    row = events.column("seq").to_pylist().index(0)
    assert events.column("term_ids")[row].as_py() == vocab.vectorize_text("paris croissant")[0].tolist()
    _, dead = kafka_rows_to_events(_kafka_rows([raw], [0], [0]), "messages")
    assert [d["code"] for d in dead] == ["E085"]  # a raw record without a vocabulary


def test_sample_terms_outside_the_vocabulary_do_not_size_the_tables():
    from skype.model import MessageBatch, TermMatrix
    from skype.spark.ingest import known_terms_only

    batch = MessageBatch([1, 2, 3], [0.0] * 3, [0.0] * 3, [0.0] * 3,
                         TermMatrix([0, 2, 3, 4], [1, 900, 950, 2], [0.6, 0.8, 1.0, 1.0]))
    kept = known_terms_only(batch, 10)
    assert kept.ids.tolist() == [1, 3] and kept.terms.ids.tolist() == [1, 2]
    assert np.allclose(kept.terms.weights, [1.0, 1.0])


def test_raw_reader_splits_batches_into_tasks_that_seek_to_their_records(tmp_path):
    """Micro-batches of 25 records split into tasks of at most 10, over two JSONL files with blank
    lines: every record is read exactly once, at its position, each task seeking near it."""
    from skype.spark.ingest import RawFilesReader, read_raw_piece

    (tmp_path / "m").mkdir()
    for name, ids in (("part-0.jsonl", range(0, 53)), ("part-1.jsonl", range(53, 103))):
        lines = []
        for i in ids:
            lines.append(json.dumps({"id": i, "x": 0.0, "y": 0.0, "t": float(i), "text": "paris coffee"}) + "\n")
            lines += ["\n"] if i % 7 == 0 else []
        (tmp_path / "m" / name).write_text("".join(lines))
    vocab = _vocab(tmp_path)
    reader = RawFilesReader(str(tmp_path / "m"), "messages", 25, vocabulary="", claims=None,
                            bounds=DEFAULT_BOUNDS.as_tuple(), dead_letters=None, split=10, default_at=None)
    got, start, tasks = [], {"records": 0}, 0
    while (end := reader.latestOffset(start, reader.getDefaultReadLimit())) != start:
        for part in reader.partitions(start, end):
            assert part.value.take <= 10 and part.value.skip - part.value.seek_record < 10
            batch, dead = read_raw_piece(part.value, "messages", vocab, DEFAULT_BOUNDS, None)
            assert not dead and batch.column("seq").to_pylist() == batch.column("id").to_pylist()
            got += batch.column("id").to_pylist()
            tasks += 1
        start = end
    assert got == list(range(103)) and tasks > 103 // 10


def test_distributed_refuses_ingestion_inputs_it_cannot_order(tmp_path, capsys):
    """Checked before any Spark session starts: an events file (no message count before each
    command), messages without subscriptions, files mixed with directories."""
    from skype.run import main

    vocab = _vocab(tmp_path)
    path = str(tmp_path / "vocab.json")
    vocab.save(path)
    (tmp_path / "m.jsonl").write_text(json.dumps({"id": 1, "x": 0.0, "y": 0.0, "text": "paris"}) + "\n")
    (tmp_path / "d").mkdir()
    base = ["distributed", "--vocabulary", path, "--checkpoint", str(tmp_path / "run")]
    for extra in (["--events", str(tmp_path / "m.jsonl")], ["--messages", str(tmp_path / "m.jsonl")],
                  ["--messages", str(tmp_path / "m.jsonl"), "--subscriptions", str(tmp_path / "m.jsonl"),
                   "--messages-dir", str(tmp_path / "d"), "--commands-dir", str(tmp_path / "d")]):
        assert main(base + extra) == 2
        assert "[E023]" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_the_run_directory_is_absolute_for_the_executors(tmp_path, monkeypatch):
    """A relative --checkpoint is resolved on the driver: a standalone Worker's executors would
    resolve it against their own working directory and write the events and results there."""
    from skype.spark.job import run_directory
    from skype.run import build_parser

    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(["distributed", "--checkpoint", "out/run"])
    assert run_directory(vars(args)) == tmp_path.resolve() / "out" / "run"
    assert run_directory(vars(build_parser().parse_args(["distributed"]))).is_absolute()
