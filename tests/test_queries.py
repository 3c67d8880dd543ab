"""The query kinds beside topk: validation, the expression language, exact answers on
adversarial cases, core against reference on a seeded workload, and the command line."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

from skype import Bounds, Engine, InputError, Message, ReferenceEngine, Subscription
from skype.data import make_workload
from skype.data.peer_workloads import peer_queries, peer_subscriptions
from skype.queries import (KnnSubscription, Neighbor, RangeSubscription, TermCount, TermsSubscription,
                           parse_expression)
from skype.run import main

BOUNDS = Bounds(0.0, 0.0, 10.0, 10.0)
ENGINES = {"core": functools.partial(Engine, snapshots=True), "reference": ReferenceEngine}


def _engine(kind="core", **kw):
    kw.setdefault("window", 10)
    return ENGINES[kind](bounds=BOUNDS, **kw)


# ----------------------------------------------------------------------------------- validation

BAD_SUBSCRIPTIONS = [
    (RangeSubscription(1, (0, 0, 1, 1), terms=["a"], match="a AND"), "E041"),
    (RangeSubscription(2, (0, 0, 1, 1), match="(coffee OR tea"), "E041"),
    (RangeSubscription(3, (0, 0, 1, 1), match="coffee tea"), "E041"),
    (RangeSubscription(4, (0, 0, 1, 1), match="coffee AND the"), "E041"),
    (RangeSubscription(5, (0, 0, 1, 1), match="OR coffee"), "E041"),
    (RangeSubscription(6, (2, 0, 1, 1), terms=["a"]), "E042"),
    (RangeSubscription(7, (0, 3, 1, 1)), "E042"),
    (RangeSubscription(8, (0, 0, float("nan"), 1)), "E042"),
    (RangeSubscription(9, (0, 0, 1)), "E042"),
    (RangeSubscription(10, (0, 0, 1, 1), terms=["tea"], match="coffee OR bagel"), "E045"),
    (RangeSubscription(11, (0, 0, 1, 1), match=3), "E044"),
    (KnnSubscription(12, 1, 1, k=0, terms=["a"]), "E003"),
    (KnnSubscription(13, 1, 1, k=2, terms=["a"], until=float("inf")), "E049"),
    (KnnSubscription(14, 11, 1, k=2), "E002"),
    (TermsSubscription(15, (0, 0, 1, 1), k=-1), "E003"),
    (Subscription(16, 1, 1, 2, 0.5, text="coffee", until=-5.0), "E043"),
    (RangeSubscription(17, (0, 0, 1, 1), terms=["a"], until=-1.0), "E043"),
]


@pytest.mark.parametrize("sub,code", BAD_SUBSCRIPTIONS, ids=[f"{c}-{s.id}" for s, c in BAD_SUBSCRIPTIONS])
def test_queries_bad_subscription_names_record_and_code(sub, code):
    engine = _engine()
    engine.publish(Message(1, 1, 1, t=0.0, text="coffee"))
    with pytest.raises(InputError) as err:
        engine.subscribe(sub)
    assert err.value.code == code
    assert f"record id {sub.id}" in str(err.value)
    assert not engine.has_subscription(sub.id)


@pytest.mark.parametrize("kind,fields,code", [
    ("nearest", dict(x=1, y=1), "E040"),
    ("range", dict(rect=(0, 0, 1, 1), last=0), "E047"),
    ("range", dict(rect=(0, 0, 1, 1), until=4), "E046"),
    ("terms", dict(rect=(0, 0, 1, 1), text="a"), "E046"),
    ("knn", dict(x=1), "E011"),
    ("topk", dict(x=1, y=1, k=2, alpha=0.5), "E013"),
])
def test_queries_bad_snapshot(kind, fields, code):
    with pytest.raises(InputError) as err:
        _engine().query(kind, **fields)
    assert err.value.code == code


def test_queries_expression_binds_and_tighter_than_or():
    assert parse_expression("tea OR Milk AND sugar")[0] == ["tea", "milk", "sugar", "AND", "OR"]
    assert parse_expression("(tea OR milk) AND sugar")[0] == ["tea", "milk", "OR", "sugar", "AND"]
    engine = _engine()
    engine.subscribe(RangeSubscription(1, (0, 0, 10, 10), match="coffee OR bagel AND croissant"))
    engine.subscribe(RangeSubscription(2, (0, 0, 10, 10), match="(coffee OR bagel) AND croissant",
                                       text="croissant bagel coffee"))
    engine.publish(Message(1, 1, 1, text="coffee"))
    engine.publish(Message(2, 1, 1, text="bagel"))
    engine.publish(Message(3, 1, 1, text="Bagel croissants croissant"))
    assert engine.result(1) == [3, 1]
    assert engine.result(2) == [3]


def test_queries_duplicate_id_across_kinds_and_unknown_kind_in_file(tmp_path, capsys):
    engine = _engine()
    engine.subscribe(Subscription(1, 1, 1, 2, 0.5, text="coffee"))
    with pytest.raises(InputError) as err:
        engine.subscribe(TermsSubscription(1, (0, 0, 1, 1)))
    assert err.value.code == "E007"
    subs = tmp_path / "s.jsonl"
    msgs = tmp_path / "m.jsonl"
    msgs.write_text(json.dumps({"id": 1, "x": 1, "y": 1, "text": "coffee"}) + "\n")
    subs.write_text(json.dumps({"id": 1, "kind": "range", "rect": [0, 0, 1, 1]}) + "\n"
                    + json.dumps({"id": 2, "kind": "circle", "x": 1, "y": 1}) + "\n")
    assert main(["simulate", "--messages", str(msgs), "--subscriptions", str(subs), "--bounds", "0,0,10,10"]) == 2
    err_text = capsys.readouterr().err
    assert "s.jsonl" in err_text and "line 2" in err_text and "E040" in err_text


# ----------------------------------------------------------------------------------- exact answers


@pytest.mark.parametrize("kind", ["core", "reference"])
def test_queries_ties_edges_and_until(kind):
    engine = _engine(kind, window=4)
    assert engine.subscribe(RangeSubscription(1, (1, 1, 2, 2), terms=["a"], until=3.0)) == []
    engine.subscribe(KnnSubscription(2, 0, 0, k=2, terms=["a", "b"], match="all"))
    engine.subscribe(TermsSubscription(3, (0, 0, 10, 10), k=2))
    engine.publish(Message(10, 1, 1, t=0.0, terms={"a": 1.0, "b": 1.0}))   # a corner of the rectangle
    engine.publish(Message(11, 2, 0, t=1.0, terms={"a": 1.0, "b": 1.0}))   # same distance as 10, newer
    engine.publish(Message(12, 3, 3, t=2.0, terms={"a": 1.0, "ü": 1.0}))
    assert engine.result(1) == [10]
    assert engine.result(2) == [Neighbor(10, 2 ** 0.5), Neighbor(11, 2.0)]
    assert engine.result(3) == [TermCount("a", 3), TermCount("b", 2)]
    changes = engine.publish(Message(13, 2, 2, t=3.5, terms={"b": 1.0, "ü": 2.0}))  # ends subscription 1
    assert any(c.sub_id == 1 and c.left == (10,) for c in changes)
    assert not engine.has_subscription(1)
    assert engine.result(3) == [TermCount("a", 3), TermCount("b", 3)]
    assert engine.query("terms", rect=(0, 0, 10, 10), k=3, last=1.6) == [TermCount("ü", 2), TermCount("a", 1),
                                                                         TermCount("b", 1)]
    assert engine.query("range", rect=(0, 0, 2, 2)) == [13, 11, 10]
    assert engine.query("knn", x=2, y=2, k=2, last=2.0) == [Neighbor(13, 0.0), Neighbor(12, 2 ** 0.5)]
    engine.publish(Message(14, 9, 9, t=4.0, terms={"c": 1.0}))             # 10 expires: the kNN refills
    assert engine.result(2) == [Neighbor(11, 2.0)]


@pytest.mark.parametrize("window", [dict(window=300), dict(window_seconds=250.0)])
def test_queries_core_equals_reference_on_a_mixed_workload(window):
    w = make_workload("tweets", num_subs=1, num_messages=400, seed=4)
    rng = np.random.default_rng(5)
    topk, others = peer_subscriptions(w.messages, w.vocabulary, 80, rng, kinds=dict(topk=1, range=1, knn=1, terms=1),
                                      area=0.02, k=5, bounds=w.bounds)
    queries = peer_queries(w.messages, w.vocabulary, 40, rng, kinds=dict(topk=1, range=1, knn=1, terms=1), k=5,
                           last=200.0, bounds=w.bounds)
    engines = [cls(vocabulary=w.vocabulary.copy(), bounds=w.bounds, **window) for cls in ENGINES.values()]
    logs: list[list] = [[], []]
    for i, e in enumerate(engines):
        e.subscribe_batch(topk)
        for s in others[: len(others) // 2]:
            e.subscribe(s)
        for part, chunk in enumerate(w.messages.batches(50)):
            log = e.publish_batch(chunk)
            logs[i].append(sorted(zip(log.at.tolist(), log.sub.tolist(), log.msg.tolist(), log.entered.tolist())))
            if part == 2:
                for s in others[len(others) // 2:]:
                    e.subscribe(s)
            q = queries[part]
            logs[i].append(e.query(q["kind"], **{k: v for k, v in q.items() if k not in ("op", "qid", "kind")}))
    assert logs[0] == logs[1]
    assert list(engines[0].results_by_kind()) == list(engines[1].results_by_kind())


@pytest.mark.parametrize("seed", [0, 1])
def test_queries_terms_buffers_equal_reference_under_ties_and_churn(seed):
    """``terms`` subscriptions keep a buffer of 2k terms and a bound, not every count: small k, a
    small vocabulary (many tied counts, decided by name) and nested, overlapping rectangles make
    terms enter and leave buffers, bounds fall and buffers refill; every step's change log and
    every result must equal the brute-force reference's."""
    rng = np.random.default_rng(seed)
    names = ["a", "b", "c", "d", "e", "f", "g", "zz", "ä", "é"]
    engines = [ENGINES[k](bounds=BOUNDS, window=60) for k in ENGINES]
    subs = [TermsSubscription(i, (x, y, x + w, y + w), k=int(rng.integers(1, 4)))
            for i, (x, y, w) in enumerate(zip(rng.uniform(0, 6, 24), rng.uniform(0, 6, 24), rng.uniform(0.5, 5, 24)))]
    subs.append(TermsSubscription(99, (0, 0, 10, 10), k=3))
    logs: list[list] = [[], []]
    for i, e in enumerate(engines):
        r = np.random.default_rng(seed + 100)
        for s in subs[:12]:
            e.subscribe(s)
        for j in range(400):
            if j == 150:
                for s in subs[12:]:
                    e.subscribe(s)
            if j == 260:
                e.unsubscribe(3)
            terms = {str(n): 1.0 for n in r.choice(names, size=int(r.integers(1, 4)), replace=False,
                                                   p=np.linspace(3, 1, len(names)) / np.linspace(3, 1, len(names)).sum())}
            changes = e.publish(Message(j, float(r.uniform(0, 10)), float(r.uniform(0, 10)), t=float(j), terms=terms))
            logs[i].append(sorted((c.sub_id, sorted(c.entered), sorted(c.left)) for c in changes))
            if j % 50 == 49:
                logs[i].append([(sid, e.result(sid)) for sid in sorted(s.id for s in subs) if e.has_subscription(sid)])
    assert logs[0] == logs[1]
    assert sum(len(c[1]) + len(c[2]) for step in logs[0][::9] for c in step if len(c) == 3) > 50  # not vacuous


