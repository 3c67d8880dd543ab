"""Ingestion without the driver, on Spark (the shared local[2] session): a vocabulary built by
``python -m skype.run vocabulary`` from a sample of the stream; executors read the raw message
and subscription files in parallel and tokenize them (unseen terms with hashed ids, shared by
messages and subscriptions); the final results equal ``simulate --vocabulary`` on the same files,
for several methods, and the driver never loads the workload."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pyspark")

from spark_fixtures import first_difference, results_of  # noqa: E402

from skype import io  # noqa: E402
from skype.data import make_workload  # noqa: E402
from skype.run import build_parser, main  # noqa: E402

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def raw_files(tmp_path_factory):
    """Tweets: 300 subscriptions, 400 messages as public-format files; the vocabulary from the
    first 330 messages, so the last 70 bring unseen terms (328), 47 of them held by subscriptions
    (no two share a hashed id at the default 2^20 slots)."""
    d = tmp_path_factory.mktemp("ingest")
    w = make_workload("tweets", num_subs=300, num_messages=400, seed=0, k=5)
    io.write_objects(d / "msgs.jsonl", io.message_objects(w.messages, w.vocabulary))
    io.write_objects(d / "subs.jsonl", io.subscription_objects(w.subscriptions, w.vocabulary))
    assert main(["vocabulary", "--messages", str(d / "msgs.jsonl"), "--sample", "330", "--out",
                 str(d / "vocab.json")]) == 0
    return d


def test_spark_executor_ingestion_equals_the_centralized_engine(spark, raw_files, tmp_path, monkeypatch):
    from skype import simulate
    from skype.spark.job import run_options
    from skype.dskype.vocabulary import FrozenVocabulary

    d = raw_files
    files = ["--messages", str(d / "msgs.jsonl"), "--subscriptions", str(d / "subs.jsonl"),
             "--vocabulary", str(d / "vocab.json"), "--window", "300"]
    assert main(["simulate", *files, "--results-out", str(tmp_path / "central.jsonl")]) == 0
    want = results_of(tmp_path / "central.jsonl")
    assert sum(map(len, want.values())) > 500  # 799 matches: the comparison below is not vacuous

    def no_loading(*_args, **_kw):
        raise AssertionError("the driver loaded the workload")

    monkeypatch.setattr(simulate, "load_inputs", no_loading)
    run_dir = tmp_path / "run"
    args = build_parser().parse_args(["distributed", *files, "--batch-size", "200", "--ingest-split", "120",
                                      "--method", "prefix,location", "--partitions", "2",
                                      "--checkpoint", str(run_dir), "--results-out", str(tmp_path / "r.jsonl"),
                                      "--metrics-out", str(tmp_path / "m.json")])
    run_options(vars(args), spark)
    metrics = json.loads((tmp_path / "m.json").read_text())["runs"]
    for method, m in zip(("prefix", "location"), metrics):
        got = results_of(tmp_path / f"r.{method}.jsonl")
        assert got == want, f"{method}: {first_difference(got, want)}"
        assert m["results_from"] == "stages" and m["dead_letters"] == 0 and m["messages"] == 400
    assert not (run_dir / "stream" / "messages").exists()  # nothing staged by the driver
    # the hashed path was exercised: executors claimed unseen terms that subscriptions hold too
    vocab = FrozenVocabulary.load(d / "vocab.json")
    claimed = {p.read_text() for p in (run_dir / "unseen-terms").rglob("*") if p.is_file()}
    sub_terms = {t for s in io.iter_objects(d / "subs.jsonl") for t in s[1]["terms"]}
    assert claimed and all(t not in vocab for t in claimed) and claimed & sub_terms


def test_an_open_stream_gets_its_results_from_the_stages_on_a_results_request(spark, raw_files, tmp_path):
    """Stream directories have no known end, so the stages answer only a producer's results
    request: one mid-stream (its answer equals the centralized engine after 200 messages, and a
    later batch makes it stale) and one after the last message (the final results, from the
    stages, not folded from events by the driver)."""
    from skype.spark.job import run_options

    d = raw_files
    lines = (d / "msgs.jsonl").read_text().splitlines(keepends=True)
    messages, commands = tmp_path / "in" / "messages", tmp_path / "in" / "commands"
    messages.mkdir(parents=True)
    commands.mkdir(parents=True)
    (messages / "part-0.jsonl").write_text("".join(lines[:200]))
    (messages / "part-1.jsonl").write_text("".join(lines[200:]))
    subs = [json.dumps(dict(json.loads(line), op="sub", at=0)) + "\n"
            for line in (d / "subs.jsonl").read_text().splitlines() if line.strip()]
    requests = [json.dumps({"op": "results", "at": 200}) + "\n", json.dumps({"op": "results", "at": 400}) + "\n"]
    (commands / "part-0.jsonl").write_text("".join(subs + requests))

    vocab = ["--vocabulary", str(d / "vocab.json"), "--window", "300"]
    want = {}
    for n in (200, 400):
        (tmp_path / f"first-{n}.jsonl").write_text("".join(lines[:n]))
        assert main(["simulate", "--messages", str(tmp_path / f"first-{n}.jsonl"), "--subscriptions",
                     str(d / "subs.jsonl"), *vocab, "--results-out", str(tmp_path / f"central-{n}.jsonl")]) == 0
        want[n] = results_of(tmp_path / f"central-{n}.jsonl")
    assert want[200] != want[400]

    run_dir = tmp_path / "run"
    args = build_parser().parse_args(["distributed", "--messages-dir", str(messages), "--commands-dir", str(commands),
                                      *vocab, "--batch-size", "200", "--method", "prefix,location",
                                      "--partitions", "2", "--checkpoint", str(run_dir),
                                      "--results-out", str(tmp_path / "r.jsonl"),
                                      "--metrics-out", str(tmp_path / "m.json")])
    run_options(vars(args), spark)
    metrics = json.loads((tmp_path / "m.json").read_text())["runs"]
    for method, m in zip(("prefix", "location"), metrics):
        assert m["results_from"] == "stages" and m["messages"] == 400
        assert results_of(tmp_path / f"r.{method}.jsonl") == want[400], method
        first = sorted((run_dir / "results" / method).glob("batch-00000000-part-*.jsonl"))
        assert first, f"{method}: the mid-stream request was not answered"
        got: dict = {}
        for part in first:
            got.update(results_of(part))
        assert got == want[200], f"{method}: {first_difference(got, want[200])}"


def test_spark_adaptive_method_rebalances_over_executor_ingestion(spark, raw_files, tmp_path):
    """An adaptive method with live rebalancing over raw files the executors tokenize: the table
    versions travel in the source's offsets and the statistics come from the partitions' reports
    (the driver has no workload to replay); the final results equal the centralized engine's."""
    from skype.spark.job import run_options

    d = raw_files
    files = ["--messages", str(d / "msgs.jsonl"), "--subscriptions", str(d / "subs.jsonl"),
             "--vocabulary", str(d / "vocab.json"), "--window", "300"]
    assert main(["simulate", *files, "--results-out", str(tmp_path / "central.jsonl")]) == 0
    want = results_of(tmp_path / "central.jsonl")
    run_dir = tmp_path / "run"
    args = build_parser().parse_args(["distributed", *files, "--batch-size", "100", "--method", "agrid",
                                      "--rebalance", "tornado", "--partitions", "2", "--checkpoint", str(run_dir),
                                      "--results-out", str(tmp_path / "r.jsonl"), "--metrics-out", str(tmp_path / "m.json")])
    run_options(vars(args), spark)
    got = results_of(tmp_path / "r.jsonl")
    assert got == want, first_difference(got, want)
    decisions = sorted((run_dir / "rebalance" / "agrid").glob("decision-*.json"))
    assert len(decisions) >= 3 and all("upto" in json.loads(p.read_text()) for p in decisions[:-1])
    assert not (run_dir / "stream" / "messages").exists()  # nothing staged by the driver
