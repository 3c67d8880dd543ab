"""Design 2 of the ``terms`` kind (issue 26): shared per-cell term counts (``termgrid.pyx``).

The grid's tables of 2D prefix sums bound a term's count in a rectangle by its count over the
cells the rectangle meets; ``terms`` subscriptions read that bound before walking a tree.  The
tables must equal a brute-force count per cell after any arrivals and expiries (tables built,
dropped and rebuilt), the bound must hold, and every change log and result must equal the
reference's whatever the grid (off, one cell, cell edges on the rectangles' edges, fine)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from skype import Bounds, Engine, Message, ReferenceEngine
from skype.queries import TermsSubscription

BOUNDS = Bounds(0.0, 0.0, 8.0, 8.0)
NAMES = ["tea", "bun", "cake", "über", "zzz", "jam", "pie", "éclair"]
# half-unit lattice points: on the rectangles' edges and on the cell edges of 4, 8 and 16 cells;
# a few points off the lattice and on the space's edges
coords = st.one_of(st.integers(0, 16).map(lambda v: v / 2.0), st.floats(0.0, 8.0))
messages = st.lists(st.tuples(coords, coords, st.lists(st.sampled_from(NAMES), min_size=1, max_size=4)),
                    min_size=1, max_size=60)


@st.composite
def rects(draw):
    a, b = sorted([draw(coords), draw(coords)])
    c, d = sorted([draw(coords), draw(coords)])
    return (a, c, b, d)


def _grid_engine(monkeypatch, cells, tables, window, design="blocks"):
    from skype.querykinds import CoreQueryKinds

    monkeypatch.setattr(CoreQueryKinds, "TERMS_GRID", cells)
    monkeypatch.setattr(CoreQueryKinds, "TERMS_GRID_TABLES", tables)
    monkeypatch.setattr(CoreQueryKinds, "TERMS_DESIGN", design)
    return Engine(bounds=BOUNDS, window=window, snapshots=True)


def _cell(v, lo, hi, cells):
    c = (v - lo) * (cells / (hi - lo))
    return 0 if c <= 0.0 else cells - 1 if c >= cells else int(c)


@pytest.mark.parametrize("cells", [1, 4, 7, 16])
@settings(max_examples=30)
@given(stream=messages, probes=st.lists(rects(), min_size=1, max_size=6), window=st.integers(1, 12))
def test_terms_grid_tables_equal_brute_force_counts_per_cell(cells, stream, probes, window):
    """After each message (its terms' tables moved, built at 2 messages, dropped below 2 and
    rebuilt as the window slides), each term's bound over the cells a rectangle meets equals the
    brute-force count of the window's messages in those cells, and is at least its count in the
    rectangle; a term below 2 messages has no table."""
    with pytest.MonkeyPatch.context() as mp:
        engine = _grid_engine(mp, cells, (2, 2), window)
        engine.subscribe(TermsSubscription(1, (0.0, 0.0, 1.0, 1.0), k=1))     # starts the grid
    core = engine._kind_queries._core
    live: list[tuple[float, float, set[str]]] = []
    for j, (x, y, words) in enumerate(stream):
        engine.publish(Message(j, x, y, t=float(j), text=" ".join(words)))     # repeated words: one term
        live = (live + [(x, y, set(words))])[-window:]
        for r in probes:
            cx = (_cell(r[0], 0.0, 8.0, cells), _cell(r[2], 0.0, 8.0, cells))
            cy = (_cell(r[1], 0.0, 8.0, cells), _cell(r[3], 0.0, 8.0, cells))
            for name in NAMES:
                tid = engine.vocabulary.get(name)
                holders = [(mx, my) for mx, my, ws in live if name in ws]
                got = None if tid is None else core.terms_kind.grid_upper(tid, r)
                if len(holders) < 2:
                    assert got is None
                    continue
                in_cells = sum(cx[0] <= _cell(mx, 0.0, 8.0, cells) <= cx[1]
                               and cy[0] <= _cell(my, 0.0, 8.0, cells) <= cy[1] for mx, my in holders)
                in_rect = sum(r[0] <= mx <= r[2] and r[1] <= my <= r[3] for mx, my in holders)
                assert got == in_cells >= in_rect


@pytest.mark.parametrize("design", ["blocks", "buffers"])
@pytest.mark.parametrize("cells,tables", [(0, (32, 16)), (1, (1, 1)), (8, (1, 1)), (16, (3, 2)), (64, (2, 1))])
@settings(max_examples=30)
@given(stream=messages, subs=st.lists(st.tuples(rects(), st.integers(1, 2)), min_size=1, max_size=8),
       window=st.integers(1, 15), late=st.integers(0, 60))
def test_terms_grid_results_equal_reference(design, cells, tables, stream, subs, window, late):
    """Adversarial streams: eight names (counts tie all the time, ties by name with non-ASCII;
    k of 1-2, so that buffers of 2k fill), points on the rectangles' and the cells' edges, repeated words in a message, small windows
    (counts fall to 0, tables dropped and rebuilt), subscriptions registered before and during
    the stream: every step's change log and every result equal the reference's."""
    with pytest.MonkeyPatch.context() as mp:
        engines = [_grid_engine(mp, cells, tables, window, design), ReferenceEngine(bounds=BOUNDS, window=window)]
    logs: list[list] = [[], []]
    for i, e in enumerate(engines):
        for j, (x, y, words) in enumerate(stream):
            if j == min(late, len(stream) - 1):
                for sid, (r, k) in enumerate(subs):
                    e.subscribe(TermsSubscription(sid, r, k=k))
            changes = e.publish(Message(j, x, y, t=float(j), text=" ".join(words)))
            logs[i].append(sorted((c.sub_id, sorted(c.entered), sorted(c.left)) for c in changes))
            logs[i].append([(sid, e.result(sid)) for sid in range(len(subs)) if e.has_subscription(sid)])
    assert logs[0] == logs[1]


def test_terms_grid_bounds_most_arrivals_and_equals_reference_on_a_skewed_stream():
    """A Zipf vocabulary of 60 names over overlapping rectangles with full buffers: the shared
    counts bound most arriving outside terms (fewer walks than with the grid off), the results
    and change logs equal the reference's and the design-1 engine's."""
    rng = np.random.default_rng(5)
    names = [f"w{i:02d}" for i in range(60)]
    p = 1.0 / np.arange(1, 61)
    p /= p.sum()
    rects = [(x, y, x + w, y + w) for x, y, w in zip(rng.uniform(0, 4, 12), rng.uniform(0, 4, 12),
                                                     rng.uniform(2, 4, 12))]
    stream = [(float(rng.uniform(0, 8)), float(rng.uniform(0, 8)),
               " ".join(rng.choice(names, size=int(rng.integers(1, 6)), p=p))) for _ in range(600)]
    logs, stats = [], []
    for make in (lambda mp: _grid_engine(mp, 8, (4, 2), 200, "buffers"),
                 lambda mp: _grid_engine(mp, 0, (32, 16), 200, "buffers"),
                 lambda mp: ReferenceEngine(bounds=BOUNDS, window=200)):
        with pytest.MonkeyPatch.context() as mp:
            e = make(mp)
        log = []
        for sid, r in enumerate(rects):
            e.subscribe(TermsSubscription(sid, r, k=1 + sid % 3))
        for j, (x, y, text) in enumerate(stream):
            changes = e.publish(Message(j, x, y, t=float(j), text=text))
            log.append(sorted((c.sub_id, sorted(c.entered), sorted(c.left)) for c in changes))
            if j % 20 == 19:
                log.append([(sid, e.result(sid)) for sid in range(len(rects))])
        logs.append(log)
        stats.append(e.stats().get("queries", {}).get("kinds", {}).get("terms"))
    assert logs[0] == logs[2] and logs[1] == logs[2]
    grid, plain = stats[0], stats[1]
    assert grid["grid_bounded"] > 0 and grid["grid_tables_built"] > 0
    assert grid["walks"] < plain["walks"]
    assert math.isclose(grid["count_updates"], plain["count_updates"])   # the same buffers