def _run_logged(engines, subs, steps, make_message, *, late=(), drop=(), results_every=25):
    """Publish the same stream to every engine; the change log of each step and periodic results."""
    logs: list[list] = [[] for _ in engines]
    for i, e in enumerate(engines):
        rng = np.random.default_rng(7)
        for s in subs:
            e.subscribe(s)
        for j in range(steps):
            for s in late if j == steps // 3 else ():
                e.subscribe(s)
            for sid in drop if j == steps // 2 else ():
                e.unsubscribe(sid)
            changes = e.publish(make_message(j, rng))
            logs[i].append(sorted((c.sub_id, sorted(c.entered), sorted(c.left)) for c in changes))
            if j % results_every == results_every - 1:
                ids = sorted({s.id for s in [*subs, *late]})
                logs[i].append([(sid, e.result(sid)) for sid in ids if e.has_subscription(sid)])
    return logs


@pytest.mark.parametrize("knn_index", [True, False])
def test_queries_knn_index_equals_reference_under_distance_ties_expiry_and_until(monkeypatch, knn_index):
    """The kNN grid posts each subscription with the box of its k-th distance circle (the whole
    plane while its buffer is complete) and reposts it only when a refill widens it.  Points on
    a 0.5 grid make many equal distances (decided by newest first); a window of 40 expires the
    nearest entries, so buffers refill and boxes widen; some subscriptions have no predicate
    (posted under term 0), some an AND, some end with ``until``, one is dropped and some come late."""
    from skype.querykinds import CoreQueryKinds

    monkeypatch.setattr(CoreQueryKinds, "KNN_INDEX", knn_index)
    rng = np.random.default_rng(3)
    subs = []
    for i in range(30):
        x, y = (float(v) for v in rng.integers(0, 21, 2) / 2)
        kw = [dict(), dict(terms=["tea"]), dict(terms=["tea", "cake"], match="any"),
              dict(terms=["tea", "cake"], match="all"), dict(match="(tea AND bun) OR pie")][i % 5]
        subs.append(KnnSubscription(i, x, y, k=int(rng.integers(1, 4)), until=60.0 + i if i % 7 == 3 else None, **kw))
    late = [KnnSubscription(100 + i, float(i), 5.0, k=2, terms=["cake"]) for i in range(5)]
    names = ["tea", "cake", "bun", "pie", "jam"]

    def message(j, r):
        terms = {str(n): 1.0 for n in r.choice(names, size=int(r.integers(1, 4)), replace=False)}
        return Message(j, float(r.integers(0, 21)) / 2, float(r.integers(0, 21)) / 2, t=float(j), terms=terms)

    engines = [ENGINES[k](bounds=BOUNDS, window=40) for k in ENGINES]
    logs = _run_logged(engines, subs, 300, message, late=late, drop=(4, 101))
    assert logs[0] == logs[1]
    knn = engines[0].stats()["queries"]["kinds"]["knn"]
    assert knn["index"] is knn_index
    if knn_index:   # buffers refilled wider than their box: reposted (not vacuous)
        assert knn["index_posts"] > len(subs) + len(late)
        assert knn["index_grown"] == knn["index_posts"] - len(subs) - len(late)   # reposts grow in place
    assert knn["reevaluations"] > len(subs) + len(late)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_queries_knn_netting_of_crossings_equals_reference_when_several_expire_per_step(seed):
    """kNN steps are netted from the crossings of each buffer's k-th position (no copy of the
    top-k): with a time window and bursts of equal timestamps, one step expires several buffered
    messages, pulls the (k+1)-th entries up, refills buffers and inserts an arrival that may push
    an entry out that an expiry had just pulled in (a crossing and its reverse net to nothing).
    Points on a 0.5 grid make equal distances (newest first).  Change logs and results are the
    reference's at every step."""
    rng = np.random.default_rng(seed)
    subs = [KnnSubscription(i, float(rng.integers(0, 21)) / 2, float(rng.integers(0, 21)) / 2,
                            k=int(rng.integers(1, 5)), terms=["tea"] if i % 3 == 0 else None) for i in range(25)]
    engines = [ENGINES[k](bounds=BOUNDS, window_seconds=6.0) for k in ENGINES]
    logs: list[list] = [[] for _ in engines]
    for i, e in enumerate(engines):
        r = np.random.default_rng(seed + 10)
        for s in subs:
            e.subscribe(s)
        t = 0.0
        for j in range(400):
            t += float(r.choice([0.0, 0.0, 1.0, 3.0]))       # bursts: several expire at the next gap
            terms = {"tea": 1.0} if r.random() < 0.6 else {"cake": 1.0}
            changes = e.publish(Message(j, float(r.integers(0, 21)) / 2, float(r.integers(0, 21)) / 2, t=t,
                                        terms=terms))
            logs[i].append(sorted((c.sub_id, sorted(c.entered), sorted(c.left)) for c in changes))
            if j % 20 == 19:
                logs[i].append([(s.id, e.result(s.id)) for s in subs])
    assert logs[0] == logs[1]
    multi = sum(1 for step in logs[0] if sum(len(c[2]) for c in step if len(c) == 3) > 1)
    assert multi > 20                      # steps where several entries left (not vacuous)


