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
    from skype.cli import distributed as distributed_mod
    from skype.cli import inputs as inputs_mod
    from skype.cli.distributed import run_distributed
    from skype.spark.vocabulary import FrozenVocabulary

    d = raw_files
    files = ["--messages", str(d / "msgs.jsonl"), "--subscriptions", str(d / "subs.jsonl"),
             "--vocabulary", str(d / "vocab.json"), "--window", "300"]
    assert main(["simulate", *files, "--results-out", str(tmp_path / "central.jsonl")]) == 0
    want = results_of(tmp_path / "central.jsonl")
    assert sum(map(len, want.values())) > 500  # 799 matches: the comparison below is not vacuous

    def no_loading(*_args, **_kw):
        raise AssertionError("the driver loaded the workload")

    monkeypatch.setattr(inputs_mod, "load_inputs", no_loading)
    monkeypatch.setattr(distributed_mod, "load_inputs", no_loading)
    run_dir = tmp_path / "run"
    args = build_parser().parse_args(["distributed", *files, "--batch-size", "200", "--ingest-split", "120",
                                      "--method", "prefix,location", "--partitions", "2",
                                      "--checkpoint", str(run_dir), "--results-out", str(tmp_path / "r.jsonl"),
                                      "--metrics-out", str(tmp_path / "m.json")])
    assert run_distributed(args, spark) == 0
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
