"""The compact window store (csrc/skype/_core/window.pyx): a term ring of any capacity that wraps
and relays out, an open-addressing id set for duplicate detection, and extra-holder lists in a
pool of chunks allocated on demand.  Streams of messages with many terms pass the term ring's
start many times over, grow it and the message ring (which rebuilds the id set); after every batch the store's
invariants hold, its duplicate detection equals a Python set of the window's ids, a republished
window id is refused (E019), and the engine's change logs and results equal the reference."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from skype import Engine, ReferenceEngine
from skype.errors import InputError
from skype.model import Bounds, MessageBatch, SubscriptionBatch, TermMatrix
from skype.text import Vocabulary

BOUNDS = Bounds(0.0, 0.0, 16.0, 16.0)
VOCAB = 400


def window_store(engine):
    core = engine._core
    found = [o for o in gc.get_referents(core) if type(o).__name__ == "WindowStore"]
    assert len(found) == 1
    return found[0]


def vocabulary():
    return Vocabulary.from_document_frequencies({f"w{i}": 1 + i for i in range(VOCAB)}, 10 * VOCAB)


def random_terms(rng, n, max_terms):
    rows = []
    for _ in range(n):
        m = int(rng.integers(1, max_terms + 1))
        ids = np.sort(rng.choice(VOCAB, size=m, replace=False)).astype(np.int64)
        w = rng.random(m) + 0.1
        rows.append((ids, w / np.linalg.norm(w)))
    return TermMatrix.from_rows(rows)


def stream(seed, n, max_terms):
    rng = np.random.default_rng(seed)
    ids = rng.choice(2**40, size=n, replace=False).astype(np.int64) - 2**39   # sparse, some negative
    x, y = rng.random(n) * 16, rng.random(n) * 16
    t = np.cumsum(rng.exponential(1.0, n))
    return MessageBatch(ids, x, y, t, random_terms(rng, n, max_terms))


def subscriptions(seed, n):
    rng = np.random.default_rng(seed + 1)
    return SubscriptionBatch(np.arange(n, dtype=np.int64), rng.random(n) * 16, rng.random(n) * 16,
                             rng.integers(1, 6, n).astype(np.int64), rng.random(n), random_terms(rng, n, 3))


def check_window(engine, store, published, window, msgs):
    store.check_invariants()
    live = published[-window:] if window else []
    assert store.ext_ids().tolist() == live
    for i, (ids, w) in zip(range(len(published) - len(live), len(published)), store.term_rows()):
        want_ids, want_w = msgs.terms.row(i)
        assert ids.tolist() == want_ids.tolist() and w.tolist() == want_w.tolist()
    gone = published[: max(0, len(published) - window)][-50:]
    probe = np.array(live[-50:] + gone + [2**62, -(2**62)], dtype=np.int64)
    assert store.contains_ids(probe).tolist() == [int(i) in set(live) for i in probe]


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10_000), window=st.integers(1, 1500), max_terms=st.sampled_from([1, 40, 200]),
       batch=st.sampled_from([1, 37, 400]))
def test_window_store_invariants_and_duplicates(seed, window, max_terms, batch):
    msgs = stream(seed, 3000, max_terms)
    engine = Engine(bounds=BOUNDS, vocabulary=vocabulary(), window=window)
    engine.subscribe_batch(subscriptions(seed, 20))
    store = window_store(engine)
    published: list[int] = []
    for start in range(0, len(msgs), batch):
        part = msgs.slice(start, start + batch)
        engine.publish_batch(part)
        published.extend(part.ids.tolist())
        check_window(engine, store, published, window, msgs)
    dup = published[-1]
    with pytest.raises(InputError) as err:
        engine.publish_batch(MessageBatch(np.array([dup]), np.array([1.0]), np.array([1.0]),
                                          np.array([msgs.t[-1] + 1]), random_terms(np.random.default_rng(0), 1, 2)))
    assert err.value.code == "E019"


@pytest.mark.parametrize("buffer", ["cskyband", "exact", "kmax"])
@pytest.mark.parametrize("window", [{"window": 150}, {"window_seconds": 90.0}])
def test_window_store_engine_equals_reference(buffer, window):
    msgs = stream(7, 1200, 60)
    subs = subscriptions(7, 60)
    logs = []
    results = []
    for engine in (Engine(bounds=BOUNDS, vocabulary=vocabulary(), buffer=buffer, **window),
                   ReferenceEngine(bounds=BOUNDS, vocabulary=vocabulary(), **window)):
        engine.subscribe_batch(subs)
        rows = []
        for start in range(0, len(msgs), 50):
            log = engine.publish_batch(msgs.slice(start, start + 50))
            rows.extend(sorted(zip((log.at + start).tolist(), log.sub.tolist(), log.msg.tolist(),
                                   log.entered.tolist())))
        logs.append(rows)
        results.append({sid: [(m.id, round(m.score, 12)) for m in ms] for sid, ms in engine.results()})
    assert logs[0] == logs[1]
    assert results[0] == results[1]


@pytest.mark.parametrize("seed, window, lo, hi", [(0, 55, 300, 300), (0, 60, 250, 300), (1, 64, 250, 300),
                                                    (2, 64, 250, 300), (3, 20, 1, 300)])
def test_term_ring_wraps_keep_every_live_block(seed, window, lo, hi):
    """Windows of large messages that fill the initial term ring (16,384 terms) to within a
    block: the ring wraps with the oldest block near its start, and relays out; after every
    arrival each live message's terms must still be its own."""
    rng = np.random.default_rng(seed)
    base = stream(seed, 600, 1)
    rows = []
    for _ in range(len(base)):
        m = int(rng.integers(lo, hi + 1))
        rows.append((np.sort(rng.choice(VOCAB, size=m, replace=False)).astype(np.int64), np.full(m, m ** -0.5)))
    msgs = MessageBatch(base.ids, base.x, base.y, base.t, TermMatrix.from_rows(rows))
    engine = Engine(bounds=BOUNDS, vocabulary=vocabulary(), window=window)
    store = window_store(engine)
    for i in range(len(msgs)):
        engine.publish_batch(msgs.slice(i, i + 1))
        first = max(0, i + 1 - window)
        for j, (ids, w) in zip(range(first, i + 1), store.term_rows()):
            want_ids, want_w = msgs.terms.row(j)
            assert ids.tolist() == want_ids.tolist() and w.tolist() == want_w.tolist()
    store.check_invariants()