@pytest.mark.parametrize("tables", [(4, 3, 2), (16, 6, 3)])
def test_queries_snapshot_terms_from_count_tables_equals_reference(monkeypatch, tables):
    """Snapshot ``terms`` without ``last`` reads per-term count tables of the window (visited in
    decreasing window count, a walk only where a table's bound reaches the k-th count) and counts
    the rectangle's messages only when a term without a table could still rank.  Points and
    rectangle edges on a 0.5 grid (cell edges of both grids), a vocabulary of 12 names whose
    counts tie often (ties by name), then other names (tables built and dropped as counts cross
    the thresholds), queries throughout: every answer is the reference's, and both
    ways of answering are used."""
    from skype.querykinds import CoreQueryKinds

    monkeypatch.setattr(CoreQueryKinds, "SNAPSHOT_TERMS_GRID", tables)
    names = ["ab", "b", "ba", "c", "d", "e", "f", "g", "h", "i", "j", "k"]
    later = ["l", "m", "n", "o", "ab", "b", "p"]
    engines = [ENGINES[k](bounds=BOUNDS, window=150) for k in ENGINES]
    answers: list[list] = [[] for _ in engines]
    for i, e in enumerate(engines):
        r = np.random.default_rng(tables[0])
        q = np.random.default_rng(5)
        for j in range(600):
            pool = names if j < 300 else later                # the first names leave: tables dropped
            terms = {str(n): 1.0 for n in r.choice(pool, size=int(r.integers(1, 5)), replace=False,
                                                   p=np.linspace(4, 1, len(pool)) / np.linspace(4, 1, len(pool)).sum())}
            e.publish(Message(j, float(r.integers(0, 21)) / 2, float(r.integers(0, 21)) / 2, t=float(j), terms=terms))
            if j >= 100 and j % 5 == 0:
                x0, x1 = sorted(float(v) for v in q.integers(0, 21, 2) / 2)
                y0, y1 = sorted(float(v) for v in q.integers(0, 21, 2) / 2)
                answers[i].append(e.query("terms", rect=(x0, y0, x1, y1), k=int(q.integers(1, 6))))
    assert answers[0] == answers[1]
    snap = engines[0].stats()["queries"]["snapshots"]
    assert snap["terms_fast"] > 10 and snap["terms_scans"] > 0 and snap["grid"]["tables_dropped"] > 0


