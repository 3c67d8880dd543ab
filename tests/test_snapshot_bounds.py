"""Snapshot ``topk`` and ``terms`` with the message index's shadow bounds and leaf coordinates.

``topk``: the best-first retrieval bounds a group of term t's tree by the other query terms'
max weights at the same place in their own trees (``msgindex.pyx``, ``q_shadow``).  A wrong
shadow (a node that does not hold the group's messages) would give a bound below a message's
score and a wrong order, so the trees here are deep (a small vocabulary, hundreds of messages a
term, leaves of 64) and the queries have several terms that meet in messages, ties of score
(points on a lattice, repeated term vectors), terms absent from the window, ``alpha`` 0 and 1.

``terms``: a counting walk tests a cut leaf's entries from their coordinates rounded down to
floats (``msgindex.entry_in_rect``) and reads the message only when an edge lies within a float
step of it.  Coordinates here are doubles that floats do not hold, with rectangle edges one
double step either side of them and on them.

Every answer is the reference engine's (brute force)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from skype import Bounds, Engine, Message, ReferenceEngine

BOUNDS = Bounds(0.0, 0.0, 10.0, 10.0)
NAMES = ["a", "b", "c", "d", "e", "f"]


def _pair(window):
    return Engine(bounds=BOUNDS, window=window, snapshots=True), ReferenceEngine(bounds=BOUNDS, window=window)


def _publish(engines, messages):
    for e in engines:
        for m in messages:
            e.publish(m)


def _topk(e, **q):
    return [(m.id, m.score) for m in e.query("topk", **q)]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), lattice=st.sampled_from([2, 5, 40]),
       alpha=st.sampled_from([0.0, 0.01, 0.3, 0.7, 1.0]))
def test_snapshot_topk_shadow_bounds_equal_reference(seed, lattice, alpha):
    """Deep trees of a few terms, queries of 1-4 terms (one possibly absent), points on a
    lattice of ``lattice`` steps (many equal distances) and term vectors drawn from few
    weights (many equal scores): the answer and its order are the reference's."""
    rng = np.random.default_rng(seed)
    engines = _pair(700)
    messages = []
    for j in range(900):
        names = rng.choice(NAMES, size=int(rng.integers(1, 4)), replace=False,
                           p=[0.3, 0.25, 0.2, 0.1, 0.1, 0.05])
        terms = {str(n): float(rng.choice([1.0, 2.0, 3.0])) for n in names}
        x, y = (float(v) for v in rng.integers(0, lattice + 1, 2) * (10.0 / lattice))
        messages.append(Message(j, x, y, t=float(j), terms=terms))
    _publish(engines, messages)
    for _ in range(12):
        names = list(rng.choice(NAMES + ["zz"], size=int(rng.integers(1, 5)), replace=False))
        q = dict(x=float(rng.uniform(0, 10)), y=float(rng.uniform(0, 10)), k=int(rng.integers(1, 30)),
                 alpha=alpha, terms={str(n): float(rng.choice([1.0, 2.0, 5.0])) for n in names})
        got, want = (_topk(e, **q) for e in engines)
        assert got == want, q


def test_snapshot_topk_shadow_bounds_read_fewer_entries():
    """The shadow bound is what cuts the work: a query of three terms that are frequent apart
    but rare together, in separate corners of the space, pops fewer heap items than the sum
    over its terms alone would need, and equals the reference."""
    rng = np.random.default_rng(3)
    engines = _pair(3000)
    messages = []
    corners = {"a": (0.0, 0.0), "b": (5.0, 5.0), "c": (0.0, 5.0)}
    for j in range(3000):
        name = "abc"[j % 3]
        cx, cy = corners[name]
        filler = {f"f{int(rng.integers(0, 50))}": 1.0 for _ in range(3)}
        messages.append(Message(j, cx + float(rng.uniform(0, 5)), cy + float(rng.uniform(0, 5)), t=float(j),
                                terms={name: float(rng.uniform(0.2, 1.0)), **filler}))
    _publish(engines, messages)
    q = dict(x=9.0, y=1.0, k=20, alpha=0.05, terms={"a": 1.0, "b": 1.0, "c": 1.0})
    before = engines[0].stats()["queries"]["snapshots"]["topk_work"]
    got, want = (_topk(e, **q) for e in engines)
    work = engines[0].stats()["queries"]["snapshots"]["topk_work"] - before
    assert got == want
    # every message is in one corner only: a group of a's tree has no b or c there once the
    # trees split, so the bound is a's own; with the old bound (a w + |others|) the search
    # read most of the three trees (3,000 entries and their nodes)
    assert work < 1500, work


