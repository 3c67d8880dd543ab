"""The admission's guide (bufstore.pxd, ``guide_start``): a buffer record keeps every eighth
entry's score rounded down to a float, and an admission starts its search (and its prefetch)
after the last guide point scoring above it.  Differential against the reference and against
engines that search whole buffers, for every buffer kind, on streams that keep buffers past the
guide's last point (k up to 60), tie scores exactly (grid points, republished messages) and
evict heavily (rising scores); the guide must never be contradicted by the entries and must
shorten the admissions' reads without changing a rank."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest

from adversarial import BOUNDS, dense_workload
from skype import Engine, ReferenceEngine
from skype._core.buffers import set_admission_guide
from skype.engine import BUFFERS
from skype.model import MessageBatch


def rows(log):
    return sorted(zip(log.at.tolist(), log.sub.tolist(), log.msg.tolist(), log.entered.tolist()))


def results(engine):
    return {sid: [(m.id, m.score) for m in ms] for sid, ms in engine.results()}


def run(engine, subs, msgs, step=60):
    engine.subscribe_batch(subs)
    out = []
    for start in range(0, len(msgs), step):
        out.extend((a + start, s, m, e) for a, s, m, e in rows(engine.publish_batch(msgs.slice(start, start + step))))
    return sorted(out), results(engine)


def tied_workload(seed: int, rising: bool):
    vocab, subs, msgs = dense_workload(seed=seed, num_subs=80, num_messages=800, vocab_size=5, max_k=60)
    x = np.round(msgs.x)                                   # grid points: exact ties
    if rising:
        x = np.sort(x)
    x[1::7] = x[::7][: len(x[1::7])]                       # republished places
    return vocab, subs, MessageBatch(msgs.ids, x, msgs.y, msgs.t, msgs.terms)


@lru_cache(maxsize=None)
def reference(rising: bool):
    vocab, subs, msgs = tied_workload(seed=7 + rising, rising=rising)
    return run(ReferenceEngine(bounds=BOUNDS, vocabulary=vocab, window=200), subs, msgs)


@pytest.mark.parametrize("rising", [False, True])
@pytest.mark.parametrize("buffer", BUFFERS)
def test_guided_admissions_equal_the_reference_and_whole_searches(buffer, rising):
    vocab, subs, msgs = tied_workload(seed=7 + rising, rising=rising)
    want = reference(rising)
    engines = {}
    try:
        for guided in (True, False):
            set_admission_guide(guided)
            engines[guided] = Engine(bounds=BOUNDS, vocabulary=vocab, window=200, buffer=buffer)
    finally:
        set_admission_guide(True)
    for engine in engines.values():
        assert run(engine, subs, msgs) == want
    on, off = (engines[g].stats()["admission_work"] for g in (True, False))
    assert on["guided"] and not off["guided"]
    assert on["guide_misses"] == 0 == off["guide_misses"]
    assert on["ranks"] == off["ranks"] and on["sizes"] == off["sizes"] and on["evicted"] == off["evicted"]
    assert off["span_entries"] == off["sizes"]             # a whole search reads every entry
    assert on["span_entries"] < off["span_entries"]        # the guide skipped some
    # whatever it skipped ranked above the insertion
    assert on["sizes"] - on["span_entries"] <= on["ranks"]