@pytest.mark.parametrize("grid", [0, 16])
def test_queries_terms_bounded_walks_equal_reference(monkeypatch, grid):
    """A vocabulary of 80 names over overlapping rectangles fills every ``terms`` buffer, so an
    arriving term outside a buffer is counted by the walk that stops at an upper bound below the
    buffer's last count, or by the upper bound remembered from an earlier walk plus one per
    arrival (design 1, ``grid`` 0), or bounded by the shared per-cell counts (design 2); ties
    (equal counts, decided by name) and expiry of the top terms too."""
    from skype.querykinds import CoreQueryKinds

    monkeypatch.setattr(CoreQueryKinds, "TERMS_GRID", grid)
    monkeypatch.setattr(CoreQueryKinds, "TERMS_GRID_TABLES", (8, 4))
    monkeypatch.setattr(CoreQueryKinds, "TERMS_DESIGN", "buffers")     # design 1/2's counters
    rng = np.random.default_rng(11)
    names = [f"t{i:02d}" for i in range(80)]
    p = 1.0 / np.arange(1, 81)
    p /= p.sum()
    subs = [TermsSubscription(i, (x, y, x + w, y + w), k=int(rng.integers(1, 4)))
            for i, (x, y, w) in enumerate(zip(rng.uniform(0, 5, 16), rng.uniform(0, 5, 16), rng.uniform(2, 5, 16)))]

    def message(j, r):
        terms = {str(n): 1.0 for n in r.choice(names, size=int(r.integers(1, 6)), replace=False, p=p)}
        return Message(j, float(r.uniform(0, 10)), float(r.uniform(0, 10)), t=float(j), terms=terms)

    engines = [ENGINES[k](bounds=BOUNDS, window=150) for k in ENGINES]
    logs = _run_logged(engines, subs, 500, message, drop=(2,))
    assert logs[0] == logs[1]
    terms = engines[0].stats()["queries"]["kinds"]["terms"]
    assert terms["walks_bounded"] > 0 and terms["walks"] > terms["walks_bounded"]   # both outcomes taken
    if grid:
        assert terms["grid_bounded"] > 0 and terms["walks_saved"] == 0   # the shared counts, no memo
    else:
        assert terms["walks_saved"] > 0    # remembered upper bounds answered some arrivals


