"""The Spark job's sink without a JVM: the Kafka sink's records are the file sink's events (one
record per event, keyed by method and subscription), and a stateful task with the files sink
writes its events, results and answers itself, emitting one ``written`` row per events file.
Split from test_spark_logic.py (the job's routing and pipeline logic)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pyspark")

pytestmark = pytest.mark.spark


def _sink_input(events_blobs, results_blob):
    import pyarrow as pa

    kinds = ["events"] * len(events_blobs) + ["metrics", "results"]
    payloads = list(events_blobs) + [b'{"stage": "partition"}', results_blob]
    return [pa.RecordBatch.from_arrays([pa.array([0] * len(kinds), pa.int32()), pa.array(kinds, pa.string()),
                                        pa.array(payloads, pa.binary())], names=["pipeline", "kind", "payload"])]


def test_spark_kafka_sink_records_carry_the_file_sink_events(tmp_path):
    """The Kafka sink's records are the file sink's events, one record per event keyed by method
    and subscription; metrics pass through, each task counts what it wrote, and the final results
    go to the same files in both modes."""
    import json as json_mod

    import pyarrow as pa

    from skype.dskype.reports import EventBuilder, pack_results
    from skype.spark.sink import EVENT, TaskFiles, kafka_records_arrow, write_task_files

    first, second = EventBuilder(40), EventBuilder(40)
    first.add(7, (np.array([3, 9]), np.array([0.75, 0.5]), np.array([3, 9])), np.array([1]), created=True)
    first.add(2, (np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64)), np.array([4, 5]))
    second.add(11, (np.array([12]), np.array([1 / 3]), np.array([12])), np.zeros(0, np.int64), removed=True)
    blobs = [first.rows().pack(40), second.rows().pack(40)]
    results = pack_results([2, 7], [(np.array([9]), np.array([0.5]), np.array([9])),
                                     (np.array([3]), np.array([0.75]), np.array([3]))])
    files = TaskFiles({0: str(tmp_path / "files" / "events")}, {0: str(tmp_path / "files" / "results")}, "jsonl")
    file_rows = [dict(zip(("pipeline", "kind", "payload"), row))
                 for row in write_task_files(files, 5, "00000", _sink_input(blobs, results))]
    want = [json_mod.loads(line) for line in next((tmp_path / "files" / "events").glob("*.jsonl")).read_text().splitlines()]
    out = list(kafka_records_arrow({0: "keyword"}, 5, {0: str(tmp_path / "kafka" / "results")},
                                   _sink_input(blobs, results)))
    rows = pa.Table.from_batches(out).to_pylist()
    records = [r for r in rows if r["kind"] == EVENT]
    got = [json_mod.loads(r["value"]) for r in records]
    assert [r["key"] for r in records] == [b"keyword:7", b"keyword:2", b"keyword:11"]
    assert all(g.pop("method") == "keyword" for g in got)
    assert got == want and len(got) == 3 and got[2]["removed"] and got[0]["batch"] == 5
    assert got[2]["entered"][0]["score"] == 1 / 3  # JSON keeps every bit of a score
    passed = [(r["kind"], r["payload"]) for r in rows if r["kind"] != EVENT]
    assert passed[0] == ("metrics", b'{"stage": "partition"}')
    assert [json_mod.loads(p)["rows"] for k, p in passed if k == "written"] == [3]
    assert [(r["kind"], json_mod.loads(r["payload"])["rows"]) for r in file_rows if r["kind"] == "written"] == [("written", 3)]
    (got_results,) = (tmp_path / "kafka" / "results").glob("*.jsonl")
    (want_results,) = (tmp_path / "files" / "results").glob("*.jsonl")
    assert got_results.read_text() == want_results.read_text() and got_results.name == want_results.name


def test_spark_task_writes_its_outputs_and_emits_written_rows(tmp_path, monkeypatch):
    """With the files sink a stateful task writes its events, results and answers itself (one
    file per grouping key, labelled by stage) and emits one ``written`` row per events file in
    their place; metrics rows pass through unchanged."""
    import json as json_mod

    from pyspark.sql import Row

    from skype.dskype.reports import EventBuilder, pack_results
    from skype.spark import processors
    from skype.spark.sink import TaskFiles

    builder = EventBuilder(40)
    builder.add(7, (np.array([3, 9]), np.array([0.75, 0.5]), np.array([3, 9])), np.array([1]), created=True)
    results = pack_results([7], [(np.array([3]), np.array([0.75]), np.array([3]))])
    emitted = [Row(key=11, pipeline=0, kind="events", payload=builder.rows().pack(40)),
               Row(key=11, pipeline=0, kind="results", payload=results),
               Row(key=11, pipeline=0, kind="metrics", payload=b'{"stage": "partition"}')]

    class Fake(processors._HostedProcessor):
        stage = "partition"

        def _handle(self, key, rows):
            assert key == 4
            yield from emitted

    files = TaskFiles({0: str(tmp_path / "events")}, {0: str(tmp_path / "results"), -1: str(tmp_path / "answers")},
                      "jsonl")
    monkeypatch.setattr(processors, "streaming_batch_id", lambda: 6)
    out = list(Fake("token", files=files).handleInputRows((4,), iter([]), None))
    assert [(r.key, r.kind) for r in out] == [(11, "written"), (11, "metrics")]
    assert json_mod.loads(out[0].payload)["rows"] == 1 and out[1].payload == emitted[2].payload
    (events,) = (tmp_path / "events").iterdir()
    assert events.name == "batch-00000006-part-p00004.jsonl"
    assert json_mod.loads(events.read_text())["sub"] == 7
    (final,) = (tmp_path / "results").iterdir()
    assert final.name == "batch-00000006-part-p00004.jsonl" and json_mod.loads(final.read_text())["id"] == 7
    assert not list(tmp_path.glob("**/.*.tmp"))  # no temporary file left behind
    # without files (console, Kafka, the JVM-free pipeline) the rows go out as they are
    assert list(Fake("token").handleInputRows((4,), iter([]), None)) == emitted