@pytest.mark.parametrize("designs", [True, False], ids=["floor-and-leaf-constants", "before-them"])
@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 10_000), alpha=st.sampled_from([0.0, 0.5, 1.0]), k=st.sampled_from([1, 2, 7, 40]))
def test_snapshot_topk_adversarial_equal_reference(designs, seed, alpha, k):
    """Cases a floor under the k-th score could get wrong: whole groups of messages with the
    same terms at the same place (equal scores: the k-th score tied by many, newer first), one-term
    queries, queries whose terms no message holds (or only one of them does), ``alpha`` 0 (text
    alone: ties across the space) and 1 (distance alone), k above the number of matches, and
    ``last`` (no floor: the fresh messages are filtered after retrieval).  Every answer is the
    reference's, with the floor (``msgindex.query_floor``) and the leaf constants
    (``MessageIndex._scan_leaf``) and without them."""
    from skype._core.msgindex import set_leaf_constants, set_query_floor

    rng = np.random.default_rng(seed)
    engines = _pair(500)
    messages = []
    for j in range(600):
        if j % 3 == 0 and j:                                  # a copy of an earlier message: a tie
            src = messages[int(rng.integers(0, len(messages)))]
            messages.append(Message(j, src.x, src.y, t=float(j), terms=dict(src.terms)))
            continue
        names = rng.choice(NAMES, size=int(rng.integers(1, 4)), replace=False, p=[0.3, 0.25, 0.2, 0.1, 0.1, 0.05])
        x, y = (float(v) for v in rng.integers(0, 5, 2) * 2.5)
        messages.append(Message(j, x, y, t=float(j), terms={str(n): float(rng.choice([1.0, 2.0])) for n in names}))
    _publish(engines, messages)
    queries = [["a"], ["f"], ["zz"], ["zz", "yy"], ["zz", "a"], ["a", "b"], ["a", "b", "c", "d"], ["e", "f"]]
    set_query_floor(designs)
    set_leaf_constants(designs)
    try:
        for names in queries:
            for last in (None, 200.0):
                q = dict(x=float(rng.integers(0, 5)) * 2.5, y=float(rng.integers(0, 5)) * 2.5, k=k, alpha=alpha,
                         terms={n: float(rng.choice([1.0, 3.0])) for n in names})
                if last is not None:
                    q["last"] = last
                got, want = (_topk(e, **q) for e in engines)
                assert got == want, q
        assert _topk(engines[0], x=5.0, y=5.0, k=k, alpha=alpha, terms={"zz": 1.0}) == []
    finally:
        set_query_floor(True)
        set_leaf_constants(True)


def test_snapshot_topk_floor_reads_fewer_entries():
    """The floor under the k-th score drops the groups and entries bounded below it instead of
    pushing them: on the same window and queries it bounds fewer entries alone and pops no more
    items, with the same answers (the reference's)."""
    from skype._core.msgindex import set_query_floor

    rng = np.random.default_rng(21)
    engines = _pair(4000)
    messages = []
    for j in range(4000):
        names = rng.choice(NAMES, size=int(rng.integers(1, 4)), replace=False, p=[0.3, 0.25, 0.2, 0.1, 0.1, 0.05])
        messages.append(Message(j, float(rng.uniform(0, 10)), float(rng.uniform(0, 10)), t=float(j),
                                terms={str(n): float(rng.uniform(0.1, 1.0)) for n in names}))
    _publish(engines, messages)
    queries = [dict(x=float(rng.uniform(0, 10)), y=float(rng.uniform(0, 10)), k=10, alpha=float(a),
                    terms={"a": 1.0, "b": float(rng.uniform(0.5, 2.0))}) for a in (0.0, 0.1, 0.3, 0.6)]
    counters = {}
    try:
        for on in (False, True):
            set_query_floor(on)
            before = engines[0].stats()["queries"]["snapshots"]
            answers = [_topk(engines[0], **q) for q in queries]
            after = engines[0].stats()["queries"]["snapshots"]
            counters[on] = {c: after[c] - before[c] for c in ("topk_work", "topk_entry_bounds")}
            assert answers == [_topk(engines[1], **q) for q in queries]
    finally:
        set_query_floor(True)
    assert counters[True]["topk_work"] <= counters[False]["topk_work"], counters
    assert counters[True]["topk_entry_bounds"] < counters[False]["topk_entry_bounds"], counters