@pytest.mark.parametrize("trigger", ["knn", "terms", "snapshot-range", "snapshot-topk"])
def test_queries_term_trees_built_when_first_needed_equal_reference(trigger):
    """Range-only traffic keeps the query window's spatial tree only (range results are then read
    through it, cover and predicate tested per message); the first kNN or terms subscription or
    snapshot that reads per-term trees builds them from the window.  Every change log, result
    and answer equals the reference's before, at and after that point."""
    rng = np.random.default_rng(7)
    names = ["tea", "bun", "cake", "dog", "über"]
    subs = [RangeSubscription(i, (x, y, x + w, y + w), **p) for i, (x, y, w, p) in enumerate(zip(
        rng.uniform(0, 7, 30), rng.uniform(0, 7, 30), rng.uniform(0.5, 4, 30),
        [dict(terms=["tea", "bun"]), dict(terms=["cake", "über"], match="all"),
         dict(match="tea AND (bun OR dog)"), {}] * 8))]
    late = {"knn": KnnSubscription(100, 5, 5, k=3, terms=["tea", "cake"]), "terms": TermsSubscription(100, (2, 2, 8, 8), k=2)}
    engines = [ENGINES[k](bounds=BOUNDS, window=50) for k in ENGINES]
    logs: list[list] = [[], []]
    for i, e in enumerate(engines):
        r = np.random.default_rng(8)
        e.subscribe_batch(subs)
        for j in range(160):
            if j == 80:
                if i == 0:
                    assert e.stats()["queries"]["term_trees"] is False
                if trigger in late:
                    logs[i].append(e.subscribe(late[trigger]))
                elif trigger == "snapshot-range":
                    logs[i].append(e.query("range", rect=(1, 1, 9, 9), terms=["bun", "über"]))
                else:
                    logs[i].append(e.query("topk", x=3, y=3, k=4, alpha=0.5, terms={"tea": 1.0, "dog": 2.0}))
                if i == 0:
                    assert e.stats()["queries"]["term_trees"] is True
            terms = {str(n): 1.0 for n in r.choice(names, size=int(r.integers(1, 4)), replace=False)}
            changes = e.publish(Message(j, float(r.uniform(0, 10)), float(r.uniform(0, 10)), t=float(j), terms=terms))
            logs[i].append(sorted((c.sub_id, sorted(c.entered), sorted(c.left)) for c in changes))
            if j % 20 == 19:
                logs[i].append(list(e.results_by_kind()))
                logs[i].append(e.query("range", rect=(0, 0, 6, 6)))
    assert logs[0] == logs[1]
    assert sum(len(r[2]) for step in logs[0] if isinstance(step, list) for r in step
               if isinstance(r, tuple) and len(r) == 3 and r[1] == "range") > 100  # not vacuous


