"""Compact buffers (docs/engine.md): the entry arena keeps every size class dense, so a slot given
back is filled by its class's last slot and the owner's record follows it, and a buffer that
loses entries moves to a smaller class once its slot is 1.5 times what it needs.  Differential against
the reference on streams whose buffers change class all the time (evicting sweeps, small and
large k, unsubscriptions, micro-batches), for every buffer kind; the arena must stay dense
(no class holds more pages than its live slots need plus one) and hold exactly one slot per
buffer that has entries."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adversarial import BOUNDS, dense_workload
from skype import Engine, ReferenceEngine
from skype.engine import BUFFERS
from skype.model import MessageBatch


def rows(log):
    return sorted(zip(log.at.tolist(), log.sub.tolist(), log.msg.tolist(), log.entered.tolist()))


def results(engine):
    return {sid: [(m.id, m.score) for m in ms] for sid, ms in engine.results()}


def run(engine, subs, msgs, *, unsubscribe_every, step=40):
    engine.subscribe_batch(subs)
    out = []
    ids = subs.ids.tolist()
    for n, start in enumerate(range(0, len(msgs), step)):
        log = engine.publish_batch(msgs.slice(start, start + step))
        out.extend((a + start, s, m, e) for a, s, m, e in rows(log))
        if unsubscribe_every and n % unsubscribe_every == 0 and len(ids) > 1:
            engine.unsubscribe(ids.pop(n % len(ids)))
    return sorted(out), results(engine)


def assert_dense(engine):
    s = engine.stats()
    arena = s["buffer_arena"]
    assert arena["loose_classes"] == 0
    assert s["loose_slots"] == 0  # every buffer that lost entries moved to a fitting class
    assert arena["live_bytes"] <= arena["page_bytes"]


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10_000), buffer=st.sampled_from(BUFFERS), max_k=st.sampled_from([1, 3, 12, 40]),
       window=st.sampled_from([25, 120]), unsubscribe_every=st.sampled_from([0, 2, 5]),
       sweep=st.booleans(), micro_batch=st.sampled_from([1, 4]))
def test_moving_slots_keep_every_buffer_exact(seed, buffer, max_k, window, unsubscribe_every, sweep, micro_batch):
    vocab, subs, msgs = dense_workload(seed=seed, num_subs=80, num_messages=500, vocab_size=6, max_k=max_k)
    if sweep:  # messages sweep across the space: buffers grow, shrink and change class
        x = np.linspace(0.0, 16.0, len(msgs))
        msgs = MessageBatch(msgs.ids, x, msgs.y, msgs.t, msgs.terms)
    want = run(ReferenceEngine(bounds=BOUNDS, vocabulary=vocab, window=window), subs, msgs,
               unsubscribe_every=unsubscribe_every)
    engine = Engine(bounds=BOUNDS, vocabulary=vocab, window=window, buffer=buffer, micro_batch=micro_batch)
    assert run(engine, subs, msgs, unsubscribe_every=unsubscribe_every) == want
    assert_dense(engine)


@pytest.mark.parametrize("buffer", BUFFERS)
def test_arena_gives_pages_back_when_buffers_shrink(buffer):
    """Large k fills big classes with several pages each; after every subscription leaves, each
    class keeps one spare page at most (a free list kept them all)."""
    vocab, subs, msgs = dense_workload(seed=5, num_subs=400, num_messages=1500, vocab_size=4, max_k=300)
    engine = Engine(bounds=BOUNDS, vocabulary=vocab, window=1000, buffer=buffer)
    engine.subscribe_batch(subs)
    engine.publish_batch(msgs)
    full = engine.stats()["buffer_arena"]
    for sid in subs.ids.tolist():
        engine.unsubscribe(sid)
    after = engine.stats()["buffer_arena"]
    assert after["live_slots"] == 0 and after["live_bytes"] == 0
    assert full["pages"] > full["paged_classes"]  # the run did fill several pages of a class
    assert after["pages"] <= after["paged_classes"] <= full["paged_classes"]
    assert after["page_bytes"] < full["page_bytes"]
    assert_dense(engine)


def test_buffer_records_are_one_cache_line_each():
    vocab, subs, msgs = dense_workload(seed=3, num_subs=300, num_messages=200, vocab_size=6)
    engine = Engine(bounds=BOUNDS, vocabulary=vocab, window=100)
    engine.subscribe_batch(subs)
    engine.publish_batch(msgs)
    s = engine.stats()
    assert s["buffer_record_bytes"] == 64 and s["buffer_records_aligned"]


def sweeping_large_k():
    vocab, subs, msgs = dense_workload(seed=9, num_subs=400, num_messages=1500, vocab_size=4, max_k=300)
    x = np.linspace(0.0, 16.0, len(msgs))
    return vocab, subs, MessageBatch(msgs.ids, x, msgs.y, msgs.t, msgs.terms)


@lru_cache(maxsize=None)
def sweeping_large_k_reference():
    vocab, subs, msgs = sweeping_large_k()
    return run(ReferenceEngine(bounds=BOUNDS, vocabulary=vocab, window=1000), subs, msgs, unsubscribe_every=7)


@pytest.mark.parametrize("buffer", BUFFERS)
def test_classes_on_huge_pages_keep_every_buffer_exact(buffer):
    """A class that fills its small pages moves to 2 MB pages with its slots' numbers (arena.pyx);
    here after one page, so that many classes move while buffers keep moving between them (the
    reference runs once for the four buffer kinds)."""
    from skype._core.arena import set_huge_after

    vocab, subs, msgs = sweeping_large_k()
    want = sweeping_large_k_reference()
    set_huge_after(1)
    try:
        engine = Engine(bounds=BOUNDS, vocabulary=vocab, window=1000, buffer=buffer)
    finally:
        set_huge_after(8)
    assert run(engine, subs, msgs, unsubscribe_every=7) == want
    assert engine.stats()["buffer_arena"]["huge_classes"] > 0
    assert_dense(engine)
    full = engine.stats()["buffer_arena"]
    for sid in engine.subscription_ids().tolist():
        engine.unsubscribe(sid)
    after = engine.stats()["buffer_arena"]
    assert after["live_slots"] == 0 and after["pages"] <= after["paged_classes"]  # one spare page a class
    assert after["page_bytes"] <= full["page_bytes"]
    assert_dense(engine)
