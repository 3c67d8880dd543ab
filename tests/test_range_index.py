"""Continuous ``range`` subscriptions on the keyword-first index (``KeywordRangeIndex``) and on
the older grid lists, against the brute-force reference: every step's change log and the
results, on adversarial inputs.

Adversarial for the keyword-first index: points on rectangle edges and corners and on its
grids' cell boundaries (coordinates on a 0.5 lattice), point and line rectangles, rectangles
over the whole space, repeated keywords (``tea AND tea AND bun``, ``["tea", "tea"]``), ``any`` / ``all``
and expressions, subscriptions without terms, enough subscriptions under one term for a fine
grid, a stream in which the term a conjunction sits under (its rarest by the vocabulary) turns
frequent and the others rare, subscriptions that arrive late or leave mid-stream (grids rebuilt)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skype import Bounds, Engine, Message, ReferenceEngine
from skype.queries import RangeSubscription

BOUNDS = Bounds(0.0, 0.0, 10.0, 10.0)
NAMES = ["tea", "cake", "bun", "pie", "jam", "fig"]


def _engines(monkeypatch, index: str, window: int) -> list:
    from skype.querykinds import CoreQueryKinds

    monkeypatch.setattr(CoreQueryKinds, "RANGE_INDEX", index)
    return [Engine(bounds=BOUNDS, window=window, snapshots=True), ReferenceEngine(bounds=BOUNDS, window=window)]


def _run(engines, subs, messages, *, late=(), drop=(), results_every=10) -> list[list]:
    """The same steps on every engine: the change log of each message and periodic results."""
    logs: list[list] = [[] for _ in engines]
    for i, e in enumerate(engines):
        for s in subs:
            e.subscribe(s)
        for j, m in enumerate(messages):
            if j == len(messages) // 3:
                for s in late:
                    e.subscribe(s)
            if j == len(messages) // 2:
                for sid in drop:
                    if e.has_subscription(sid):
                        e.unsubscribe(sid)
            logs[i].append(sorted((c.sub_id, sorted(c.entered), sorted(c.left)) for c in e.publish(m)))
            if j % results_every == results_every - 1:
                ids = sorted({s.id for s in [*subs, *late]})
                logs[i].append([(sid, e.result(sid)) for sid in ids if e.has_subscription(sid)])
    return logs


def _lattice(draw_or_rng, lo=0.0, hi=10.0):
    return float(draw_or_rng.integers(int(lo * 2), int(hi * 2) + 1)) / 2


PREDICATES = [
    dict(terms=["tea"]), dict(terms=["tea", "cake"], match="all"), dict(terms=["tea", "cake"], match="any"),
    dict(terms=["tea", "tea", "cake"], match="all"), dict(terms=["cake", "cake"], match="any"), dict(match="tea AND tea AND bun"),
    dict(match="bun OR bun OR pie"), dict(match="(tea AND cake) OR (bun AND pie)"), dict(match="tea AND (cake OR jam)"), dict(),
    dict(terms=["tea", "cake", "bun", "pie"], match="all"), dict(terms=["fig", "jam", "pie", "bun", "cake"], match="any"),
    dict(terms=["jam", "fig"], match="all"),
]

rects = st.tuples(st.integers(0, 20), st.integers(0, 20), st.integers(0, 20), st.integers(0, 20)).map(
    lambda r: (min(r[0], r[2]) / 2, min(r[1], r[3]) / 2, max(r[0], r[2]) / 2, max(r[1], r[3]) / 2))
subs_st = st.lists(st.tuples(rects, st.integers(0, len(PREDICATES) - 1)), min_size=1, max_size=60)
msgs_st = st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20),
                             st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True)),
                   min_size=1, max_size=60)


@pytest.mark.parametrize("index", ["keyword", "grid"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(subs=subs_st, msgs=msgs_st, window=st.integers(1, 25), drop=st.sets(st.integers(0, 59), max_size=6))
def test_range_index_equals_reference_hypothesis(monkeypatch, index, subs, msgs, window, drop):
    """Lattice rectangles (points on edges and corners, point and line rectangles, the whole
    space) and lattice messages; predicates with repeated keywords, any/all, expressions, none."""
    specs = [RangeSubscription(i, r, **PREDICATES[p]) for i, (r, p) in enumerate(subs)]
    half = len(specs) // 2
    messages = [Message(j, x / 2, y / 2, t=float(j), terms={n: 1.0 for n in names})
                for j, (x, y, names) in enumerate(msgs)]
    logs = _run(_engines(monkeypatch, index, window), specs[:half], messages, late=specs[half:], drop=sorted(drop))
    assert logs[0] == logs[1]


@pytest.mark.parametrize("index", ["keyword", "grid"])
@pytest.mark.parametrize("seed", [0, 1])
def test_range_index_fine_grids_frequency_shift_and_churn_equal_reference(monkeypatch, index, seed):
    """Hundreds of subscriptions over six terms (every term's grid is fine, with cell
    boundaries on the lattice), a stream whose frequent term turns rare and rare term frequent
    halfway (the term a conjunction sits under stays the vocabulary's choice: exact either way),
    subscriptions arriving late and leaving mid-stream (grids rebuilt between probes)."""
    rng = np.random.default_rng(seed)
    subs, late = [], []
    for i in range(360):
        x0, y0 = _lattice(rng, 0, 9), _lattice(rng, 0, 9)
        w, h = [(0.0, 0.0), (10.0, 10.0), (0.5, 3.0), (2.0, 2.0), (1.0, 0.0)][i % 5] if i % 7 == 0 else \
            (float(rng.integers(1, 7)) / 2, float(rng.integers(1, 7)) / 2)
        rect = (x0, y0, min(10.0, x0 + w), min(10.0, y0 + h)) if w < 10 else (0.0, 0.0, 10.0, 10.0)
        (late if i % 4 == 3 else subs).append(RangeSubscription(i, rect, **PREDICATES[i % len(PREDICATES)]))
    early = np.array([8, 4, 2, 1, 1, 1], float)
    messages = []
    for j in range(500):
        p = early if j < 250 else early[::-1]
        names = rng.choice(NAMES, size=int(rng.integers(1, 5)), replace=False, p=p / p.sum())
        messages.append(Message(j, _lattice(rng), _lattice(rng), t=float(j), terms={str(n): 1.0 for n in names}))
    engines = _engines(monkeypatch, index, 80)
    logs = _run(engines, subs, messages, late=late, drop=list(range(0, 360, 9)), results_every=50)
    assert logs[0] == logs[1]
    assert sum(len(c[1]) + len(c[2]) for step in logs[0] for c in step if len(c) == 3) > 5_000  # not vacuous
    kinds = engines[0].stats()["queries"]["kinds"]["range"]
    assert kinds["index"] == index
    if index == "keyword":
        assert kinds["grid_builds"] > 6    # rebuilt after the late and the dropped subscriptions


def test_range_index_counters_agree_between_indexes(monkeypatch):
    """Counters: on the same stream both indexes report the same number of matches, and each
    match was a candidate reached (``probed``)."""
    rng = np.random.default_rng(5)
    subs = [RangeSubscription(i, (x, y, x + 1.5, y + 1.5), **PREDICATES[i % len(PREDICATES)])
            for i, (x, y) in enumerate(zip(rng.uniform(0, 8.5, 300), rng.uniform(0, 8.5, 300)))]
    messages = [Message(j, float(rng.uniform(0, 10)), float(rng.uniform(0, 10)), t=float(j),
                        terms={str(n): 1.0 for n in rng.choice(NAMES, size=2, replace=False)}) for j in range(400)]
    stats = {}
    for index in ("keyword", "grid"):
        engine = _engines(monkeypatch, index, 100)[0]
        for s in subs:
            engine.subscribe(s)
        for m in messages:
            engine.publish(m)
        stats[index] = engine.stats()["queries"]["kinds"]["range"]
    assert stats["keyword"]["matches"] == stats["grid"]["matches"] > 1_000
    assert stats["keyword"]["probed"] >= stats["keyword"]["matches"]