@pytest.mark.parametrize("window", [dict(window=40), dict(window_seconds=30.0)])
def test_queries_topk_core_window_built_at_first_topk_subscription_equals_reference(window):
    """With the query window and no topk subscription, the top-k core keeps no window; the first
    topk subscription builds it from the query window's messages.  Its initial result, every
    later change log and result, the window's ids and duplicate detection equal the
    reference's, on a count and a time window (with clock advances while the core waits)."""
    rng = np.random.default_rng(9)
    names = ["tea", "bun", "cake", "dog", "über"]
    ranges = [RangeSubscription(i, (x, y, x + 3, y + 3), terms=["tea", "über"]) for i, (x, y) in
              enumerate(zip(rng.uniform(0, 7, 10), rng.uniform(0, 7, 10)))]
    topk = [Subscription(50 + i, float(x), float(y), 3, 0.5, terms={"tea": 1.0, "cake": 2.0})
            for i, (x, y) in enumerate(zip(rng.uniform(0, 10, 5), rng.uniform(0, 10, 5)))]
    engines = [ENGINES[k](bounds=BOUNDS, **window) for k in ENGINES]
    logs: list[list] = [[], []]
    for i, e in enumerate(engines):
        r = np.random.default_rng(10)
        e.subscribe_batch(ranges)
        for j in range(120):
            if j == 70:
                if i == 0:
                    assert e.stats()["core_window"] != "kept"
                    assert e.stats()["window_size"] == len(e.window_ids()) > 0
                with pytest.raises(InputError, match="E019"):
                    e.publish(Message(int(e.window_ids()[-1]), 1.0, 1.0, t=float(j), terms={"tea": 1.0}))
                logs[i].append(list(e.window_ids()))
                logs[i].append([e.subscribe(s) for s in topk[:3]])
                if i == 0:
                    assert e.stats()["core_window"] == "kept"
            if j == 90:
                e.subscribe_batch(topk[3:])
            if j % 10 == 5 and "window_seconds" in window:
                logs[i].append(e.advance(float(j) - 0.5))
            terms = {str(n): float(r.integers(1, 3)) for n in r.choice(names, size=int(r.integers(1, 4)), replace=False)}
            changes = e.publish(Message(j, float(r.uniform(0, 10)), float(r.uniform(0, 10)), t=float(j), terms=terms))
            logs[i].append(sorted((c.sub_id, sorted(c.entered), sorted(c.left)) for c in changes))
            if j % 20 == 19:
                logs[i].append(list(e.results_by_kind()))
                logs[i].append(list(e.window_ids()))
    assert logs[0] == logs[1]
    assert sum(len(c[1]) for step in logs[0][-60:] if isinstance(step, list) for c in step
               if isinstance(c, tuple) and len(c) == 3 and c[0] >= 50) > 10  # topk changes: not vacuous


