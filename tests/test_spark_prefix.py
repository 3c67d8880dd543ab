"""The ``prefix`` method on Spark with thresholds from the engines (``skype.dskype.activation``):
replicas off the loose prefix sleep, and wake when the threshold that excluded them may fall.
Checked without a JVM (the job's code under ``TwsTester``) against the centralized engine and the
independent oracle after every micro-batch, on an adversarial stream whose threshold falls
mid-stream so that a prefix must grow, through a lost engine cache while a replica sleeps."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("pyspark")

from spark_fixtures import (  # noqa: E402
    LocalPipeline, centralized_by_batch, events_workload, first_difference, oracle_by_batch, oracle_check,
)

from skype.simulate import load_inputs  # noqa: E402
from skype.run import build_parser  # noqa: E402

pytestmark = pytest.mark.spark

NEAR = (10.0, 10.0)
FAR = (-100.0, -50.0)


def adversarial_events(path, num_messages: int = 120):
    """Subscription 1 holds a rare and a hot term.  Among the first 40 messages, ten carry both and
    score near 1 at its location: they outrank anything that carries the hot term alone (at most
    ``reach`` of the hot term's position), so the hot term leaves the loose prefix and its replica
    may sleep.  Then only hot-term messages come: once the pairs expire the threshold falls, the
    prefix must grow back onto the hot term, and the hot-term messages already in the window (never
    sent to the rare term's partition) must enter the top-k."""
    events = [{"op": "sub", "id": 1, "x": NEAR[0], "y": NEAR[1], "k": 2, "alpha": 0.5,
               "terms": {"rareterm": 1.0, "hotterm": 1.0}}]
    events += [{"op": "sub", "id": 2 + j, "x": FAR[0], "y": FAR[1], "k": 2, "alpha": 0.5,
                "terms": {f"filler{j}": 1.0}} for j in range(5)]
    for i in range(num_messages):
        jitter = 1e-3 * ((i * 7919) % 101)
        if i < 40 and i % 4 == 0:
            terms, (x, y) = {"rareterm": 1.0, "hotterm": 1.0}, NEAR
        elif i % 4 == 1:
            terms, (x, y) = {"hotterm": 1.0}, NEAR
        else:
            terms, (x, y) = {f"filler{i % 5}": 1.0, "hotterm": 0.2}, FAR
        events.append({"op": "msg", "id": 1000 + i, "x": x + jitter, "y": y - jitter, "t": float(i), "terms": terms})
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def _load(events, method: str, window: int, batch: int, partitions: int):
    from skype.dskype.plan import RunSettings

    args = build_parser().parse_args(["distributed", "--events", str(events), "--window", str(window), "--method",
                                      method, "--partitions", str(partitions), "--batch-size", str(batch)])
    inputs = load_inputs(vars(args))
    return inputs, RunSettings.from_options(vars(args), inputs.bounds)


def test_spark_prefix_replica_wakes_when_the_threshold_falls(tmp_path):
    from skype.spark.hosts import InProcessHosts

    window, batch = 40, 10
    inputs, settings = _load(adversarial_events(tmp_path / "events.jsonl"), "prefix", window, batch, 2)
    pipe = LocalPipeline(tmp_path / "run", settings, inputs)
    dist = pipe.plan.pipelines[0].distribution
    rare, hot = (inputs.vocabulary.get(t) for t in ("rareterm", "hotterm"))
    assert dist.term_partitions(np.array([rare, hot])).tolist() == [0, 1]  # the case needs them apart
    want = centralized_by_batch(inputs, settings.window.centralized(), batch)
    sleeping_seen = woke = False
    for b, (oracle, live) in enumerate(oracle_by_batch(inputs, {"window": window}, batch)):
        if b == 3:
            InProcessHosts.clear()  # lose every engine while the hot replica sleeps: rebuild from the log
        got = pipe.step()
        assert got == want[b], f"batch {b}: {first_difference(got, want[b])}"
        oracle_check(oracle, got, live, f"batch {b}")
        hot_part = [m for m in pipe.metrics[-1] if m["stage"] == "partition" and m["partition"] == 1][0]
        if b == 3:
            assert not hot_part["hit"] and hot_part["dormant"] == 1  # the rebuild restored the sleep
        sleeping_seen |= hot_part["dormant"] > 0
        woke |= hot_part["wakes"] > 0 and b * batch + batch > 60
    assert sleeping_seen and woke
    assert [m for m, _ in want[-1][1]] and all(m >= 1040 for m, _ in want[-1][1])  # the pairs expired


def test_spark_every_method_matches_the_oracle_and_prefix_replicates_less(tmp_path):
    """All six methods side by side on a generated stream with subscribes, unsubscribes and a
    re-subscription mid-stream: every method equals the centralized engine and the independent
    oracle after every batch, and prefix (its replicas sleeping off their loose prefixes) runs
    fewer replicas than keyword on the same stream and, with its keyword summaries, routes fewer
    message copies."""
    from spark_fixtures import METHODS

    events = events_workload(tmp_path / "events.jsonl", dataset="geonames", num_messages=1600, k=3)
    window, batch = 1000, 100
    inputs, settings = _load(events, "hashing", window, batch, 4)
    settings.distribution.methods = METHODS
    want = centralized_by_batch(inputs, settings.window.centralized(), batch)
    pipe = LocalPipeline(tmp_path / "run", settings, inputs)
    for b, (oracle, live) in enumerate(oracle_by_batch(inputs, {"window": window}, batch)):
        pipe.step()
        for index, method in enumerate(METHODS):
            got = pipe.results[index]
            assert got == want[b], f"{method} batch {b}: {first_difference(got, want[b])}"
            oracle_check(oracle, got, live, f"{method} batch {b}")
    for index, method in enumerate(METHODS):  # the final top-k, straight from the stateful stages
        final = pipe.final_results(index)
        assert final == want[-1], f"{method} final results: {first_difference(final, want[-1])}"
    parts = {method: [m for ms in pipe.metrics for m in ms if m["stage"] == "partition" and m["pipeline"] == i]
             for i, method in enumerate(METHODS)}
    assert sum(m["sleeps"] for m in parts["prefix"]) > 0 and sum(m["wakes"] for m in parts["prefix"]) > 0
    active = {method: sum(m["active"] for m in parts[method]) for method in ("keyword", "prefix")}
    assert active["prefix"] < active["keyword"], active
    # keyword summaries: no copy for a term nobody holds (communication)
    routed = {method: sum(m["messages"] for m in parts[method]) for method in ("keyword", "prefix")}
    assert routed["prefix"] < routed["keyword"], routed


@pytest.mark.parametrize("mode", ["active", "hosted"])
def test_spark_prefix_summaries_backfill_exactly_through_lost_caches_and_tables(tmp_path, mode):
    """Keyword summaries on the adversarial stream: with ``active`` summaries the hot term stops
    being routed while its only replica sleeps, and the replica's wake reads the hot-term window
    messages back from the stream.  Exact after every batch although the engines are lost right
    after a backfill (the rebuild needs the backfill segment) and a table is rewritten between
    the router and the task (the stamp no longer matches: the task cannot trust what was routed;
    the next batch's router reads the rewritten table, the task backfills what it skipped and
    publishes its own again)."""
    from skype.spark.hosts import InProcessHosts

    window, batch = 40, 10
    inputs, settings = _load(adversarial_events(tmp_path / "events.jsonl"), "prefix", window, batch, 2)
    settings.distribution.summaries = mode
    pipe = LocalPipeline(tmp_path / "run", settings, inputs)
    tables = tmp_path / "run" / "summaries" / "prefix"
    want = centralized_by_batch(inputs, settings.window.centralized(), batch)
    routed = backfilled = 0
    backfill_batches = []
    lost = tampered = False

    def rewrite_newest_table(key, rows):
        nonlocal tampered
        newest = sorted(tables.glob("p00001-*.npy"))
        if newest and not tampered:
            np.save(newest[-1], np.zeros(0, np.int64))
            tampered = True

    for b, (oracle, live) in enumerate(oracle_by_batch(inputs, {"window": window}, batch)):
        got = pipe.step(rewrite_newest_table if b == 9 else None)
        assert got == want[b], f"batch {b}: {first_difference(got, want[b])}"
        oracle_check(oracle, got, live, f"batch {b}")
        parts = [m for m in pipe.metrics[-1] if m["stage"] == "partition"]
        routed += sum(m["messages"] for m in parts)
        backfilled += sum(m["backfill_messages"] for m in parts)
        if any(m["backfill_messages"] for m in parts):
            backfill_batches.append(b)
        if not lost and any(m["backfill_rebuilds"] for m in parts):
            InProcessHosts.clear()  # the next batch rebuilds from durable state, backfill included
            lost = True
    assert pipe.final_results() == want[-1]
    assert tampered and list(tables.glob("p*.npy"))
    if mode == "active":  # hot-term messages skipped while the replica slept, read back at its wake
        assert lost and backfilled > 0 and routed < 178, (routed, backfilled)
    else:  # every hosted record's terms stay live: only the batch routed by the rewritten table reads back
        assert backfill_batches == [10], backfill_batches


def random_summary_events(path, seed: int, num_messages: int = 240):
    """A small random stream where keyword summaries matter: 40 subscriptions of 2-3 terms out of
    24, most of them rare (each held by one or two subscriptions), k = 2, so replicas sleep on
    well-scored pairs and wake when those expire; subscribes bring terms nobody held, unsubscribes
    and re-subscribes change who holds what, all mid-stream."""
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(24)]
    weights = 1.0 / np.arange(1, 25) ** 1.1
    weights /= weights.sum()

    def terms(n):
        picked = rng.choice(24, size=n, replace=False, p=weights)
        return {vocab[i]: float(rng.uniform(0.3, 1.0)) for i in picked}

    def sub(sid):
        return {"op": "sub", "id": sid, "x": float(rng.uniform(0, 10)), "y": float(rng.uniform(0, 10)), "k": 2,
                "alpha": float(rng.choice([0.1, 0.3, 0.6])), "terms": terms(int(rng.integers(2, 4)))}

    events = [sub(sid) for sid in range(1, 31)]
    later = [sub(sid) for sid in range(31, 41)]
    live = set(range(1, 31))
    for i in range(num_messages):
        if i % 40 == 17 and later:
            events.append(later.pop())
            live.add(events[-1]["id"])
        if i % 60 == 31:
            gone = int(rng.choice(sorted(live)))
            events.append({"op": "unsub", "id": gone})
            live.discard(gone)
        if i % 80 == 55:  # a re-subscription with other terms
            again = int(rng.choice(sorted(live)))
            events += [{"op": "unsub", "id": again}, sub(again)]
        events.append({"op": "msg", "id": 10_000 + i, "x": float(rng.uniform(0, 10)), "y": float(rng.uniform(0, 10)),
                       "t": float(i), "terms": terms(int(rng.integers(1, 4)))})
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def test_spark_prefix_summaries_match_the_oracle_on_random_streams(tmp_path):
    """Several random streams (``random_summary_events``), P = 3, active summaries: exact against
    the centralized engine and the oracle after every batch; over the seeds the read-back, with
    engine rebuilds, happens, and fewer messages are routed than with summaries off."""
    routed = {"active": 0, "off": 0}
    backfilled = rebuilds = 0
    for seed in range(3):
        events = random_summary_events(tmp_path / f"events{seed}.jsonl", seed)
        for mode in ("active", "off"):
            window, batch = 60, 10
            inputs, settings = _load(events, "prefix", window, batch, 3)
            settings.distribution.summaries = mode
            pipe = LocalPipeline(tmp_path / f"run-{seed}-{mode}", settings, inputs)
            want = centralized_by_batch(inputs, settings.window.centralized(), batch)
            for b, (oracle, live) in enumerate(oracle_by_batch(inputs, {"window": window}, batch)):
                got = pipe.step()
                assert got == want[b], f"seed {seed} {mode} batch {b}: {first_difference(got, want[b])}"
                oracle_check(oracle, got, live, f"seed {seed} {mode} batch {b}")
                parts = [m for m in pipe.metrics[-1] if m["stage"] == "partition"]
                routed[mode] += sum(m["messages"] for m in parts)
                backfilled += sum(m["backfill_messages"] for m in parts)
                rebuilds += sum(m["backfill_rebuilds"] for m in parts)
            assert pipe.final_results() == want[-1], f"seed {seed} {mode} final"
    assert backfilled > 0 and rebuilds > 0 and routed["active"] < routed["off"], (routed, backfilled, rebuilds)
