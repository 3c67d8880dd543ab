"""The keyword-first block index (index="blocks") against the reference: each rule alone and
together, tiny blocks and many bands (constant rebuilds), mid-stream churn with slot reuse, and
the structural invariants (locators, headers bounding their entries)."""

from __future__ import annotations

import numpy as np
import pytest

from adversarial import BOUNDS, dense_workload
from skype import Engine, ReferenceEngine
from skype.engine import BLOCK_RULES, BUFFERS
from test_engine import results, rows, run_core

FIRED = {"band": "bands_skipped", "block": "blocks_skipped", "entry": "entry_pruned"}


@pytest.mark.parametrize("rule", ["block", "entry"])
@pytest.mark.parametrize("workload", ["grid", "continuous", "hot-term"])
def test_blockindex_each_rule_alone_is_exact(rule, workload):
    only = {r: r == rule for r in BLOCK_RULES}
    eng = run_core(workload, "count", index="blocks", buffer="exact", pruning=only, block_size=4, bands=3)
    d = eng.stats()["dissemination"]
    assert d[FIRED[rule]] > 0, f"rule {rule} never fired: the test would not catch an unsafe rule"


def spatial_clusters(seed: int):
    """Two far-apart clusters of near-spatial subscriptions (alpha in [0.85, 0.9) in one, [0.95,
    1) in the other: different bands of ten) and a stream that alternates between the clusters:
    a message near one cluster cannot reach the thresholds of the other, so whole bands and
    blocks are skipped, while the near ones qualify."""
    from skype import Message, Subscription

    rng = np.random.default_rng(seed)
    subs, msgs = [], []
    for i in range(120):
        cx, cy = (-150.0, -70.0) if i % 2 else (150.0, 70.0)
        terms = {f"t{j}": float(rng.uniform(0.2, 1.0)) for j in rng.choice(4, size=int(rng.integers(1, 4)), replace=False)}
        subs.append(Subscription(i, cx + rng.normal(0, 1), cy + rng.normal(0, 1), k=int(rng.integers(1, 4)),
                                 alpha=float(rng.uniform(0.85, 0.9) if i % 2 else rng.uniform(0.95, 1.0)),
                                 terms=terms))
    for i in range(600):
        cx, cy = (-150.0, -70.0) if (i // 20) % 2 else (150.0, 70.0)
        terms = {f"t{j}": float(rng.uniform(0.2, 1.0)) for j in rng.choice(4, size=int(rng.integers(1, 4)), replace=False)}
        msgs.append(Message(i, cx + rng.normal(0, 1), cy + rng.normal(0, 1), terms=terms))
    return subs, msgs


@pytest.mark.parametrize("rule", BLOCK_RULES)
def test_blockindex_each_rule_alone_skips_far_clusters_exactly(rule):
    subs, msgs = spatial_clusters(5)
    ref = ReferenceEngine(window=50)
    eng = Engine(window=50, index="blocks", buffer="exact", block_size=4, bands=10, pruning={r: r == rule for r in BLOCK_RULES})
    for e in (ref, eng):
        for s in subs:
            e.subscribe(s)
    for m in msgs:
        assert sorted(map(repr, eng.publish(m))) == sorted(map(repr, ref.publish(m)))
    assert results(eng) == results(ref)
    assert eng.check_invariants()
    d = eng.stats()["dissemination"]
    assert d[FIRED[rule]] > 0, f"rule {rule} never fired: the test would not catch an unsafe rule"


def test_blockindex_without_any_rule_is_exact():
    eng = run_core("continuous", "count", index="blocks", buffer="exact", pruning={r: False for r in BLOCK_RULES})
    d = eng.stats()["dissemination"]
    assert d["bands_skipped"] == d["blocks_skipped"] == d["entry_pruned"] == 0
    assert d["revisits_skipped"] > 0  # multi-term subscriptions are met once per message


@pytest.mark.parametrize("block_size,bands", [(4, 1), (5, 7), (64, 64), (1024, 2)])
@pytest.mark.parametrize("window", ["count", "time"])
def test_blockindex_layouts_are_exact(block_size, bands, window):
    run_core("crowded", window, index="blocks", buffer="cskyband", block_size=block_size, bands=bands,
             column_test=block_size < 64)


@pytest.mark.parametrize("buffer", BUFFERS)
def test_blockindex_churn_with_slot_reuse(buffer):  # with the column mirror, kept in step
    """Subscribe and unsubscribe mid-stream, reusing ids and slots, across band rebuilds."""
    vocab, subs, msgs = dense_workload(seed=11, num_subs=300, num_messages=900, vocab_size=8)
    ref = ReferenceEngine(bounds=BOUNDS, vocabulary=vocab, window=70)
    eng = Engine(bounds=BOUNDS, vocabulary=vocab, window=70, index="blocks", buffer=buffer, block_size=4, bands=2, column_test=True)
    for e in (ref, eng):
        e.subscribe_batch(subs.slice(0, 150))
    rng = np.random.default_rng(3)
    live = set(subs.ids[:150].tolist())
    gone: list[int] = []
    for start in range(0, len(msgs), 30):
        chunk = msgs.slice(start, start + 30)
        assert rows(eng.publish_batch(chunk)) == rows(ref.publish_batch(chunk))
        for sid in rng.choice(sorted(live), size=8, replace=False):
            for e in (ref, eng):
                e.unsubscribe(int(sid))
            live.discard(int(sid))
            gone.append(int(sid))
        back = [gone.pop(0) for _ in range(min(6, len(gone)))]  # the same ids come back
        rows_back = [int(np.flatnonzero(subs.ids == sid)[0]) for sid in back]
        for row in rows_back:
            one = subs.slice(row, row + 1)
            for e in (ref, eng):
                e.subscribe_batch(one)
            live.add(int(one.ids[0]))
        assert results(eng) == results(ref)
        assert eng.check_invariants()
    assert eng._index.structure()["rebuilds"] > 0


def test_blockindex_counters_and_structure():
    eng = run_core("hot-term", "time", index="blocks", buffer="cskyband", block_size=8)
    d = eng.stats()["dissemination"]
    assert d["candidates"] >= d["admitted"] > 0
    assert d["blocks_visited"] > 0
    s = eng._index.structure()
    assert s["postings"] > 0 and s["blocks"] >= s["bands"] > 0
    assert s["block_size"] == 8 and s["alpha_bands"] == 8


@pytest.mark.parametrize("window", ["count", "time"])
def test_blockindex_with_the_column_test_is_exact(window):
    """The entry rule over the column mirror first (the mirror kept in step through appends,
    rebuilds, threshold changes and removals, which check_invariants compares) gives the same
    answers and prunes the same postings."""
    with_columns = run_core("hot-term", window, index="blocks", buffer="cskyband", block_size=8, column_test=True)
    without = run_core("hot-term", window, index="blocks", buffer="cskyband", block_size=8)
    on, off = with_columns.stats()["dissemination"], without.stats()["dissemination"]
    assert on["candidates"] == off["candidates"] and on["admitted"] == off["admitted"]