# ----------------------------------------------------------------------------------- command line


def test_queries_cli_generate_then_simulate_core_equals_reference(tmp_path):
    files = {name: tmp_path / f"{name}.jsonl" for name in ("m", "s", "e")}
    assert main(["generate", "--dataset", "tweets", "--num-subs", "80", "--num-messages", "1000", "--seed", "2",
                 "--sub-kinds", "topk,range=2,knn,terms", "--k", "5", "--queries", "30", "--query-last", "400",
                 "--messages-out", str(files["m"]), "--subscriptions-out", str(files["s"]),
                 "--events-out", str(files["e"])]) == 0
    kinds = {json.loads(line).get("kind", "topk") for line in files["s"].read_text().splitlines()}
    assert kinds == {"topk", "range", "knn", "terms"}
    out = {}
    for engine in ("core", "reference"):
        paths = [tmp_path / f"{engine}-{n}.jsonl" for n in ("r", "a", "c")]
        assert main(["simulate", "--engine", engine, "--events", str(files["e"]), "--subscriptions", str(files["s"]),
                     "--window", "400", "--results-out", str(paths[0]), "--answers-out", str(paths[1]),
                     "--changes-out", str(paths[2])]) == 0
        out[engine] = [p.read_text() for p in paths]
    assert out["core"] == out["reference"]
    answers = [json.loads(line) for line in out["core"][1].splitlines()]
    assert len(answers) == 30 and {a["kind"] for a in answers} == {"topk", "range", "knn", "terms"}
    results = [json.loads(line) for line in out["core"][0].splitlines()]
    assert {next(k for k in r if k != "id") for r in results} == {"topk", "matches", "terms"}


