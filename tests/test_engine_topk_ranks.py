"""Differential tests of ``topk_ranks`` (where messages stand in subscriptions' top-k).

The core engine's verb (one C loop over the pairs) against the generic one of
:class:`~skype.api.EngineBase` on the reference engine, and both against a brute-force reading
of each ``topk``: after every batch of an adversarial stream, for the pairs of every result
change of the batch (in their top-k or not), pairs of messages still in the window or never
published, repeated pairs and pairs in no particular order, on every index and buffer.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from adversarial import BOUNDS, dense_workload
from skype import Engine, InputError, ReferenceEngine
from skype.engine import BUFFERS, INDEXES


def brute_ranks(engine, subs: np.ndarray, msgs: np.ndarray) -> list[tuple[int, float]]:
    out = []
    for sid, mid in zip(subs.tolist(), msgs.tolist()):
        top = [(m.id, m.score) for m in engine.topk(sid)]
        at = next((i for i, (m, _) in enumerate(top) if m == mid), -1)
        out.append((at, top[at][1] if at >= 0 else math.nan))
    return out


def same(got: tuple[np.ndarray, np.ndarray], want: list[tuple[int, float]]) -> bool:
    rank, score = got
    if rank.dtype != np.int64 or score.dtype != np.float64 or len(rank) != len(want):
        return False
    for r, s, (wr, ws) in zip(rank.tolist(), score.tolist(), want):
        if r != wr or not (s == ws or (math.isnan(s) and math.isnan(ws))):
            return False
    return True


def pairs_of(log, rng: np.random.Generator, sub_ids: np.ndarray, window_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The batch's change pairs (sorted by sub, then message, as the service asks) followed by
    random pairs in no order: window messages, unknown message ids, repeats."""
    order = np.lexsort((log.msg, log.sub))
    subs, msgs = [log.sub[order]], [log.msg[order]]
    n = 40
    subs.append(rng.choice(sub_ids, n))
    msgs.append(rng.choice(window_ids, n) if len(window_ids) else rng.integers(0, 10, n))
    subs.append(rng.choice(sub_ids, 5))
    msgs.append(np.full(5, 10**12, np.int64))  # never published
    return np.concatenate(subs).astype(np.int64), np.concatenate(msgs).astype(np.int64)


@settings(max_examples=16, deadline=None)
@given(seed=st.integers(0, 2**16), index=st.sampled_from(INDEXES), buffer=st.sampled_from(BUFFERS),
       batch=st.sampled_from([1, 7, 64]), time_window=st.booleans())
def test_core_and_generic_topk_ranks_equal_brute_force(seed, index, buffer, batch, time_window):
    vocab, subs, msgs = dense_workload(seed, num_subs=80, num_messages=300, vocab_size=12)
    window = {"window_seconds": 25.0} if time_window else {"window": 40}
    core = Engine(bounds=BOUNDS, vocabulary=vocab, index=index, buffer=buffer, **window)
    ref = ReferenceEngine(bounds=BOUNDS, vocabulary=vocab, **window)
    rng = np.random.default_rng(seed)
    for e in (core, ref):
        e.subscribe_batch(subs)
    changes = 0
    for start in range(0, len(msgs), batch):
        chunk = msgs.slice(start, min(start + batch, len(msgs)))
        log = core.publish_batch(chunk)
        ref.publish_batch(chunk)
        changes += len(log)
        p_subs, p_msgs = pairs_of(log, rng, subs.ids, msgs.ids[max(0, start - 40):start + batch])
        want = brute_ranks(ref, p_subs, p_msgs)
        assert same(core.topk_ranks(p_subs, p_msgs), want)
        assert same(ref.topk_ranks(p_subs, p_msgs), want)
    assert changes > 0


def test_topk_ranks_refuses_unknown_subscriptions_and_ragged_pairs():
    vocab, subs, msgs = dense_workload(5, num_subs=20, num_messages=50)
    for e in (Engine(bounds=BOUNDS, vocabulary=vocab, window=30),
              ReferenceEngine(bounds=BOUNDS, vocabulary=vocab, window=30)):
        e.subscribe_batch(subs)
        e.publish_batch(msgs)
        with pytest.raises(InputError) as err:
            e.topk_ranks(np.array([int(subs.ids[0]), 123456789]), np.array([1, 2]))
        assert err.value.code == "E020" and err.value.record_id == 123456789
        with pytest.raises(InputError) as err:
            e.topk_ranks(np.array([int(subs.ids[0])]), np.array([1, 2]))
        assert err.value.code == "E023"
        rank, score = e.topk_ranks(np.zeros(0, np.int64), np.zeros(0, np.int64))
        assert rank.dtype == np.int64 and score.dtype == np.float64 and len(rank) == len(score) == 0