def test_holder_ring_grows_in_place_while_wrapped():
    """A few subscriptions sharing one term (k = 300: they admit most arrivals) run until the
    admission holders have wrapped the holder ring's initial 16,384 slots; then many more join,
    so the live holders pass the ring's capacity while its head is far from slot 0: the ring
    grows in place (mremap, the wrapped positions moved to the new upper half) twice, and the
    expiries that read the moved holders keep the engine's change logs and results equal to those
    of an engine without the reverse map (its expiries find their holders by disseminating the
    expiring message again: no holder ring; the reference at k = 300 costs minutes)."""
    rng = np.random.default_rng(5)
    n, nsubs, window, first = 1500, 110, 600, 25
    rows = [(np.array([0, int(rng.integers(1, VOCAB))]), np.array([0.9, 0.19 ** 0.5])) for _ in range(n)]
    msgs = MessageBatch(np.arange(n, dtype=np.int64), rng.random(n) * 16, rng.random(n) * 16,
                        np.arange(n, dtype=np.float64), TermMatrix.from_rows(rows))
    subs = SubscriptionBatch(np.arange(nsubs, dtype=np.int64), rng.random(nsubs) * 16, rng.random(nsubs) * 16,
                             np.full(nsubs, 300, dtype=np.int64), rng.random(nsubs) * 0.2,
                             TermMatrix.from_rows([(np.array([0]), np.array([1.0]))] * nsubs))
    logs, results, sizes = [], [], []
    for reverse_map in (True, False):
        engine = Engine(bounds=BOUNDS, vocabulary=vocabulary(), window=window, reverse_map=reverse_map)
        engine.subscribe_batch(subs.slice(0, first))
        rows_out = []
        for start in range(0, n, 100):
            if start == 900:
                engine.subscribe_batch(subs.slice(first, nsubs))
            log = engine.publish_batch(msgs.slice(start, start + 100))
            rows_out.extend(sorted(zip((log.at + start).tolist(), log.sub.tolist(), log.msg.tolist(),
                                       log.entered.tolist())))
            if reverse_map:
                sizes.append(window_store(engine).memory_parts()["holders"])
        logs.append(rows_out)
        results.append({sid: [(m.id, round(m.score, 12)) for m in ms] for sid, ms in engine.results()})
    assert sizes[8] == 16384 * 4 and max(sizes) == 4 * 16384 * 4     # grew twice, both after wrapping
    assert logs[0] == logs[1]
    assert results[0] == results[1]


