"""Hypothesis state machine: every query kind, ``until`` and snapshots against the oracle.

Subscriptions of all four kinds (range with any/all/expressions, knn, terms, topk) come and go,
some with ``until``; messages arrive (single and in batches) on an adversarial 4x4 grid of
half-unit points (edges, equal distances, equal counts); time windows advance; snapshot
queries of every kind, with and without ``last``, are asked.  After every step every
subscription's result equals tests/query_oracle.py's recomputation, and the changes a step
returned are exactly the difference of the results before and after it.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from skype import Bounds, Engine, Message, ReferenceEngine, Subscription
from skype.model import MessageBatch, TermMatrix
from skype.queries import KnnSubscription, RangeSubscription, TermsSubscription
from query_oracle import QueryOracle, as_plain

BOUNDS = Bounds(0.0, 0.0, 4.0, 4.0)
TERMS = ["t0", "t1", "t2", "ü3", "u4"]
EXPRESSIONS = ["t0 AND (t1 OR t2)", "t1 OR t2 AND t0", "(ü3 OR u4) AND t0", "t2"]

coords = st.one_of(st.integers(0, 8).map(lambda v: v / 2.0), st.floats(0.0, 4.0))
word_sets = st.lists(st.sampled_from(TERMS), min_size=0, max_size=3, unique=True)
msg_terms = st.dictionaries(st.sampled_from(TERMS), st.sampled_from([1.0, 2.0]), min_size=1, max_size=3)


@st.composite
def rects(draw):
    a, b = sorted([draw(coords), draw(coords)])
    c, d = sorted([draw(coords), draw(coords)])
    return (a, c, b, d)


@st.composite
def predicates(draw):
    match = draw(st.sampled_from(["any", "all", "expr"]))
    if match == "expr":
        return {"match": draw(st.sampled_from(EXPRESSIONS))}
    words = draw(word_sets)
    return {"match": match, **({"terms": words} if words else {})}


def make_machine(factory, *, window=None, window_seconds=None):
    class QueryMachine(RuleBasedStateMachine):
        @initialize()
        def start(self):
            kw = dict(window=window) if window else dict(window_seconds=window_seconds)
            self.engine = factory(bounds=BOUNDS, **kw)
            self.oracle = QueryOracle(max_dist=BOUNDS.max_dist, vocabulary=self.engine.vocabulary, **kw)
            self.next_sub = 1
            self.next_msg = 1
            self.t = 0.0

        def _results(self):
            return {sid: as_plain(self.engine.result(sid)) for sid in self.oracle.subs}

        def _entries(self, sid, res):
            return {e if isinstance(e, int) else e[0] for e in res}

        def _check_changes(self, before, changes_by_step):
            after = self._results()
            got = {}
            for c in changes_by_step:
                got.setdefault(c.sub_id, [set(), set()])
                got[c.sub_id][0].update(c.entered)
                got[c.sub_id][1].update(c.left)
            for sid in set(before) | set(after):
                old = self._entries(sid, before.get(sid, []))
                new = self._entries(sid, after.get(sid, []))
                want = [new - old, old - new]
                assert got.get(sid, [set(), set()]) == want, (sid, got.get(sid), want)

        def _subscribe(self, sub):
            got = as_plain(self.engine.subscribe(sub))
            self.oracle.subs[sub.id] = sub
            assert got == self.oracle.result(sub.id)
            self.next_sub += 1

        def _until(self, data):
            return data.draw(st.one_of(st.none(), st.sampled_from([0.0, 0.5, 1.0, 3.0]).map(lambda d: self.t + d)))

        @rule(r=rects(), p=predicates(), data=st.data())
        def sub_range(self, r, p, data):
            self._subscribe(RangeSubscription(self.next_sub, r, until=self._until(data), **p))

        @rule(x=coords, y=coords, k=st.integers(1, 3), p=predicates(), data=st.data())
        def sub_knn(self, x, y, k, p, data):
            self._subscribe(KnnSubscription(self.next_sub, x, y, k, until=self._until(data), **p))

        @rule(r=rects(), k=st.integers(1, 3), data=st.data())
        def sub_terms(self, r, k, data):
            self._subscribe(TermsSubscription(self.next_sub, r, k, until=self._until(data)))

        @rule(x=coords, y=coords, k=st.integers(1, 3), alpha=st.sampled_from([0.0, 0.5, 1.0]), words=msg_terms,
              data=st.data())
        def sub_topk(self, x, y, k, alpha, words, data):
            self._subscribe(Subscription(self.next_sub, x, y, k, alpha, terms=words, until=self._until(data)))

        @rule(data=st.data())
        def unsubscribe(self, data):
            if self.oracle.subs:
                sid = data.draw(st.sampled_from(sorted(self.oracle.subs)))
                self.engine.unsubscribe(sid)
                del self.oracle.subs[sid]

        @rule(x=coords, y=coords, terms=msg_terms, dt=st.sampled_from([0.0, 0.5, 1.0]))
        def publish(self, x, y, terms, dt):
            self.t += dt
            before = self._results()
            changes = self.engine.publish(Message(self.next_msg, x, y, t=self.t, terms=terms))
            self.oracle.publish(self.next_msg, x, y, self.t, terms)
            self.next_msg += 1
            self._check_changes(before, changes)

        @rule(points=st.lists(st.tuples(coords, coords, msg_terms), min_size=2, max_size=4))
        def publish_batch(self, points):
            v = self.engine.vocabulary
            rows = [v.vectorize_terms(terms) for _, _, terms in points]
            ids = np.arange(self.next_msg, self.next_msg + len(points))
            ts = [self.t + 0.5 * i for i in range(len(points))]
            batch = MessageBatch(ids, [p[0] for p in points], [p[1] for p in points], ts, TermMatrix.from_rows(rows))
            log = self.engine.publish_batch(batch)
            for i, (x, y, terms) in enumerate(points):
                self.oracle.publish(int(ids[i]), x, y, ts[i], terms)
            self.next_msg += len(points)
            self.t = ts[-1]
            assert np.all(np.diff(log.at) >= 0)

        if window_seconds is not None:
            @rule(dt=st.sampled_from([0.5, 1.0, 2.0]))
            def advance(self, dt):
                self.t += dt
                before = self._results()
                changes = self.engine.advance(self.t)
                self.oracle.advance(self.t)
                self._check_changes(before, changes)

        @rule(kind=st.sampled_from(["range", "knn", "terms", "topk"]), r=rects(), x=coords, y=coords,
              k=st.integers(1, 4), p=predicates(), words=msg_terms, last=st.sampled_from([None, 0.5, 1.0, 2.5]))
        def snapshot(self, kind, r, x, y, k, p, words, last):
            fields = {"range": dict(rect=r, **p), "knn": dict(x=x, y=y, k=k, **p), "terms": dict(rect=r, k=k),
                      "topk": dict(x=x, y=y, k=k, alpha=0.5, terms=words)}[kind]
            extra = {} if last is None else {"last": last}
            got = as_plain(self.engine.query(kind, **fields, **extra))
            want = self.oracle.answer(kind, fields, last)
            assert got == want, (kind, fields, last)

        @invariant()
        def results_match(self):
            if not hasattr(self, "engine"):
                return
            assert set(self.oracle.subs) == {sid for sid in self.oracle.subs if self.engine.has_subscription(sid)}
            for sid in self.oracle.subs:
                assert as_plain(self.engine.result(sid)) == self.oracle.result(sid), sid

    return QueryMachine


def _terms_grid_engine(**kw):
    """The engine with the terms kind's shared counts on a grid whose cell edges are the
    lattice's (4 cells on the 4x4 space) and a table for every term from one message."""
    from skype.querykinds import CoreQueryKinds

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(CoreQueryKinds, "TERMS_GRID", 4)
        mp.setattr(CoreQueryKinds, "TERMS_GRID_TABLES", (1, 1))
        return Engine(snapshots=True, **kw)


CASES = {
    "core-count3": (functools.partial(Engine, snapshots=True), dict(window=3)),
    "core-count3-terms-grid": (_terms_grid_engine, dict(window=3)),
    "core-time2-terms-grid": (_terms_grid_engine, dict(window_seconds=2.0)),
    "core-time2": (functools.partial(Engine, snapshots=True, term_trees="eager"), dict(window_seconds=2.0)),
    "reference-time2": (ReferenceEngine, dict(window_seconds=2.0)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_query_machine(case):
    factory, kw = CASES[case]
    machine = make_machine(factory, **kw)
    # the profile's examples (conftest), fewer steps each: five machines share the CI budget
    run_state_machine_as_test(machine, settings=settings(stateful_step_count=25))
