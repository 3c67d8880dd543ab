"""The streamed tweets workload (skype/data/streaming.py) equals the materialised one: the same
messages bit for bit (in any chunking), the same subscriptions and vocabulary; and ``simulate``
streaming it writes the same results, changes and metrics counters as ``simulate --no-stream``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from skype.data.streaming import StreamedMessages, TweetsStream
from skype.data.workloads import make_workload
from skype.model import MessageBatch
from skype.run import main
from skype.workload import WorkloadSpec, load_workload


def same_batch(a, b):
    for f in ("ids", "x", "y", "t"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    for f in ("indptr", "ids", "weights"):
        assert np.array_equal(getattr(a.terms, f), getattr(b.terms, f)), f


def same_subs(a, b):
    for f in ("ids", "x", "y", "k", "alpha"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    for f in ("indptr", "ids", "weights"):
        assert np.array_equal(getattr(a.terms, f), getattr(b.terms, f)), f


@pytest.mark.parametrize("n, subs, seed, chunk, batch, keywords", [
    (3000, 500, 0, 700, 333, "message"), (2500, 2000, 5, 1, 1000, "message"), (1200, 300, 2, 5000, 7, "zipf")])
def test_stream_equals_materialised_workload(n, subs, seed, chunk, batch, keywords):
    w = make_workload("tweets", num_subs=subs, num_messages=n, seed=seed, sub_keywords=keywords)
    ts = TweetsStream(n, seed, chunk=chunk)
    same_subs(ts.subscriptions(subs, sub_keywords=keywords), w.subscriptions)
    assert ts.vocabulary.to_dict() == w.vocabulary.to_dict()
    msgs = StreamedMessages(ts)
    same_batch(MessageBatch.concat(list(msgs.batches(batch))), w.messages)
    part = msgs.slice(n // 3, n - 5)                         # random access: the cursor restarts
    same_batch(MessageBatch.concat(list(part.batches(batch))), w.messages.slice(n // 3, n - 5))
    assert np.array_equal(part.t, w.messages.t[n // 3:n - 5])
    assert len(part) == n - 5 - n // 3


def test_load_workload_stream_falls_back_for_other_workloads():
    spec = WorkloadSpec(dataset="geonames", num_subs=50, num_messages=300)
    inputs = load_workload(spec, stream=True)
    assert isinstance(inputs.steps[0][1], MessageBatch)
    streamed = load_workload(WorkloadSpec(dataset="tweets", num_subs=50, num_messages=300), stream=True)
    assert isinstance(streamed.steps[0][1], StreamedMessages)
    same_batch(streamed.messages(), make_workload("tweets", num_subs=50, num_messages=300).messages)


TIMING = {"turnover_s", "amp_us", "emp_us", "throughput_msgs_per_s", "stream_s", "fill_s", "subscribe_s",
          "peak_rss_bytes", "memory_stages", "snapshot_query_us", "engine_stats", "phases", "generate_s", "flush_us", "other_us",
          "parts_us"}


@pytest.mark.parametrize("window", [["--window", "400"], ["--window-seconds", "300"]])
def test_simulate_streamed_equals_materialised(tmp_path, window, capsys):
    out = {}
    for mode in ("--stream", "--no-stream"):
        d = tmp_path / mode.strip("-")
        d.mkdir()
        assert main(["simulate", "--dataset", "tweets", "--num-subs", "300", "--num-messages", "2000", *window,
                     "--fill-window", "--batch-size", "150", mode, "--no-progress",
                     "--results-out", str(d / "res.jsonl"), "--changes-out", str(d / "changes.jsonl"),
                     "--metrics-out", str(d / "metrics.json")]) == 0
        metrics = json.loads((d / "metrics.json").read_text())
        stats = metrics["engine_stats"]
        out[mode] = ((d / "res.jsonl").read_text(), (d / "changes.jsonl").read_text(),
                     {k: v for k, v in metrics.items() if k not in TIMING},
                     {k: stats[k] for k in ("arrivals", "expirations", "reevaluations", "subscriptions", "window_size")})
    capsys.readouterr()
    assert out["--stream"] == out["--no-stream"]
    assert out["--stream"][1]                     # results changed during the measured stream


@pytest.mark.parametrize("keywords", ["message", "zipf"])
def test_subscriptions_do_not_depend_on_their_chunk(keywords):
    """make_subscriptions chooses the terms a chunk of subscriptions at a time (its peak memory);
    the chunk's random keys are the next run of one draw, so any chunk gives the same batch."""
    from skype.data.workloads import _streams, make_subscriptions

    w = make_workload("tweets", num_subs=10, num_messages=3000, seed=4)
    got = []
    for chunk in (7, 1000, 10**9):
        rng = _streams(4)[1]
        got.append(make_subscriptions(w.messages, w.vocabulary, 900, rng, sub_keywords=keywords, chunk=chunk))
    for other in got[1:]:
        for col in ("ids", "x", "y", "k", "alpha"):
            assert np.array_equal(getattr(got[0], col), getattr(other, col))
        assert np.array_equal(got[0].terms.indptr, other.terms.indptr)
        assert np.array_equal(got[0].terms.ids, other.terms.ids)
        assert np.array_equal(got[0].terms.weights, other.terms.weights)