@pytest.mark.parametrize("buffer", ["cskyband", "kmax"])
def test_extra_holder_chunks_recycled_and_pages_handed_back(buffer):
    """2,100 subscriptions registered in bulk into a full window of 60 give every message a
    chain of extra-holder chunks (15 holders a chunk); the stream then expires them all, with the
    pool sweeping its empty pages after every chunk freed (the sweep's threshold set to a few
    bytes), while re-evaluations take chunks from the free list (some on pages handed back, which
    read as zeros).  Change logs and results equal the reference's chunk by chunk, every holder
    an expiry visits still holds its message, and the pool's resident pages fall once the
    registration's messages have left."""
    from adversarial import BOUNDS as DENSE_BOUNDS, dense_workload
    from skype._core import window as window_module

    def rows(log):
        return sorted(zip(log.at.tolist(), log.sub.tolist(), log.msg.tolist(), log.entered.tolist()))

    vocab, subs, msgs = dense_workload(seed=11, num_subs=2100, num_messages=400, max_k=3)
    ref = ReferenceEngine(bounds=DENSE_BOUNDS, vocabulary=vocab, window=60)
    eng = Engine(bounds=DENSE_BOUNDS, vocabulary=vocab, window=60, buffer=buffer)
    eng._core.find_registered_holders(False)        # the registration's holders kept in the pool
    window_module.set_extra_sweep_bytes(8)
    try:
        for e in (ref, eng):
            e.publish_batch(msgs.slice(0, 60))
            e.subscribe_batch(subs)
        store = window_store(eng)
        registered = store.memory_parts()["extra_holders"]
        sweeps = window_module.extra_list_trims()
        for start in range(60, len(msgs), 40):
            chunk = msgs.slice(start, start + 40)
            assert rows(eng.publish_batch(chunk)) == rows(ref.publish_batch(chunk))
            store.check_invariants()
        assert window_module.extra_list_trims() > sweeps
        assert store.memory_parts()["extra_holders"] < registered / 2
    finally:
        window_module.set_extra_sweep_bytes(32 << 20)
    assert {s: [(m.id, m.score) for m in ms] for s, ms in eng.results()} == \
        {s: [(m.id, m.score) for m in ms] for s, ms in ref.results()}
    c = eng.stats()["phases"]["counts"]
    assert c["holders_visited"] == c["holders_found"] > 0


@pytest.mark.parametrize("buffer", ["cskyband", "exact", "kmax"])
def test_bulk_registration_keeps_no_holders_for_the_window(buffer):
    """By default a bulk registration stores no holder for the messages already in the window
    (the pool stays as an empty engine's); each of those messages, when it
    expires, finds its holders by a dissemination (counted as expiry candidates), the messages
    that arrive later keep theirs exactly, and the change logs and results equal the reference's
    and those of an engine that kept the registration's holders."""
    from adversarial import BOUNDS as DENSE_BOUNDS, dense_workload

    def rows(log):
        return sorted(zip(log.at.tolist(), log.sub.tolist(), log.msg.tolist(), log.entered.tolist()))

    vocab, subs, msgs = dense_workload(seed=5, num_subs=2100, num_messages=300, max_k=3)
    ref = ReferenceEngine(bounds=DENSE_BOUNDS, vocabulary=vocab, window=60)
    found = Engine(bounds=DENSE_BOUNDS, vocabulary=vocab, window=60, buffer=buffer)
    kept = Engine(bounds=DENSE_BOUNDS, vocabulary=vocab, window=60, buffer=buffer)
    kept._core.find_registered_holders(False)
    for e in (ref, found, kept):
        e.publish_batch(msgs.slice(0, 60))
        e.subscribe_batch(subs)
    assert found.stats()["bulk_registration"]["subscriptions"] == 2100
    empty = window_store(Engine(bounds=DENSE_BOUNDS, vocabulary=vocab, window=60, buffer=buffer))
    pool = [window_store(e).memory_parts()["extra_holders"] for e in (found, kept)]
    assert pool[0] == empty.memory_parts()["extra_holders"] < pool[1]
    for start in range(60, len(msgs), 30):
        chunk = msgs.slice(start, start + 30)
        want = rows(ref.publish_batch(chunk))
        assert rows(found.publish_batch(chunk)) == want
        assert rows(kept.publish_batch(chunk)) == want
        # the entries keep no holder handle (drops by message and sid): the reverse map stays
        # the buffers', the messages below the registration's mark left out
        assert found._core.reverse_map_mismatches() == kept._core.reverse_map_mismatches() == 0
    for e in (found, kept):
        assert {s: [(m.id, m.score) for m in ms] for s, ms in e.results()} == \
            {s: [(m.id, m.score) for m in ms] for s, ms in ref.results()}
    c_found, c_kept = (e.stats()["phases"]["counts"] for e in (found, kept))
    assert c_found["holders_visited"] == c_found["holders_found"] > 0
    assert found.stats()["expiry_candidates"] > kept.stats()["expiry_candidates"]