def test_queries_distributed_refuses_other_kinds_naming_kind_and_method(tmp_path, capsys):
    subs, msgs = tmp_path / "s.jsonl", tmp_path / "m.jsonl"
    msgs.write_text(json.dumps({"id": 1, "x": 1, "y": 1, "text": "coffee"}) + "\n")
    # prefix serves range and knn with terms (tests/test_spark_kinds.py), not terms
    subs.write_text(json.dumps({"id": 1, "kind": "terms", "rect": [0, 0, 2, 2], "k": 2}) + "\n")
    assert main(["distributed", "--messages", str(msgs), "--subscriptions", str(subs), "--method", "prefix",
                 "--checkpoint", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "E048" in err and "'terms'" in err and "prefix" in err


def test_queries_step_timers_add_up_to_the_stream_time(tmp_path):
    """AMP + EMP + flush + other is the measured stream time per message (a count window in
    steady state: each measured message arrives and one expires); the netting is timed
    (``flush_us`` > 0 with knn and terms subscriptions) and each kind's share of it is inside
    its own time; ``parts_us`` splits the same time by kind."""
    m, s, out = tmp_path / "m.jsonl", tmp_path / "s.jsonl", tmp_path / "metrics.json"
    assert main(["generate", "--dataset", "tweets", "--num-subs", "200", "--num-messages", "1500", "--seed", "3",
                 "--sub-kinds", "topk,range,knn,terms", "--k", "5",
                 "--messages-out", str(m), "--subscriptions-out", str(s)]) == 0
    assert main(["simulate", "--messages", str(m), "--subscriptions", str(s), "--window", "500", "--fill-window",
                 "--timers", "--no-progress", "--metrics-out", str(out)]) == 0
    d = json.loads(out.read_text())
    n = d["messages"]
    assert n == 500
    total = d["amp_us"] + d["emp_us"] + d["flush_us"] + d["other_us"]
    assert total == pytest.approx(1e6 * d["stream_s"] / n, rel=1e-9)
    assert d["flush_us"] > 0 and d["other_us"] > 0
    kinds = d["engine_stats"]["queries"]["kinds"]
    for kind in ("knn", "terms"):
        assert 0 < kinds[kind]["net_s"] <= kinds[kind]["time_s"]
    assert set(d["parts_us"]) == {"range", "knn", "terms", "query window", "topk"}
    assert sum(d["parts_us"].values()) <= d["amp_us"] + d["emp_us"] + d["flush_us"]


@pytest.mark.parametrize("window", [dict(window=300), dict(window_seconds=250.0)])
@pytest.mark.parametrize("open_at", [0, 3, 6])
def test_queries_window_opened_mid_stream_equals_one_kept_from_the_start(window, open_at):
    """``snapshots=False`` then ``open_queries(window)`` at batch ``open_at`` (the service's lazy
    query window): from there, every change log, snapshot answer and result equals an engine
    made with ``snapshots=True`` and the reference's, on a count and a time window (with clock
    advances); a window that is not the engine's is refused and changes nothing."""
    w = make_workload("tweets", num_subs=1, num_messages=400, seed=4)
    rng = np.random.default_rng(6)
    topk, others = peer_subscriptions(w.messages, w.vocabulary, 60, rng, kinds=dict(topk=1, range=1, knn=1, terms=1),
                                      area=0.02, k=5, bounds=w.bounds)
    queries = peer_queries(w.messages, w.vocabulary, 40, rng, kinds=dict(topk=1, range=1, knn=1, terms=1), k=5,
                           last=200.0, bounds=w.bounds)
    makers = [functools.partial(Engine, snapshots=False), functools.partial(Engine, snapshots=True), ReferenceEngine]
    engines = [cls(vocabulary=w.vocabulary.copy(), bounds=w.bounds, **window) for cls in makers]
    logs: list[list] = [[], [], []]
    for i, e in enumerate(engines):
        kept: list = []  # the lazy engine's copy of its window, as the service keeps one
        e.subscribe_batch(topk)
        for part, chunk in enumerate(w.messages.batches(50)):
            if part == open_at:
                if i == 0:
                    assert not e.queries_open
                    with pytest.raises(InputError, match="E050"):
                        e.subscribe(others[0])
                    window_now = type(chunk).concat(kept) if kept else chunk.slice(0, 0)
                    window_now = window_now.take(np.flatnonzero(np.isin(window_now.ids, e.window_ids())))
                    if len(window_now):
                        with pytest.raises(InputError, match="E023"):
                            e.open_queries(window_now.slice(1, len(window_now)))
                        assert not e.queries_open
                    e.open_queries(window_now)
                    assert e.queries_open
                for s in others:
                    e.subscribe(s)
            log = e.publish_batch(chunk)
            kept.append(chunk)
            if part >= open_at:
                logs[i].append(sorted(zip(log.at.tolist(), log.sub.tolist(), log.msg.tolist(), log.entered.tolist())))
                q = queries[part]
                logs[i].append(e.query(q["kind"], **{k: v for k, v in q.items() if k not in ("op", "qid", "kind")}))
            if "window_seconds" in window and part % 2 == 1:
                last_t = float(chunk.t[-1])
                adv = e.advance_log(last_t)
                if part >= open_at:
                    logs[i].append(sorted(zip(adv.sub.tolist(), adv.msg.tolist(), adv.entered.tolist())))
        logs[i].append(list(e.results_by_kind()))
    assert logs[0] == logs[1] == logs[2]
    assert any(entry for entry in logs[0] if isinstance(entry, list) and entry and isinstance(entry[0], tuple))
