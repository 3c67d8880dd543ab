"""RectSubIndex (``rangeindex.pyx``): probes against brute force while rectangles are added,
grown in place (``c_grow``: the cells gained go into sorted tails, merged into the lists when
long) and removed.  Rectangles and points sit on cell edges often (coordinates on a 0.5 grid
over a 16-cell index of [0, 8]), so the POST_INSIDE flags of kept postings are exercised."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from skype._core.rangeindex import RectSubIndex

TERMS = [0, 1, 2, 3]


def _brute(subs: dict, x: float, y: float, terms: list[int]) -> list[int]:
    return sorted(sid for sid, (r, cover) in subs.items()
                  if r[0] <= x <= r[2] and r[1] <= y <= r[3] and set(cover) & set(terms))


coord = st.integers(0, 16).map(lambda v: v / 2)
rect = st.tuples(coord, coord, coord, coord).map(lambda c: (min(c[0], c[2]), min(c[1], c[3]),
                                                            max(c[0], c[2]), max(c[1], c[3])))
op = st.one_of(
    st.tuples(st.just("add"), rect, st.lists(st.sampled_from(TERMS), min_size=1, max_size=3, unique=True)),
    st.tuples(st.just("grow"), st.integers(0, 50), st.tuples(coord, coord, coord, coord)),
    st.tuples(st.just("remove"), st.integers(0, 50)),
    st.tuples(st.just("probe"), st.tuples(coord, coord), st.lists(st.sampled_from(TERMS), min_size=1, max_size=4,
                                                                    unique=True)),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(op, min_size=1, max_size=120))
def test_rect_index_grow_in_place_equals_brute_force(ops):
    index = RectSubIndex(0.0, 0.0, 8.0, 8.0, 16)
    subs: dict[int, tuple] = {}
    slot_of: dict[int, int] = {}
    next_id = 0
    for o in ops:
        if o[0] == "add":
            slot_of[next_id] = index.add(next_id, o[1], np.array(o[2], dtype=np.int64))
            subs[next_id] = (o[1], o[2])
            next_id += 1
        elif o[0] in ("grow", "remove") and subs:
            sid = sorted(subs)[o[1] % len(subs)]
            if o[0] == "remove":
                index.remove(slot_of.pop(sid))
                del subs[sid]
                continue
            r, cover = subs[sid]
            d = o[2]                                      # widen each side by 0..8 half-units
            grown = (max(0.0, r[0] - d[0]), max(0.0, r[1] - d[1]), min(8.0, r[2] + d[2]), min(8.0, r[3] + d[3]))
            index.grow(slot_of[sid], grown)
            subs[sid] = (grown, cover)
        elif o[0] == "probe":
            (x, y), terms = o[1], sorted(o[2])
            assert index.probe(x, y, np.array(terms, dtype=np.uint32)) == _brute(subs, x, y, terms)
    for x in np.arange(0, 8.5, 0.5):                      # every grid point at the end
        for y in np.arange(0, 8.5, 0.5):
            assert index.probe(float(x), float(y), np.array(TERMS, dtype=np.uint32)) == _brute(subs, x, y, TERMS)


def test_rect_index_long_tails_merge_and_probes_stay_exact():
    """Many one-cell rectangles grown to the whole space: tails pass TAIL_MIN and sqrt(list),
    so they are merged (not vacuous), and every probe still equals brute force."""
    index = RectSubIndex(0.0, 0.0, 8.0, 8.0, 16)
    rng = np.random.default_rng(1)
    subs = {}
    for i in range(60):
        x, y = (float(v) for v in rng.integers(0, 16, 2) / 2)
        subs[i] = ((x, y, x + 0.25, y + 0.25), [0])
        assert index.add(i, subs[i][0], np.array([0], dtype=np.int64)) == i
    for i in range(0, 60, 2):
        subs[i] = ((0.0, 0.0, 8.0, 8.0), [0])
        index.grow(i, subs[i][0])
    assert index.tail_stats()["merges"] > 0
    for x in np.arange(0, 8.25, 0.25):
        for y in np.arange(0, 8.25, 0.25):
            assert index.probe(float(x), float(y), np.array([0], dtype=np.uint32)) == _brute(subs, x, y, [0])