# ----------------------------------------------------------------------------------- terms

def _terms(e, rect, k):
    return [(c.term, c.count) for c in e.query("terms", rect=rect, k=k)]


@pytest.mark.parametrize("tables", [(4, 3, 2), (0, 32, 16)])
def test_snapshot_terms_float_edges_equal_reference(monkeypatch, tables):
    """Points whose coordinates floats do not hold (0.1 steps plus a third of a float step),
    rectangles whose edges are those coordinates, one double step inside or outside them, or
    between the float below and above: counts through cut leaves equal the reference's, with
    and without the count tables."""
    from skype.querykinds import CoreQueryKinds

    monkeypatch.setattr(CoreQueryKinds, "SNAPSHOT_TERMS_GRID", tables)
    rng = np.random.default_rng(9)
    engines = _pair(1200)
    xs = [round(0.1 * i, 10) + 1e-8 / 3 for i in range(1, 99)]
    messages = []
    for j in range(1200):
        x, y = float(rng.choice(xs)), float(rng.choice(xs))
        names = rng.choice(NAMES, size=int(rng.integers(1, 4)), replace=False)
        messages.append(Message(j, x, y, t=float(j), terms={str(n): 1.0 for n in names}))
    _publish(engines, messages)
    answers: list[list] = [[], []]
    for _ in range(120):
        lo_x, hi_x = sorted(float(v) for v in rng.choice(xs, 2, replace=False))
        lo_y, hi_y = sorted(float(v) for v in rng.choice(xs, 2, replace=False))
        nudge = [np.nextafter(v, d) if rng.random() < 0.5 else v
                 for v, d in ((lo_x, -1), (lo_y, -1), (hi_x, 20), (hi_y, 20))]
        if rng.random() < 0.3:                  # or one step the other way: the point falls out
            nudge = [np.nextafter(nudge[0], 20), nudge[1], np.nextafter(nudge[2], -1), nudge[3]]
        rect = tuple(float(v) for v in nudge)
        if rect[0] > rect[2]:
            continue
        k = int(rng.integers(1, 7))
        for i, e in enumerate(engines):
            answers[i].append(_terms(e, rect, k))
    assert answers[0] == answers[1]
    assert sum(1 for a in answers[0] if a) > 50


@pytest.mark.parametrize("tables", [(4, 3, 2), (0, 32, 16)])
def test_snapshot_terms_adversarial_rectangles_equal_reference(monkeypatch, tables):
    """Rectangles a count table or a bounded walk could get wrong: the whole space (every table
    cell, every node inside), beyond it, a point (zero area, on a message and on a cell edge),
    one outside every message (no term), k above the number of terms; terms whose counts tie
    (each name in the same number of messages: ties by name) and ``last``.  Every answer is the
    reference's, with and without the count tables."""
    from skype.querykinds import CoreQueryKinds

    monkeypatch.setattr(CoreQueryKinds, "SNAPSHOT_TERMS_GRID", tables)
    rng = np.random.default_rng(17)
    engines = _pair(600)
    messages = []
    for j in range(600):
        names = [NAMES[j % 6], NAMES[(j + 2) % 6]] if j % 2 else [NAMES[j % 6]]      # tied counts
        x, y = (5.0, 5.0) if j % 50 == 0 else (float(rng.uniform(0, 4)), float(rng.uniform(0, 10)))
        messages.append(Message(j, x, y, t=float(j), terms={n: 1.0 for n in names}))
    _publish(engines, messages)
    rects = [(0.0, 0.0, 10.0, 10.0), (-5.0, -5.0, 15.0, 15.0), (5.0, 5.0, 5.0, 5.0), (2.5, 2.5, 2.5, 2.5),
             (6.0, 0.0, 10.0, 10.0), (0.0, 0.0, 4.0, 5.0), (0.0, 5.0, 10.0, 5.0)]
    for rect in rects:
        for k in (1, 3, 6, 20):
            for last in (None, 300.0):
                q = dict(rect=rect, k=k) if last is None else dict(rect=rect, k=k, last=last)
                got, want = ([(c.term, c.count) for c in e.query("terms", **q)] for e in engines)
                assert got == want, q
    assert _terms(engines[0], (6.0, 0.0, 10.0, 10.0), 5) == []
    assert len(_terms(engines[0], (0.0, 0.0, 10.0, 10.0), 20)) == 6
