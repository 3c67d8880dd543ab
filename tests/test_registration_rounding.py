"""The registration tree's float boxes are rounded outward (csrc/skype/_core/regtree.pyx).

A node stores its box in floats: the minima rounded down and the maxima up, so the float box
contains the exact one and a node's key bounds every entry's score.  Grid coordinates are
floats exactly, so the adversarial tests cannot tell outward from inward rounding.  Here a
message lies half a float step inside a float boundary (a double no float represents): a box
rounded inward would end one half step short of it, its key would fall below the message's
own score, and a competitor placed between the two (its coordinates floats exactly, in the
other leaf) would be kept in its place.  Each side of a box (minimum and maximum, x and y) has
its case; every result must equal the reference's and the replay's.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from adversarial import BOUNDS
from skype import Engine, ReferenceEngine
from skype.model import MessageBatch, SubscriptionBatch, TermMatrix
from skype.text import Vocabulary
from test_bulk_registration import results


def is_float32(v: float) -> bool:
    return float(np.float32(v)) == v


def case(side: str, axis: str):
    """(subscription, messages) for one side of a box: the subscription at (16, 8) beyond a
    leaf's maximum ("max") or at (0, 8) beyond its minimum ("min"); axis "y" swaps x and y.
    Leaf A: m1, half a float step inside the float boundary f (so f is where an inward rounding
    would put the box's side), and seven far messages.  Leaf B: m2, a float point whose distance
    lies strictly between m1's and f's, and seven messages further than f."""
    sx = 16.0 if side == "max" else 0.0
    f = np.float32(12.0 if side == "max" else 4.0)
    out = np.float32(np.inf if side == "max" else -np.inf)
    x1 = (float(f) + float(np.nextafter(f, out))) / 2     # a double between f and the next float outward
    x2 = float(np.nextafter(f, out))                       # m2: the next float, nearer the subscription
    d1, d_inward = abs(sx - x1), abs(sx - float(f))
    step = 2.0 ** -20                                      # the float step in [8, 16)
    dy = next(k * step for k in range(1, 1 << 16) if d1 < math.hypot(sx - x2, k * step) < d_inward)
    assert not is_float32(x1) and is_float32(x2) and is_float32(8.0 + dy)
    sign = -1.0 if side == "max" else 1.0                  # from the subscription into the window
    far_a = [sx + sign * (10.0 + i) for i in range(7)]     # A's others: far from the subscription
    near_b = [sx + sign * (1.0 + 0.25 * i) for i in range(7)]  # B's others: past m2 in x, off in y
    xs = [x1] + far_a + [x2] + near_b
    ys = [8.0] * 8 + [8.0 + dy] + [12.5] * 7
    assert all(math.hypot(sx - x, 8.0 - y) > d_inward for x, y in zip(near_b, ys[9:]))
    if axis == "y":
        xs, ys, sub = ys, xs, (8.0, sx)
    else:
        sub = (sx, 8.0)
    return sub, xs, ys


@pytest.mark.parametrize("axis", ["x", "y"])
@pytest.mark.parametrize("side", ["max", "min"])
def test_boxes_rounded_outward_keep_the_message_half_a_step_inside(side, axis):
    sub, xs, ys = case(side, axis)
    n = len(xs)
    one_term = TermMatrix(np.arange(n + 1, dtype=np.int64), np.zeros(n, np.int64), np.ones(n))
    msgs = MessageBatch(np.arange(n, dtype=np.int64) + 1, np.array(xs), np.array(ys), np.arange(n, dtype=float),
                        one_term)
    subs = SubscriptionBatch(np.array([7], np.int64), np.array([sub[0]]), np.array([sub[1]]),
                             np.array([1], np.int64), np.array([1.0]),
                             TermMatrix(np.array([0, 1], np.int64), np.array([0], np.int64), np.ones(1)))
    vocab = Vocabulary.from_document_frequencies({"w0": n}, n)
    ref = ReferenceEngine(bounds=BOUNDS, vocabulary=vocab, window=n)
    ref.publish_batch(msgs)
    ref.subscribe_batch(subs)
    want = results(ref)
    assert [m for m, _ in want[7]] == [1]                  # m1 is the nearest: the top-1
    got = {}
    for mode in ("replay", "search"):
        eng = Engine(bounds=BOUNDS, vocabulary=vocab, window=n, buffer="exact", registration=mode)
        eng._core.configure_bulk(1, 1 << 20, 1, True)      # a batch of one registers in bulk
        eng.publish_batch(msgs)
        eng.subscribe_batch(subs)
        got[mode] = eng.buffer_state(7)
        assert results(eng) == want, mode
    assert got["search"] == got["replay"]
    s = eng.stats()["bulk_registration"]["search"]
    assert s["searches"] == 1 and s["nodes"] == 3           # a root and two leaves: A and B
