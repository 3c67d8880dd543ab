"""Every bad-input case of the foundation issue, on records, batches and engine state."""

import math

import numpy as np
import pytest

from skype import Bounds, InputError, Message, ReferenceEngine, Subscription, Vocabulary
from skype.model import MessageBatch, SubscriptionBatch, TermMatrix
from skype.validate import check_message, check_subscription


def _sub(**kw):
    base = dict(id=1, x=0.0, y=0.0, k=3, alpha=0.5, text="coffee")
    base.update(kw)
    return Subscription(**base)


def _msg(**kw):
    base = dict(id=1, x=0.0, y=0.0, t=0.0, text="coffee")
    base.update(kw)
    return Message(**base)


@pytest.mark.parametrize(
    "kw, code",
    [
        (dict(x=math.nan), "E001"), (dict(y=math.inf), "E001"), (dict(x=-math.inf), "E001"),
        (dict(x=181.0), "E002"), (dict(y=-90.5), "E002"),
        (dict(k=0), "E003"), (dict(k=-2), "E003"), (dict(k=2.5), "E003"), (dict(k=True), "E003"),
        (dict(alpha=-0.01), "E004"), (dict(alpha=1.01), "E004"), (dict(alpha=math.nan), "E004"),
        (dict(text=""), "E005"), (dict(text="the and of"), "E005"),
        (dict(text=None, terms={"a": -1.0}), "E006"), (dict(text=None, terms={"a": 0}), "E006"),
        (dict(text=None, terms=None), "E013"), (dict(terms={"a": 1.0}), "E013"),
        (dict(id="7"), "E025"), (dict(id=2**63), "E025"), (dict(x="1"), "E012"),
    ],
)
def test_bad_subscriptions_are_rejected_with_a_named_record(kw, code):
    with pytest.raises(InputError) as err:
        check_subscription(_sub(**kw), Vocabulary(), Bounds())
    assert err.value.code == code
    assert "record id" in str(err.value)


@pytest.mark.parametrize(
    "kw, code",
    [
        (dict(x=math.nan), "E001"), (dict(y=math.inf), "E001"), (dict(x=200.0), "E002"),
        (dict(t=math.nan), "E021"), (dict(text="of the"), "E005"), (dict(text=None, terms={"a": -0.5}), "E006"),
    ],
)
def test_bad_messages_are_rejected(kw, code):
    with pytest.raises(InputError) as err:
        check_message(_msg(**kw), Vocabulary(), Bounds(), 0.0)
    assert err.value.code == code


def test_engine_state_errors():
    eng = ReferenceEngine(window=10)
    eng.subscribe(_sub(id=1))
    with pytest.raises(InputError) as err:
        eng.subscribe(_sub(id=1))
    assert err.value.code == "E007" and "1" in str(err.value)
    with pytest.raises(InputError) as err:
        eng.unsubscribe(99)
    assert err.value.code == "E008"
    eng.publish(_msg(id=5, t=10.0))
    with pytest.raises(InputError) as err:
        eng.publish(_msg(id=6, t=9.0))
    assert err.value.code == "E009"
    with pytest.raises(InputError) as err:
        eng.publish(_msg(id=5, t=11.0))
    assert err.value.code == "E019"
    with pytest.raises(InputError) as err:
        eng.topk(12345)
    assert err.value.code == "E020"


def test_window_configuration_errors():
    for kw, code in [({}, "E015"), ({"window": 3, "window_seconds": 1.0}, "E015"), ({"window": 0}, "E016"),
                     ({"window_seconds": -1.0}, "E017"), ({"window_seconds": math.inf}, "E017")]:
        with pytest.raises(InputError) as err:
            ReferenceEngine(**kw)
        assert err.value.code == code
    with pytest.raises(InputError) as err:
        Bounds(1, 0, 0, 1)
    assert err.value.code == "E014"


def _batch(ids, xs, ys, ts, rows):
    return MessageBatch(ids, xs, ys, ts, TermMatrix.from_rows(rows))


def test_batch_validation_names_the_first_bad_row():
    eng = ReferenceEngine(window=10)
    good = (np.array([0], np.int64), np.array([1.0]))
    with pytest.raises(InputError) as err:
        eng.publish_batch(_batch([1, 2], [0.0, math.nan], [0.0, 0.0], [0.0, 1.0], [good, good]))
    assert err.value.code == "E001" and err.value.record_id == 2
    with pytest.raises(InputError) as err:
        eng.publish_batch(_batch([1, 2], [0.0, 0.0], [0.0, 0.0], [1.0, 0.5], [good, good]))
    assert err.value.code == "E009" and err.value.record_id == 2
    with pytest.raises(InputError) as err:
        eng.publish_batch(_batch([1, 1], [0.0, 0.0], [0.0, 0.0], [0.0, 1.0], [good, good]))
    assert err.value.code == "E019"
    with pytest.raises(InputError) as err:
        eng.publish_batch(_batch([1], [0.0], [0.0], [0.0], [(np.array([0]), np.array([0.5]))]))
    assert err.value.code == "E027"  # not unit length
    with pytest.raises(InputError) as err:
        eng.publish_batch(_batch([1], [0.0], [0.0], [0.0], [(np.array([3, 1]), np.array([0.6, 0.8]))]))
    assert err.value.code == "E027"  # ids not ascending
    with pytest.raises(InputError) as err:
        eng.publish_batch(_batch([1], [0.0], [0.0], [0.0], [(np.array([], np.int64), np.array([]))]))
    assert err.value.code == "E005"
    assert len(eng.window_ids()) == 0  # a rejected batch changes nothing


def test_subscription_batch_validation():
    eng = ReferenceEngine(window=10)
    row = (np.array([0]), np.array([1.0]))
    bad_k = SubscriptionBatch([1, 2], [0, 0], [0, 0], [3, 0], [0.5, 0.5], TermMatrix.from_rows([row, row]))
    with pytest.raises(InputError) as err:
        eng.subscribe_batch(bad_k)
    assert err.value.code == "E003" and err.value.record_id == 2
    dup = SubscriptionBatch([1, 1], [0, 0], [0, 0], [3, 3], [0.5, 0.5], TermMatrix.from_rows([row, row]))
    with pytest.raises(InputError) as err:
        eng.subscribe_batch(dup)
    assert err.value.code == "E007"
    bad_alpha = SubscriptionBatch([1], [0], [0], [3], [1.5], TermMatrix.from_rows([row]))
    with pytest.raises(InputError) as err:
        eng.subscribe_batch(bad_alpha)
    assert err.value.code == "E004"
    assert len(eng.subscription_ids()) == 0
