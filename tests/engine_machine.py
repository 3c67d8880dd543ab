"""A Hypothesis state machine that drives any engine and checks it against brute force.

After every step, every subscription's top-k must equal a direct recomputation over the
current window (ids in order, scores to the last bit), and the changes an event returned must
be exactly the difference of the top-k lists before and after it.  The workload is built to be
adversarial: a 4x4 space whose points sit on a half-unit grid (cell borders and corners,
duplicate locations), few terms with few distinct weights (identical scores), extreme alphas,
small k, and small windows (many expirations).

Operations: subscribe (fresh ids, or an id unsubscribed before), unsubscribe, publish (fresh
message ids, or the id of a message that has left the window), publish_batch (several messages,
changes checked message by message), advance (time windows), topn (any n, deeper than k), and
thresholds (never above the k-th score).  Scores are compared bit for bit with
``skype.reference.score``; the independent check of that kernel is tests/test_oracle.py.
"""

from __future__ import annotations


from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import numpy as np

from skype import Bounds, Engine, Message, Subscription
from skype.model import MessageBatch, TermMatrix
from skype.reference import score

BOUNDS = Bounds(0.0, 0.0, 4.0, 4.0)
TERMS = [f"t{i}" for i in range(6)]

coords = st.one_of(st.integers(0, 8).map(lambda v: v / 2.0), st.floats(0.0, 4.0))
term_dicts = st.dictionaries(st.sampled_from(TERMS), st.sampled_from([1.0, 2.0, 0.5]), min_size=1, max_size=3)
alphas = st.one_of(st.sampled_from([0.0, 1.0, 1e-9, 1.0 - 1e-9, 0.5]), st.floats(0.0, 1.0))


def brute_force(engine, subs: dict[int, Subscription], window: list[tuple[int, Message]]):
    vocab = engine.vocabulary
    mvecs = []
    for seq, m in window:
        ids, ws = vocab.vectorize_terms(m.terms)
        mvecs.append((seq, m, {int(t): float(w) for t, w in zip(ids, ws)}))
    out = {}
    for sid, s in subs.items():
        ids, ws = vocab.vectorize_terms(s.terms)
        terms = [(int(t), float(w)) for t, w in zip(ids, ws)]
        scored = []
        for seq, m, mt in mvecs:
            sc = score(terms, s.alpha, s.x, s.y, mt, m.x, m.y, BOUNDS.max_dist)
            if sc is not None:
                scored.append((-sc, -seq, m.id, sc))
        scored.sort()
        out[sid] = [(mid, sc) for _, _, mid, sc in scored[: s.k]]
    return out


