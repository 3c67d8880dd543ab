"""The message index's per-term lists (csrc/skype/_core/termlists.pyx) when they are long: with a
vocabulary of a few terms every list holds thousands of window messages, so it passes the length
from which its storage grows by a quarter, and its dead prefix is dropped a chunk at a time many
times over.  Subscriptions arrive in small batches between the message batches, so each one is
filled from the lists in a different compacted state, and the engine's change logs and results
equal the reference's, for each buffer that reads the lists."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from skype import Engine, ReferenceEngine
from skype.model import Bounds, MessageBatch, SubscriptionBatch, TermMatrix
from skype.text import Vocabulary

BOUNDS = Bounds(0.0, 0.0, 10.0, 10.0)
VOCAB = 3


def terms(rng, n):
    rows = []
    for _ in range(n):
        ids = np.sort(rng.choice(VOCAB, size=int(rng.integers(1, VOCAB + 1)), replace=False)).astype(np.int64)
        w = rng.random(ids.size) + 0.1
        rows.append((ids, w / np.linalg.norm(w)))
    return TermMatrix.from_rows(rows)


@pytest.mark.parametrize("buffer", ["cskyband", "kmax"])
def test_long_lists_equal_reference(buffer):
    rng = np.random.default_rng(3)
    n, window = 9000, 2500
    msgs = MessageBatch(np.arange(n, dtype=np.int64), rng.random(n) * 10, rng.random(n) * 10,
                        np.arange(n, dtype=np.float64), terms(rng, n))
    nsubs = 4 * ((n - window) // 250)
    subs = SubscriptionBatch(np.arange(nsubs, dtype=np.int64), rng.random(nsubs) * 10, rng.random(nsubs) * 10,
                             rng.integers(20, 60, nsubs).astype(np.int64), rng.random(nsubs), terms(rng, nsubs))
    vocabulary = Vocabulary.from_document_frequencies({f"w{i}": 1 + i for i in range(VOCAB)}, 10 * VOCAB)
    logs, results = [], []
    for engine in (Engine(bounds=BOUNDS, vocabulary=vocabulary, buffer=buffer, message_index="lists",
                          window=window),
                   ReferenceEngine(bounds=BOUNDS, vocabulary=vocabulary, window=window)):
        engine.publish_batch(msgs.slice(0, window))
        rows = []
        for i, start in enumerate(range(window, n, 250)):
            engine.subscribe_batch(subs.slice(4 * i, 4 * i + 4))
            log = engine.publish_batch(msgs.slice(start, start + 250))
            rows.extend(sorted(zip((log.at + start).tolist(), log.sub.tolist(), log.msg.tolist(),
                                   log.entered.tolist())))
        logs.append(rows)
        results.append({sid: [(m.id, round(m.score, 12)) for m in ms] for sid, ms in engine.results()})
    assert logs[0] == logs[1]
    assert results[0] == results[1]
    assert len(logs[0]) > 100


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000),
       box=st.sampled_from([(0.0, 0.0, 10.0, 10.0), (-3.7, 1.1, 5.3, 1.1000001), (-180.0, -90.0, 180.0, 90.0),
                            (2.0, 2.0, 2.000001, 2.000001)]),
       buffer=st.sampled_from(["cskyband", "exact"]))
def test_cell_locations_at_cell_edges_equal_reference(seed, box, buffer):
    """The lists store a location as its cell in a 65,536 x 65,536 grid over the bounds, and bound
    an entry by the distance to its (slightly widened) cell.  Messages placed on cell edges, on the
    bounds' edges and corners, and in flat or tiny bounds, with subscriptions on the same
    spots: the change logs and results equal the reference's, so no bound fell below a score."""
    rng = np.random.default_rng(seed)
    bounds = Bounds(*box)
    n, window, nsubs = 900, 300, 40

    def spots(count):
        cells = rng.integers(0, 65537, count)
        xs = bounds.minx + cells * ((bounds.maxx - bounds.minx) / 65536)
        cells = rng.integers(0, 65537, count)
        ys = bounds.miny + cells * ((bounds.maxy - bounds.miny) / 65536)
        edge = rng.random(count) < 0.3
        xs[edge] = rng.choice([bounds.minx, bounds.maxx], int(edge.sum()))
        ys[edge] = rng.choice([bounds.miny, bounds.maxy], int(edge.sum()))
        near = rng.random(count) < 0.3            # a neighbour of the first spot, a few cells away
        xs[near] = np.clip(xs[0] + rng.integers(-3, 4, int(near.sum())) * (bounds.maxx - bounds.minx) / 65536,
                           bounds.minx, bounds.maxx)
        return np.clip(xs, bounds.minx, bounds.maxx), np.clip(ys, bounds.miny, bounds.maxy)

    mx, my = spots(n)
    msgs = MessageBatch(np.arange(n, dtype=np.int64), mx, my, np.arange(n, dtype=np.float64), terms(rng, n))
    sx, sy = spots(nsubs)
    subs = SubscriptionBatch(np.arange(nsubs, dtype=np.int64), sx, sy, rng.integers(1, 8, nsubs).astype(np.int64),
                             rng.random(nsubs), terms(rng, nsubs))
    vocabulary = Vocabulary.from_document_frequencies({f"w{i}": 1 + i for i in range(VOCAB)}, 10 * VOCAB)
    logs, results = [], []
    for engine in (Engine(bounds=bounds, vocabulary=vocabulary, buffer=buffer, message_index="lists",
                          window=window),
                   ReferenceEngine(bounds=bounds, vocabulary=vocabulary, window=window)):
        engine.publish_batch(msgs.slice(0, window))
        rows = []
        for i, start in enumerate(range(window, n, 150)):
            engine.subscribe_batch(subs.slice(10 * i, 10 * i + 10))
            log = engine.publish_batch(msgs.slice(start, start + 150))
            rows.extend(sorted(zip((log.at + start).tolist(), log.sub.tolist(), log.msg.tolist(),
                                   log.entered.tolist())))
        logs.append(rows)
        results.append({sid: [(m.id, round(m.score, 12)) for m in ms] for sid, ms in engine.results()})
    assert logs[0] == logs[1]
    assert results[0] == results[1]
