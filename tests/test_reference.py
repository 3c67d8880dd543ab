import numpy as np
import pytest

from engine_machine import make_machine
from conftest import brute_force_topk
from skype import Message, ReferenceEngine, Subscription

ReferenceCountMachine = make_machine(ReferenceEngine, window=5)
ReferenceTimeMachine = make_machine(ReferenceEngine, window_seconds=3.0)
TestReferenceCountWindow = ReferenceCountMachine.TestCase
TestReferenceTimeWindow = ReferenceTimeMachine.TestCase


@pytest.mark.parametrize("window", [50, 400])
def test_reference_matches_brute_force_on_a_real_workload(tweets_small, window):
    w = tweets_small
    eng = ReferenceEngine(window=window, vocabulary=w.vocabulary)
    eng.subscribe_batch(w.subscriptions)
    eng.publish_batch(w.messages)
    final = w.messages.slice(len(w.messages) - window, len(w.messages))
    want = brute_force_topk(w.subscriptions, final, w.bounds.max_dist)
    got = {sid: [(m.id, m.score) for m in matches] for sid, matches in eng.results()}
    assert got == want


def test_time_window_holds_exactly_the_last_T_seconds():
    eng = ReferenceEngine(window_seconds=10.0)
    eng.subscribe(Subscription(1, 0.0, 0.0, k=10, alpha=0.0, terms={"a": 1.0}))
    for i, t in enumerate([0.0, 5.0, 10.0, 10.0, 19.9, 20.0]):
        eng.publish(Message(i, 0.0, 0.0, t, terms={"a": 1.0}))
    # after t = 20: (10, 20] -> messages 4 (19.9) and 5 (20.0); 10.0 is out (t <= 20 - 10)
    assert sorted(eng.window_ids().tolist()) == [4, 5]
    assert sorted(m.id for m in eng.topk(1)) == [4, 5]
    eng.advance(29.95)
    assert eng.window_ids().tolist() == [5]


def test_newer_message_wins_ties_and_topk_may_be_short():
    eng = ReferenceEngine(window=10)
    eng.subscribe(Subscription(1, 1.0, 1.0, k=3, alpha=0.5, terms={"a": 1.0}))
    eng.publish(Message(1, 2.0, 2.0, terms={"a": 1.0}))
    eng.publish(Message(2, 2.0, 2.0, terms={"a": 1.0}))
    eng.publish(Message(3, 2.0, 2.0, terms={"b": 1.0}))  # shares no term: never a result
    assert [m.id for m in eng.topk(1)] == [2, 1]


def test_subscribe_initialises_from_the_window_and_unsubscribe_forgets():
    eng = ReferenceEngine(window=3)
    for i in range(5):
        eng.publish(Message(i, float(i), 0.0, terms={"a": 1.0}))
    top = eng.subscribe(Subscription(7, 4.0, 0.0, k=2, alpha=1.0, terms={"a": 1.0}))
    assert [m.id for m in top] == [4, 3]
    eng.unsubscribe(7)
    assert not eng.has_subscription(7) and eng.stats()["subscriptions"] == 0


def test_thresholds_are_kscore_or_zero():
    eng = ReferenceEngine(window=10)
    eng.subscribe(Subscription(1, 0.0, 0.0, k=2, alpha=0.0, terms={"a": 1.0}))
    eng.subscribe(Subscription(2, 0.0, 0.0, k=5, alpha=0.0, terms={"a": 1.0}))
    eng.publish(Message(1, 0.0, 0.0, terms={"a": 1.0, "b": 1.0}))
    eng.publish(Message(2, 0.0, 0.0, terms={"a": 1.0}))
    th = eng.thresholds(np.array([1, 2]))
    assert th[0] == eng.topk(1)[-1].score and th[1] == 0.0
