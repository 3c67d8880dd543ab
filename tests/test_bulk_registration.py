"""Bulk registration (csrc/skype/_core/bulk.pyx) against the reference engine.

Subscriptions register into a full window in one bulk pass (a replay of the window through a
temporary index into bounded per-subscription heaps), at start-up and mid-stream.  Every
index x buffer combination, count and time windows, tied scores (the grid workload), several
passes (a small heap budget) and short skyband runs that force the fallback to the message
index: the top-k after registration, every result change after it and the final results must
equal the reference's.
"""

from __future__ import annotations

from functools import lru_cache

import pytest

from adversarial import BOUNDS, dense_workload
from skype import Engine, ReferenceEngine
from skype.engine import BUFFERS

WINDOWS = {"count": {"window": 150}, "time": {"window_seconds": 100.0}}
FILL = 400  # messages published before the subscriptions register (the window is full)
INDEXES = {"igpt": {"leaf_capacity": 8}, "ipt": {"leaf_capacity": 8}, "ciq": {}, "cone": {"cone": {"tail_min": 8}}}


def rows(log, offset=0):
    return sorted((a + offset, s, m, e) for a, s, m, e in zip(log.at.tolist(), log.sub.tolist(), log.msg.tolist(),
                                                             log.entered.tolist()))


def results(engine):
    return {sid: [(m.id, m.score) for m in ms] for sid, ms in engine.results()}


def workload(seed):
    return dense_workload(seed=seed, num_subs=160, num_messages=900, max_k=12)


def drive(engine, subs, msgs, *, split=None):
    """Fill, register (all, or subs[:split] then subs[split:] mid-stream), stream; returns the
    result after registration, the change rows after it, and the final results."""
    engine.publish_batch(msgs.slice(0, FILL))
    first = subs if split is None else subs.slice(0, split)
    engine.subscribe_batch(first)
    after_registration = results(engine)
    out = []
    mid = FILL + 200
    out.extend(rows(engine.publish_batch(msgs.slice(FILL, mid)), FILL))
    if split is not None:
        engine.subscribe_batch(subs.slice(split, len(subs)))
        after_registration = (after_registration, results(engine))
    out.extend(rows(engine.publish_batch(msgs.slice(mid, len(msgs))), mid))
    return after_registration, sorted(out), results(engine)


@lru_cache(maxsize=None)
def reference(seed, window, split):
    vocab, subs, msgs = workload(seed)
    ref = ReferenceEngine(bounds=BOUNDS, vocabulary=vocab, **WINDOWS[window])
    return drive(ref, subs, msgs, split=split)


def core(seed, window, split, *, budget=1 << 20, factor=2, **kw):
    vocab, subs, msgs = workload(seed)
    kw.setdefault("registration", "replay")  # regsearch.pyx: tests/test_registration_search.py
    eng = Engine(bounds=BOUNDS, vocabulary=vocab, **WINDOWS[window], **kw)
    eng._core.configure_bulk(1, budget, factor, True)
    got = drive(eng, subs, msgs, split=split)
    assert eng.check_invariants()
    return eng, got


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("index", INDEXES)
@pytest.mark.parametrize("buffer", BUFFERS)
def test_bulk_registration_into_a_full_window_equals_reference(buffer, index, window):
    # a small budget: several replay passes; factor 1: skyband runs of k + 16, some fall back
    eng, got = core(1, window, None, budget=600, factor=1, index=index, buffer=buffer, **INDEXES[index])
    assert got == reference(1, window, None)
    s = eng.stats()
    assert s["bulk_initializations"] > 0
    assert s["bulk_registration"]["passes"] > 1


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("buffer", BUFFERS)
def test_bulk_registration_mid_stream_equals_reference(buffer, window):
    eng, got = core(2, window, 60, buffer=buffer, leaf_capacity=8)
    assert got == reference(2, window, 60)
    assert eng.stats()["bulk_registration"]["subscriptions"] == 160


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("buffer", BUFFERS)
def test_micro_batched_replays_equal_reference(buffer, window):
    """The block index replays the window 7 messages at a time, each batch against the
    thresholds before it, into full and partial heaps (factor 1: some skyband runs fall back)."""
    eng, got = core(3, window, 60, budget=600, factor=1, buffer=buffer, micro_batch=7)
    assert got == reference(3, window, 60)
    assert eng.stats()["bulk_registration"]["passes"] > 1


@pytest.mark.parametrize("buffer", ["skyband", "cskyband"])
def test_short_runs_fall_back_to_the_message_index_exactly(buffer):
    # hot-term workload: long runs of equal scores, so runs of k + 16 are often too short
    vocab, subs, msgs = dense_workload(seed=3, num_subs=160, num_messages=900, vocab_size=6, zipf=2.0)
    ref = ReferenceEngine(bounds=BOUNDS, vocabulary=vocab, window=300)
    eng = Engine(bounds=BOUNDS, vocabulary=vocab, window=300, buffer=buffer, leaf_capacity=8, registration="replay")
    eng._core.configure_bulk(1, 1 << 20, 1, True)
    want = drive(ref, subs, msgs)
    assert drive(eng, subs, msgs) == want
    assert eng.stats()["bulk_fallbacks"] > 0


def test_small_batches_keep_the_per_subscription_path():
    vocab, subs, msgs = workload(4)
    eng = Engine(bounds=BOUNDS, vocabulary=vocab, window=150)
    eng.publish_batch(msgs.slice(0, FILL))
    eng.subscribe_batch(subs)  # 160 < the default cut-over
    assert eng.stats()["bulk_initializations"] == 0


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("index", INDEXES)
@pytest.mark.parametrize("buffer", BUFFERS)
def test_no_reverse_map_finds_the_holders_by_redissemination(buffer, index, window):
    # reverse_map=False: the holders of an expiring message are found by disseminating it again
    eng, got = core(2, window, 60, reverse_map=False, index=index, buffer=buffer, **INDEXES[index])
    assert got == reference(2, window, 60)
    s = eng.stats()
    assert not s["reverse_map"] and s["expiry_candidates"] > 0
    assert s["memory_bytes"]["window"] < 2 ** 20
