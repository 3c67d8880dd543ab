"""Design 3 of the ``terms`` kind (issue 36): lanes in blocks of 64, shared rows, thresholds.

A block's rows hold exact counts for the lanes that track a term; a lane is re-ranked only when a
count crosses its threshold (or an untracked term reaches it).  Every change log and result must
equal the brute-force reference's and design 2's: ties at the k-th place decided by name,
points on rectangle edges (counted), more lanes than a block holds (several blocks per cell of
centres, identical rectangles), lanes leaving and entering blocks (unsubscribe, ``until``,
subscriptions during the stream), counts falling to 0 in small windows, and refills."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from skype import Bounds, Engine, Message, ReferenceEngine
from skype.queries import TermsSubscription

BOUNDS = Bounds(0.0, 0.0, 8.0, 8.0)
NAMES = ["tea", "bun", "cake", "über", "zzz", "jam", "pie", "éclair", "bb", "zz"]
coords = st.one_of(st.integers(0, 16).map(lambda v: v / 2.0), st.floats(0.0, 8.0))


@st.composite
def rects(draw):
    a, b = sorted([draw(coords), draw(coords)])
    c, d = sorted([draw(coords), draw(coords)])
    return (a, c, b, d)


def _engine(monkeypatch, design, window, cells=64, tables=(2, 1)):
    from skype.querykinds import CoreQueryKinds

    monkeypatch.setattr(CoreQueryKinds, "TERMS_DESIGN", design)
    monkeypatch.setattr(CoreQueryKinds, "TERMS_GRID", cells)
    monkeypatch.setattr(CoreQueryKinds, "TERMS_GRID_TABLES", tables)
    return Engine(bounds=BOUNDS, window=window, snapshots=True)


def _step_log(changes):
    return sorted((c.sub_id, sorted(c.entered), sorted(c.left)) for c in changes)


@pytest.mark.parametrize("tables", [(2, 1), (1 << 30, 1 << 30)])
@settings(max_examples=40, deadline=None)
@given(stream=st.lists(st.tuples(coords, coords, st.lists(st.sampled_from(NAMES), min_size=1, max_size=5)),
                       min_size=1, max_size=80),
       subs=st.lists(st.tuples(rects(), st.integers(1, 3), st.integers(0, 4)), min_size=1, max_size=90),
       window=st.integers(1, 20), late=st.integers(0, 80), drop=st.integers(0, 80))
def test_terms_blocks_equal_reference_with_many_lanes_ties_and_edges(tables, stream, subs, window, late, drop):
    """Up to 90 subscriptions (more than a block's 64 lanes: a second block in the same cell of
    centres; copies of one rectangle), lattice points on rectangle and cell edges, names that tie
    at the k-th place, small windows, subscriptions registered during the stream, a third of them
    with ``until`` and some unsubscribed and their lanes reused: every step's change log and every
    result equals the reference's.  With count tables from 2 messages, and with none (every
    untracked term bounded by its window count: one bound for the block, walks per lane)."""
    with pytest.MonkeyPatch.context() as mp:
        engines = [_engine(mp, "blocks", window, tables=tables), ReferenceEngine(bounds=BOUNDS, window=window)]
    logs: list[list] = [[], []]
    for i, e in enumerate(engines):
        live: set[int] = set()
        for j, (x, y, words) in enumerate(stream):
            if j == min(late, len(stream) - 1):
                for sid, (r, k, copies) in enumerate(subs):
                    until = float(j + copies * 5) if sid % 3 == 0 else None
                    e.subscribe(TermsSubscription(sid, r, k=k, until=until))
                    live.add(sid)
            if j == drop:
                for sid in sorted(live)[::4]:
                    if e.has_subscription(sid):
                        e.unsubscribe(sid)
                for sid, (r, k, _) in enumerate(subs[:8]):     # new lanes where old ones left
                    if not e.has_subscription(1000 + sid):
                        e.subscribe(TermsSubscription(1000 + sid, r, k=k))
            logs[i].append(_step_log(e.publish(Message(j, x, y, t=float(j), text=" ".join(words)))))
            logs[i].append([(sid, e.result(sid)) for sid in [*range(len(subs)), *range(1000, 1008)]
                            if e.has_subscription(sid)])
    assert logs[0] == logs[1]


@pytest.mark.parametrize("seed,tables", [(0, (4, 2)), (1, (4, 2)), (2, (1 << 30, 1 << 30))])
def test_terms_blocks_equal_design_2_and_reference_on_a_skewed_stream(monkeypatch, seed, tables):
    """200 overlapping rectangles (four blocks or more, 40 of them identical) under a Zipf
    vocabulary of 60 names, a window of 300: the change logs and results of design 3 equal design
    2's and the reference's; the counters show the design at work: far fewer re-ranks than lane
    visits, crossings, bounds per block and per lane, bounded walks and refills all taken.  Without
    count tables (seed 2) a term is bounded by its window count, once for the block, and the lanes
    of one block walk it one after the other (each lane's bound is its own)."""
    rng = np.random.default_rng(seed)
    names = [f"w{i:02d}" for i in range(60)]
    p = 1.0 / np.arange(1, 61)
    p /= p.sum()
    rects = [(x, y, x + w, y + w) for x, y, w in zip(rng.uniform(0, 5, 160), rng.uniform(0, 5, 160),
                                                     rng.uniform(1, 3, 160))]
    rects += [(2.0, 2.0, 5.0, 5.0)] * 40
    stream = [(float(rng.uniform(0, 8)), float(rng.uniform(0, 8)),
               " ".join(rng.choice(names, size=int(rng.integers(1, 7)), p=p))) for _ in range(1200)]
    logs, stats = [], []
    for make in (lambda mp: _engine(mp, "blocks", 300, 16, tables), lambda mp: _engine(mp, "buffers", 300, 16, tables),
                 lambda mp: ReferenceEngine(bounds=BOUNDS, window=300)):
        with pytest.MonkeyPatch.context() as mp:
            e = make(mp)
        log = []
        for sid, r in enumerate(rects):
            e.subscribe(TermsSubscription(sid, r, k=1 + sid % 4))
        for j, (x, y, text) in enumerate(stream):
            if j == 700:
                for sid in range(0, 200, 7):
                    e.unsubscribe(sid)
            log.append(_step_log(e.publish(Message(j, x, y, t=float(j), text=text))))
            if j % 100 == 99:
                log.append([(sid, e.result(sid)) for sid in range(len(rects)) if e.has_subscription(sid)])
        logs.append(log)
        stats.append(e.stats().get("queries", {}).get("kinds", {}).get("terms"))
    assert logs[0] == logs[2] and logs[1] == logs[2]
    assert sum(len(c[1]) + len(c[2]) for step in logs[2][:-1] for c in step if len(c) == 3) > 100   # not vacuous
    b = stats[0]["blocks"]
    assert b["blocks"] >= 4 and b["rows"] > 0
    visits = stats[1]["matches"]                        # design 2: (subscription, event) visits
    assert b["reranks"] < visits / 5                    # a lane is re-ranked only when crossed
    assert b["crossings"] > 0 and b["block_bounded"] > 0 and b["lane_bounded"] > 0
    assert b["walks"] > b["walks_bounded"] > 0 and b["refills"] >= len(rects)
    assert b["light_reranks"] > b["light_falls"] > 0          # members' falls re-ranked from the reserve too
    if tables[0] == 4:
        assert b["refills"] > len(rects)                    # refills taken (with count tables)


def test_terms_blocks_counts_on_rectangle_edges_and_ties_by_name():
    """Messages exactly on a lane's edges and corners count (edges included); equal counts order
    by name (code points: "bun" < "zzz" < "é"); a term whose count falls to 0 leaves and the result
    shrinks below k."""
    with pytest.MonkeyPatch.context() as mp:
        e = _engine(mp, "blocks", 4)
    e.subscribe(TermsSubscription(1, (1.0, 1.0, 3.0, 3.0), k=2))
    e.subscribe(TermsSubscription(2, (1.0, 1.0, 3.0, 3.0), k=1))
    assert e.publish(Message(0, 1.0, 1.0, t=0.0, text="zzz")) and e.result(1)[0].term == "zzz"
    e.publish(Message(1, 3.0, 3.0, t=1.0, text="é"))           # the far corner counts
    assert [(c.term, c.count) for c in e.result(1)] == [("zzz", 1), ("é", 1)]
    e.publish(Message(2, 3.0, 1.0, t=2.0, text="bun"))         # a tie of three: by name
    assert [(c.term, c.count) for c in e.result(1)] == [("bun", 1), ("zzz", 1)]
    assert [c.term for c in e.result(2)] == ["bun"]
    e.publish(Message(3, 3.0000001, 2.0, t=3.0, text="é"))      # just outside: no count
    assert [(c.term, c.count) for c in e.result(1)] == [("bun", 1), ("zzz", 1)]
    for j in range(4, 8):                                       # all expire: results empty
        e.publish(Message(j, 7.0, 7.0, t=float(j), text="jam"))
    assert e.result(1) == [] and e.result(2) == []


@pytest.mark.parametrize("seed", [2, 3])
def test_terms_blocks_equal_reference_on_generated_tweets(monkeypatch, seed):
    """The tweets generator's rectangles (36 x 18 degrees around sampled messages, many in one
    block) and its flat term law (near-ties at the k-th place, most terms without a count table
    in a window of 400): lanes of one block walk the same untracked term one after another, and
    each lane's bound must come from its own walk.  Every step's change log equals the
    reference's."""
    from skype.data import make_workload
    from skype.data.peer_workloads import peer_subscriptions
    from skype.querykinds import CoreQueryKinds

    monkeypatch.setattr(CoreQueryKinds, "TERMS_DESIGN", "blocks")
    w = make_workload("tweets", num_subs=1, num_messages=1000, seed=seed)
    _, subs = peer_subscriptions(w.messages, w.vocabulary, 60, np.random.default_rng(seed), kinds=dict(terms=1),
                                 area=0.01, k=5, bounds=w.bounds)
    engines = [Engine(vocabulary=w.vocabulary.copy(), bounds=w.bounds, window=400, snapshots=True),
               ReferenceEngine(vocabulary=w.vocabulary.copy(), bounds=w.bounds, window=400)]
    logs: list[list] = [[], []]
    for i, e in enumerate(engines):
        for s in subs:
            e.subscribe(s)
        for chunk in w.messages.batches(50):
            log = e.publish_batch(chunk)        # rows (at, subscription, term id, entered), by step
            logs[i].append(sorted(zip(log.at.tolist(), log.sub.tolist(), log.msg.tolist(), log.entered.tolist())))
            logs[i].append(list(e.results_by_kind()))
    assert logs[0] == logs[1]
    assert sum(len(step) for step in logs[1][::2]) > 100       # changes happen: not vacuous


NO_BOUND = (1 << 64) - 1


def _key(count, label):
    return ((0xFFFFFFFF - count) << 32) | label


@settings(max_examples=25, deadline=None)
@given(stream=st.lists(st.tuples(coords, coords, st.lists(st.sampled_from(NAMES), min_size=1, max_size=5)),
                       min_size=1, max_size=60),
       subs=st.lists(st.tuples(rects(), st.integers(1, 3)), min_size=1, max_size=70),
       window=st.integers(1, 15))
def test_terms_blocks_lane_invariants_with_the_reserve(stream, subs, window):
    """After every step, each lane's state against brute-force counts of its rectangle: tracked
    counts exact; members below ``theta``, tracked non-members (with a count) at or above it;
    the reserve holds tracked non-members only (its list and its rows' bits agree), and every
    tracked non-member with a count outside it is at or above the gate; every untracked term
    with a count is at or above the bound, and bound >= gate >= theta.  These make a light
    re-rank (the top k of members and reserve, below the gate) the exact top-k."""
    with pytest.MonkeyPatch.context() as mp:
        e = _engine(mp, "blocks", window, tables=(2, 1))
    for sid, (r, k) in enumerate(subs):
        e.subscribe(TermsSubscription(sid, r, k=k))
    kinds = e._kind_queries
    core = kinds._core
    recent: list[tuple[float, float, set[str]]] = []
    for j, (x, y, words) in enumerate(stream):
        e.publish(Message(j, x, y, t=float(j), text=" ".join(words)))
        recent = (recent + [(x, y, set(words))])[-window:]
        for sid, (r, _) in enumerate(subs):
            counts: dict[str, int] = {}
            for mx, my, ws in recent:
                if r[0] <= mx <= r[2] and r[1] <= my <= r[3]:
                    for w in ws:
                        counts[w] = counts.get(w, 0) + 1
            theta, gate, bound, tracked, members, reserve = core.terms_kind.lane_state(e._kinds[sid][1])
            names = {e.vocabulary.term(t): c for t, c in tracked.items()}
            label = {w: kinds._labels.by_id[e.vocabulary.id(w)] for w in counts}
            assert theta <= gate <= bound
            for w, c in names.items():
                assert c == counts.get(w, 0)
            member_names = {e.vocabulary.term(t) for t in members}
            reserve_names = {e.vocabulary.term(t) for t in reserve}
            assert member_names <= set(names) and reserve_names <= set(names) - member_names
            for w, c in counts.items():
                key = _key(c, label[w])
                if w in member_names:
                    assert key < theta
                elif w not in names:
                    assert key >= bound
                else:
                    assert key >= theta
                    if w not in reserve_names:
                        assert key >= gate
