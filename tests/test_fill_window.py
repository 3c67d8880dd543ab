"""``simulate --fill-window``: the paper's protocol (fill the window, register, measure)."""

import json

import pytest

from conftest import brute_force_topk
from skype import io
from skype.simulate import split_fill
from skype.data import make_workload
from skype.run import main


def _run(*args):
    return main([str(a) for a in args])


@pytest.mark.parametrize("window", [["--window", 300], ["--window-seconds", 250.0]])
def test_fill_window_registers_into_the_full_window_and_measures_the_rest(tmp_path, window):
    args = ["simulate", "--dataset", "tweets", "--num-subs", 2500, "--num-messages", 900, *window, "--seed", 9,
            "--fill-window", "--results-out", tmp_path / "r.jsonl", "--metrics-out", tmp_path / "m.json"]
    assert _run(*args) == 0
    w = make_workload("tweets", num_subs=2500, num_messages=900, seed=9)
    metrics = json.loads((tmp_path / "m.json").read_text())
    span = {"window": 300} if window[0] == "--window" else {"window_seconds": 250.0}
    fill, rest = split_fill([("msgs", w.messages)], span)
    n_fill = sum(len(b) for b in fill)
    turn, _ = split_fill(rest, span)            # one window turnover (the default), unmeasured
    n_turn = sum(len(b) for b in turn)
    assert metrics["fill_messages"] == n_fill and 0 < n_fill < 900
    assert metrics["turnover_messages"] == n_turn and 0 < n_turn < 900 - n_fill
    assert metrics["messages"] == 900 - n_fill - n_turn
    counts = metrics["phases"]["counts"]
    assert counts["enter"] == metrics["messages"]
    # buffers built in bulk register their holders too: expiry visits only live ones
    assert counts["holders_visited"] == counts["holders_found"] > 0
    assert metrics["engine_stats"]["arrivals"] == 900
    assert metrics["subscribe_s"] > 0 and metrics["fill_s"] > 0
    # 2,500 subscriptions into a full window: the bulk path
    assert metrics["engine_stats"]["bulk_registration"]["subscriptions"] == 2500
    # the process's memory after each stage: the peak never falls, the engine's bytes are in it
    stages = metrics["memory_stages"]
    assert [m["stage"] for m in stages] == ["loaded", "filled", "registered", "turned over", "measured"]
    peaks = [m["peak_rss_bytes"] for m in stages]
    assert peaks == sorted(peaks) and peaks[-1] <= metrics["peak_rss_bytes"]
    assert all(0 < m["engine_bytes"] < m["rss_bytes"] <= m["peak_rss_bytes"] for m in stages), stages
    assert stages[0]["engine_bytes"] < stages[1]["engine_bytes"] < stages[2]["engine_bytes"]
    # the registration's static index of the window was built and counted, then dropped
    assert metrics["engine_stats"]["memory_parts"]["registration_index_peak"] > 0
    if window[0] == "--window":
        want = brute_force_topk(w.subscriptions, w.messages.slice(600, 900), w.bounds.max_dist)
        got = io.read_results(tmp_path / "r.jsonl")
        assert {sid: [(m.id, m.score) for m in ms] for sid, ms in got.items()} == want


def test_fill_stops_at_the_first_subscription_event():
    w = make_workload("tweets", num_subs=10, num_messages=50, seed=1)
    steps = [("msgs", w.messages.slice(0, 20)), ("sub", w.subscriptions), ("msgs", w.messages.slice(20, 50))]
    fill, rest = split_fill(steps, {"window": 30})
    assert [len(b) for b in fill] == [20] and rest[0][0] == "sub"
    fill, rest = split_fill([("msgs", w.messages)], {"window": 30})
    assert [len(b) for b in fill] == [30] and len(rest[0][1]) == 20


def test_turnover_zero_measures_everything_after_the_fill(tmp_path):
    args = ["simulate", "--dataset", "tweets", "--num-subs", 500, "--num-messages", 700, "--window", 300,
            "--seed", 4, "--fill-window", "--turnover", 0, "--timers", "--metrics-out", tmp_path / "m.json"]
    assert _run(*args) == 0
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["turnover_messages"] == 0 and metrics["messages"] == 400
    phases = metrics["phases"]
    assert phases["timers"] is True and phases["counts"]["expire"] == 400
    assert phases["seconds"]["disseminate"] > 0 and phases["counts"]["scan_postings"] >= phases["counts"]["verify"] > 0
