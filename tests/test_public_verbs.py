"""The public verbs the live service uses instead of private names (issue 34, deliverable 6):
``window_has``, ``ended_subscriptions``, ``arrivals`` and ``restore_position`` on both engines
(the core against the reference), and ``Vocabulary.forget_from``."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from skype.engine import Engine
from skype.errors import InputError
from skype.model import Message, Subscription
from skype.reference import ReferenceEngine
from skype.text import Vocabulary

WORDS = ["pizza", "pasta", "sushi", "ramen", "tacos"]


def engines(**window):
    return [Engine(vocabulary=Vocabulary(), snapshots=True, **window), ReferenceEngine(vocabulary=Vocabulary(), **window)]


def message(rng: random.Random, mid: int, t: float | None = None) -> Message:
    return Message(id=mid, x=rng.uniform(-5, 5), y=rng.uniform(-5, 5), t=t,
                   text=" ".join(rng.sample(WORDS, 2)))


@pytest.mark.parametrize("seed", range(3))
def test_window_has_matches_the_window(seed):
    rng = random.Random(seed)
    for engine in engines(window=17):
        engine.subscribe(Subscription(id=1, x=0.0, y=0.0, k=3, alpha=0.5, text="pizza"))
        for mid in rng.sample(range(1000), 60):
            engine.publish(message(rng, mid))
        probe = np.array(rng.sample(range(1000), 200), np.int64)
        inside = set(engine.window_ids().tolist())
        assert engine.window_has(probe).tolist() == [int(i) in inside for i in probe]
        assert engine.arrivals == 60


def test_ended_subscriptions_names_what_until_ended():
    for engine in engines(window_seconds=100.0):
        engine.subscribe(Subscription(id=1, x=0.0, y=0.0, k=2, alpha=0.5, text="pizza", until=5.0))
        engine.subscribe(Subscription(id=2, x=0.0, y=0.0, k=2, alpha=0.5, text="pizza", until=50.0))
        engine.publish(Message(id=10, x=0.0, y=0.0, t=1.0, text="pizza"))
        assert engine.ended_subscriptions() == {}
        engine.publish(Message(id=11, x=0.0, y=0.0, t=6.0, text="pizza"))
        assert engine.ended_subscriptions() == {1: "topk"}
        assert not engine.has_subscription(1) and engine.has_subscription(2)
        engine.advance_log(60.0)
        assert engine.ended_subscriptions() == {2: "topk"}
        ended = engine.ended_subscriptions()
        ended.clear()  # a copy: the engine's own stays
        engine.advance_log(61.0)
        assert engine.ended_subscriptions() == {}


def test_restore_position_continues_like_the_original():
    """An engine rebuilt from the window's messages and given the original's clock and arrival
    count goes on exactly as the original (default timestamps, results)."""
    rng = random.Random(4)
    msgs = [message(rng, i) for i in range(30)]           # no t: t = the arrival number
    later = [message(rng, 100 + i) for i in range(20)]
    sub = Subscription(id=1, x=0.0, y=0.0, k=4, alpha=0.5, text="pizza sushi")
    for make in (lambda: Engine(window=10, snapshots=True), lambda: ReferenceEngine(window=10)):
        original = make()
        original.subscribe(sub)
        for m in msgs:
            original.publish(m)
        rebuilt = make()
        window = set(original.window_ids().tolist())
        for m, t in zip(msgs, range(30)):
            if m.id in window:
                rebuilt.publish(Message(id=m.id, x=m.x, y=m.y, t=float(t), text=m.text))
        rebuilt.restore_position(original.clock, original.arrivals)
        rebuilt.subscribe(sub)
        assert rebuilt.clock == original.clock and rebuilt.arrivals == original.arrivals == 30
        for m in later:
            assert rebuilt.publish(m) == original.publish(m)
        assert rebuilt.topk(1) == original.topk(1)


def test_restore_position_refuses_going_back():
    for engine in engines(window=5):
        engine.publish(Message(id=1, x=0.0, y=0.0, t=3.0, text="pizza"))
        with pytest.raises(InputError, match="E009"):
            engine.restore_position(2.0, 5)
        with pytest.raises(InputError, match="E023"):
            engine.restore_position(4.0, 0)   # arrivals back (1 published)
        with pytest.raises(InputError, match="E021"):
            engine.restore_position(math.nan, 5)
        engine.restore_position(4.0, 7)
        assert engine.clock == 4.0 and engine.arrivals == 7
    fresh = ReferenceEngine(window=5)
    fresh.restore_position(-math.inf, 0)  # an empty engine's position
    assert fresh.clock == -math.inf


def test_vocabulary_forget_from():
    vocab = Vocabulary.build([["coffee", "paris"], ["paris"]])
    known = len(vocab)
    mark = len(vocab)
    new = [vocab.id(t) for t in ("zebra", "yak")]
    assert new == [known, known + 1] and "zebra" in vocab
    vocab.forget_from(mark)
    assert len(vocab) == known and "zebra" not in vocab and vocab.get("yak") is None
    assert vocab.id("yak") == known  # ids are given again from the mark
    for bad in (known - 1, known + 5, True, "1"):
        with pytest.raises(InputError, match="E023"):
            vocab.forget_from(bad)  # type: ignore[arg-type]
    assert vocab.term(known) == "yak"