def make_machine(engine_factory, *, window: int | None = None, window_seconds: float | None = None):
    class EngineMachine(RuleBasedStateMachine):
        @initialize()
        def start(self):
            kw = {"window": window} if window is not None else {"window_seconds": window_seconds}
            self.engine = engine_factory(bounds=BOUNDS, **kw)
            self.subs: dict[int, Subscription] = {}
            self.window: list[tuple[int, Message]] = []
            self.seq = 0
            self.next_sub = 0
            self.next_msg = 0
            self.clock = 0.0
            self.expected = {}
            self.gone_subs: list[int] = []  # unsubscribed ids, free for reuse
            self.used_msgs: set[int] = set()

        def _slide(self, now: float | None):
            if window is not None:
                self.window = self.window[-window:]
            else:
                self.window = [(q, m) for q, m in self.window if not m.t <= now - window_seconds]

        def _check_changes(self, before, changes):
            after = brute_force(self.engine, self.subs, self.window)
            got = {c.sub_id: (set(c.entered), set(c.left)) for c in changes}
            assert len(got) == len(changes), "one change record per subscription"
            for sid in set(before) | set(after):
                old = {m for m, _ in before.get(sid, [])}
                new = {m for m, _ in after.get(sid, [])}
                want = (new - old, old - new)
                if want == (set(), set()):
                    assert sid not in got, f"spurious change for {sid}: {got.get(sid)}"
                else:
                    assert got.get(sid) == want, f"subscription {sid}: changes {got.get(sid)}, want {want}"
            self.expected = after

        @rule(x=coords, y=coords, k=st.integers(1, 4), alpha=alphas, terms=term_dicts, reuse=st.booleans())
        def subscribe(self, x, y, k, alpha, terms, reuse):
            if reuse and self.gone_subs:
                sid = self.gone_subs.pop()
            else:
                sid = self.next_sub
                self.next_sub += 1
            sub = Subscription(sid, x, y, k, alpha, terms=terms)
            initial = self.engine.subscribe(sub)
            self.subs[sub.id] = sub
            want = brute_force(self.engine, {sub.id: sub}, self.window)[sub.id]
            assert [(m.id, m.score) for m in initial] == want

        @precondition(lambda self: self.subs)
        @rule(data=st.data())
        def unsubscribe(self, data):
            sid = data.draw(st.sampled_from(sorted(self.subs)))
            self.engine.unsubscribe(sid)
            del self.subs[sid]
            self.gone_subs.append(sid)

        def _message_id(self, reuse: bool) -> int:
            """A fresh id, or one whose message has left the window."""
            free = sorted(self.used_msgs - {m.id for _, m in self.window})
            if reuse and free:
                return free[len(free) // 2]
            self.next_msg += 1
            return self.next_msg - 1

        @rule(x=coords, y=coords, terms=term_dicts, dt=st.sampled_from([0.0, 0.5, 1.0, 2.5]), reuse=st.booleans())
        def publish(self, x, y, terms, dt, reuse):
            self.clock += dt
            msg = Message(self._message_id(reuse), x, y, self.clock, terms=terms)
            self.used_msgs.add(msg.id)
            before = brute_force(self.engine, self.subs, self.window)
            changes = self.engine.publish(msg)
            self.window.append((self.seq, msg))
            self.seq += 1
            self._slide(self.clock)
            self._check_changes(before, changes)

        @rule(msgs=st.lists(st.tuples(coords, coords, term_dicts, st.sampled_from([0.0, 0.5, 1.5])),
                            min_size=1, max_size=4))
        def publish_batch(self, msgs):
            """Several messages in one call: the changes of each, by its row ``at``."""
            vocab = self.engine.vocabulary
            rows, batch_msgs = [], []
            for x, y, terms, dt in msgs:
                self.clock += dt
                m = Message(self.next_msg, x, y, self.clock, terms=terms)
                self.next_msg += 1
                self.used_msgs.add(m.id)
                batch_msgs.append(m)
                rows.append(vocab.vectorize_terms(terms))
            batch = MessageBatch([m.id for m in batch_msgs], [m.x for m in batch_msgs], [m.y for m in batch_msgs],
                                 [m.t for m in batch_msgs], TermMatrix.from_rows(rows))
            log = self.engine.publish_batch(batch)
            for at, m in enumerate(batch_msgs):
                before = brute_force(self.engine, self.subs, self.window)
                self.window.append((self.seq, m))
                self.seq += 1
                self._slide(m.t)
                sel = log.at == at
                from skype.api import ChangeLog

                part = ChangeLog(log.at[sel], log.sub[sel], log.msg[sel], log.entered[sel])
                self._check_changes(before, part.changes())

        @precondition(lambda self: self.subs)
        @rule(data=st.data(), n=st.integers(0, 8))
        def topn(self, data, n):
            sid = data.draw(st.sampled_from(sorted(self.subs)))
            deep = {sid: Subscription(sid, *[getattr(self.subs[sid], f) for f in ("x", "y")], k=max(n, 1),
                                      alpha=self.subs[sid].alpha, terms=self.subs[sid].terms)}
            want = brute_force(self.engine, deep, self.window)[sid][:n]
            assert [(m.id, m.score) for m in self.engine.topn(sid, n)] == want

        @precondition(lambda self: window_seconds is not None)
        @rule(dt=st.sampled_from([0.5, 1.0, 3.0, 10.0]))
        def advance(self, dt):
            self.clock += dt
            before = brute_force(self.engine, self.subs, self.window)
            changes = self.engine.advance(self.clock)
            self._slide(self.clock)
            self._check_changes(before, changes)

        @invariant()
        def topk_is_exact(self):
            if not hasattr(self, "engine"):
                return
            want = brute_force(self.engine, self.subs, self.window)
            for sid in self.subs:
                got = [(m.id, m.score) for m in self.engine.topk(sid)]
                assert got == want[sid], f"subscription {sid}: got {got}, want {want[sid]}"
            assert list(self.engine.window_ids()) == [m.id for _, m in self.window]

        @invariant()
        def index_is_consistent(self):
            """The core's subscription index keeps its structural invariants after every step
            (each index kind checks its own: locators, headers, covers, posting lists).  The
            reference engine has no index: nothing to check there."""
            if hasattr(self, "engine") and isinstance(self.engine, Engine):
                assert self.engine.check_invariants() is True

        @invariant()
        def thresholds_are_safe(self):
            """No threshold above the k-th score (0 while fewer than k match): a message that
            scores at least the k-th score is never pruned."""
            if not hasattr(self, "engine") or not self.subs:
                return
            sids = np.array(sorted(self.subs), dtype=np.int64)
            want = brute_force(self.engine, self.subs, self.window)
            for sid, theta in zip(sids.tolist(), self.engine.thresholds(sids)):
                top = want[sid]
                kth = top[-1][1] if len(top) == self.subs[sid].k else 0.0
                assert theta <= kth, f"subscription {sid}: threshold {theta} above the k-th score {kth}"

    return EngineMachine
