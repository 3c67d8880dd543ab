"""A long randomized soak: every buffer kind and index against the reference and against each
other, on random adversarial workloads with random engine parameters, subscribes and
unsubscribes mid-stream, count and time windows.  Time-boxed (SOAK_SECONDS, default 90 s);
SOAK_SEED picks another deterministic sequence of rounds."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from adversarial import BOUNDS, dense_workload
from skype import Engine, ReferenceEngine
from skype.engine import BUFFERS, INDEXES
from test_engine import check_index

SOAK_SECONDS = float(os.environ.get("SOAK_SECONDS", "45"))
SOAK_SEED = int(os.environ.get("SOAK_SEED", "2026"))


def rows(log):
    return sorted(zip(log.at.tolist(), log.sub.tolist(), log.msg.tolist(), log.entered.tolist()))


def results(engine):
    return {sid: [(m.id, m.score) for m in ms] for sid, ms in engine.results()}


def random_engine_params(rng):
    return dict(
        index=str(rng.choice(INDEXES)),
        leaf_capacity=int(rng.choice([1, 2, 5, 30])),
        block_size=int(rng.choice([4, 7, 64])),
        bands=int(rng.choice([1, 3, 8, 20])),
        groups=int(rng.choice([1, 3, 10, 40])),
        kmax=int(rng.choice([1, 5, 20])),
        skyband_ratio=float(rng.choice([0.5, 0.8, 1.0])),
        cost={"query_cost": float(rng.choice([0.5, 10.0, 500.0])), "refresh_factor": float(rng.choice([1.1, 3.0])),
              "barrier": str(rng.choice(["stationary", "window", "factor"]))},
        ciq={"budget": int(rng.choice([1, 4, 30])), "max_depth": int(rng.choice([2, 8]))},
        message_index=str(rng.choice(["lists", "quadtree"])),
        micro_batch=int(rng.choice([1, 1, 4, 33])),
        message_leaf_capacity=int(rng.choice([2, 8, 64])),
        theta_refresh=float(rng.choice([0.0, 0.02, 0.5])),
    )


@pytest.mark.slow
def test_soak_all_engines_agree_with_the_reference():
    deadline = time.monotonic() + SOAK_SECONDS
    rng = np.random.default_rng(SOAK_SEED)
    rounds = 0
    while time.monotonic() < deadline or rounds < 3:
        seed = int(rng.integers(1 << 30))
        vocab, subs, msgs = dense_workload(
            seed, num_subs=int(rng.integers(20, 150)), num_messages=int(rng.integers(200, 700)),
            vocab_size=int(rng.integers(3, 25)), zipf=float(rng.choice([0.5, 1.0, 2.0])),
            grid=bool(rng.integers(2)), tied_weights=bool(rng.integers(2)), max_k=int(rng.integers(1, 25)),
            crowd=bool(rng.integers(2)))
        window = {"window": int(rng.integers(1, 80))} if rng.integers(2) else {"window_seconds": float(rng.integers(1, 60))}
        params = [random_engine_params(rng) for _ in BUFFERS]
        engines = [ReferenceEngine(bounds=BOUNDS, vocabulary=vocab, **window)]
        engines += [Engine(bounds=BOUNDS, vocabulary=vocab, buffer=b, **window, **p) for b, p in zip(BUFFERS, params)]
        late = rng.random(len(subs)) < 0.3
        first = subs.take(np.flatnonzero(~late))
        pending = list(np.flatnonzero(late))
        for e in engines:
            e.subscribe_batch(first)
        live = set(first.ids.tolist())
        context = f"seed={seed} window={window} params={params}"
        for start in range(0, len(msgs), 50):
            chunk = msgs.slice(start, start + 50)
            logs = [rows(e.publish_batch(chunk)) for e in engines]
            for e, log in zip(engines[1:], logs[1:]):
                assert log == logs[0], f"{context}: change log differs for {e.stats()['engine']}"
            if pending and rng.random() < 0.5:
                one = subs.take(np.array([pending.pop()]))
                for e in engines:
                    e.subscribe_batch(one)
                live.add(int(one.ids[0]))
            if live and rng.random() < 0.3:
                sid = int(rng.choice(sorted(live)))
                live.discard(sid)
                for e in engines:
                    e.unsubscribe(sid)
            if "window_seconds" in window and rng.random() < 0.2:
                nxt = float(msgs.t[start + 50]) if start + 50 < len(msgs) else float(chunk.t[-1]) + 30.0
                t = float(chunk.t[-1]) + (nxt - float(chunk.t[-1])) * float(rng.random())
                changes = [sorted(map(repr, e.advance(t))) for e in engines]
                assert all(c == changes[0] for c in changes), context
        want = results(engines[0])
        for e in engines[1:]:
            assert results(e) == want, f"{context}: {e.stats()['engine']}"
            if isinstance(e, Engine):
                check_index(e)
        rounds += 1
    assert rounds >= 3
