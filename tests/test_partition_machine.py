"""A Hypothesis state machine for :class:`skype.dskype.partition.PartitionCore`: live, replayed and
restored-from-snapshot equal after every step, and equal to the reference engine's partition.

The machine plays one partition of a run the way the stateful operator does
(:mod:`skype.spark.processors`): each batch brings a random share of a global message range (the
router sends a partition only some messages, so ``seq`` has gaps) with the batch's high-water
mark, and commands (subscribe, re-subscribe of a hosted id, unsubscribe, hosted or not) at
positions inside the batch, after it (pending) or without a position.  Two durable models follow
the live core: the whole command log (never compacted) and a log that a ``snapshot`` step
replaces with :meth:`PartitionCore.snapshot`, each with the batches' window segments.  After
every step:

* **replayed** (:meth:`PartitionCore.rebuild` from the whole log) and **restored** (from the
  snapshot and the entries after it) hold the same subscriptions, the same pending commands and
  the same final top-k lists as the **live** core, byte for byte;
* a partition over the brute-force :class:`skype.reference.ReferenceEngine`, fed the same
  batches, has the same top-k lists (the oracle).

:class:`PartitionMachine` plays a plain partition (count or time window, one replica a
subscription).  :class:`PrefixPartitionMachine` plays a ``prefix`` partition with the loose-prefix
activation: replicated subscriptions whose replica here sleeps and wakes, the batches' sleep/wake
entries logged after their commands, the dormant set in the snapshot; it compares the dormant
set and every active replica's local list as well.  The adaptive hand-over and keyword summaries
add log entries of their own and keep their example tests (``tests/test_spark_*``).  Dropping one
log entry from the replay, or one command from the oracle's batches, fails the machine within its
40 examples; so does a rebuild that ignores the sleep/wake entries (tried).
"""

from functools import lru_cache

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from skype.dskype import codec
from skype.dskype.codec import NO_POSITION, OP_SUB, OP_UNSUB, Commands
from skype.dskype.durable import command_log_entry
from skype.dskype.partition import PartitionConfig, PartitionCore, PartitionInput
from skype.dskype.staging import _id_only
from skype.dskype.window import WindowSpec
from skype.model import MessageBatch, SubscriptionBatch

IDS = 12  # subscription ids 0..IDS-1: re-subscriptions and unsubscribes meet hosted ids often


@lru_cache(maxsize=None)
def _workload():
    from skype.data import make_workload

    return make_workload("tweets", num_subs=80, num_messages=600, seed=11)


def _record(sid: int, draw: int) -> SubscriptionBatch:
    """Subscription ``draw`` of the workload under id ``sid`` (a re-subscription changes the record)."""
    subs = _workload().subscriptions.slice(draw, draw + 1)
    return SubscriptionBatch(np.array([sid], np.int64), subs.x, subs.y, subs.k, subs.alpha, subs.terms)


def _config(window: WindowSpec, engine: str) -> PartitionConfig:
    b = _workload().bounds
    return PartitionConfig(partition=0, num_buckets=1, window=window, bounds=(b.minx, b.miny, b.maxx, b.maxy),
                           engine=engine)


def _state(core: PartitionCore) -> tuple:
    """What must agree: the hosted records, the pending commands, and the final top-k lists."""
    pending = core.pending
    return (core.hwm_seq, sorted(core.hosted.rows), pending.cseq.tolist(), pending.at.tolist(),
            pending.op.tolist(), core.final_results())


command = st.tuples(st.sampled_from(["sub", "sub", "unsub"]), st.integers(0, IDS - 1), st.integers(0, 79),
                    st.sampled_from(["inside", "inside", "later", "none"]), st.integers(0, 10 ** 6))


class PartitionMachine(RuleBasedStateMachine):
    @initialize(kind=st.sampled_from(["count", "time"]), size=st.sampled_from([40, 150]))
    def start(self, kind, size):
        w = _workload()
        self.window = WindowSpec(kind, float(size) if kind == "count" else float(w.messages.t[size]))
        self.live = PartitionCore(_config(self.window, "core"))
        self.oracle = PartitionCore(_config(self.window, "reference"))
        self.full_log: list[bytes] = []       # every batch's commands: the replayed core's input
        self.compact_log: list[bytes] = []    # the same, replaced by each snapshot: the restored core's
        self.segments: list[bytes] = []       # the window messages the partition received
        self.next_seq = 0                     # the global stream's next position
        self.cseq = 0

    @precondition(lambda self: self.next_seq < len(_workload().messages) - 30)
    @rule(n=st.integers(0, 30), share=st.sampled_from([0.0, 0.3, 1.0]), seed=st.integers(0, 2 ** 16),
          cmds=st.lists(command, max_size=6))
    def batch(self, n, share, seed, cmds):
        w = _workload()
        lo, hi = self.next_seq, self.next_seq + n
        rng = np.random.default_rng(seed)
        routed = np.flatnonzero(rng.random(n) < share) + lo    # the partition's share of the range
        msgs = w.messages.take(routed) if len(routed) else w.messages.slice(0, 0)
        batch = MessageBatch(msgs.ids, msgs.x, msgs.y, msgs.t, msgs.terms)
        hwm_seq = hi - 1 if n else lo - 1
        hwm_t = float(w.messages.t[hwm_seq]) if hwm_seq >= 0 else -np.inf
        commands = self._commands(cmds, lo, hi)
        for core in (self.live, self.oracle):
            core.apply(PartitionInput(batch, routed.astype(np.int64), commands, hwm_seq, hwm_t))
        if len(commands):
            entry = command_log_entry(commands, lo, max(self.live.hwm_seq, hwm_seq))
            self.full_log.append(entry)
            self.compact_log.append(entry)
        if len(batch):
            self.segments.append(codec.pack_messages(batch, routed.astype(np.int64)))
        self.next_seq = hi

    def _commands(self, cmds, lo, hi) -> Commands:
        rows = []
        for op, sid, draw, where, at_draw in cmds:
            if where == "inside":
                at = lo + at_draw % (hi - lo + 1)
            elif where == "later":
                at = hi + 1 + at_draw % 20
            else:
                at = NO_POSITION
            record = _record(sid, draw) if op == "sub" else _id_only(sid)
            rows.append(Commands([self.cseq], [at], [OP_SUB if op == "sub" else OP_UNSUB], record, [1]))
            self.cseq += 1
        return Commands.concat(rows) if rows else Commands.empty()

    @rule()
    def snapshot(self):
        self.compact_log = [self.live.snapshot()]

    def _rebuilt(self, log: list[bytes]) -> PartitionCore:
        return PartitionCore.rebuild(_config(self.window, "core"), self.live.hwm_seq, self.live.hwm_t, list(log),
                                     self.segments)

    @invariant()
    def replayed_and_restored_equal_live(self):
        if not hasattr(self, "live"):
            return
        want = _state(self.live)
        assert _state(self._rebuilt(self.full_log)) == want
        assert _state(self._rebuilt(self.compact_log)) == want

    @invariant()
    def live_equals_the_reference(self):
        if not hasattr(self, "live"):
            return
        assert _state(self.live) == _state(self.oracle)


PartitionMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=12, deadline=None,
                                              suppress_health_check=[HealthCheck.too_slow])
test_partition_core_live_replayed_restored_and_reference_agree = PartitionMachine.TestCase


# --------------------------------------------------------------------------- prefix replicas

MID_TERM = 2557  # the workload's median subscription term id: partition 1 holds ids from here on
BATCH = 30  # the most messages a batch of the machine brings (the rule's n): ActivationConfig.batch_messages


@lru_cache(maxsize=None)
def _spanning() -> np.ndarray:
    """Messages with terms on both sides of ``MID_TERM``: subscriptions made of their terms and
    place have replicas here that are not home, and score them highly (so replicas sleep)."""
    terms = _workload().messages.terms
    return np.array([j for j in range(len(_workload().messages))
                     if terms.row(j)[0].min() < MID_TERM <= terms.row(j)[0].max()], np.int64)


def _prefix_record(sid: int, draw: int) -> SubscriptionBatch:
    """A subscription shaped like a spanning message (its first term and one term here, its
    place), k 1 or 2."""
    from skype.model import TermMatrix

    msgs = _workload().messages
    j = int(_spanning()[draw % len(_spanning())])
    ids = msgs.terms.row(j)[0]
    ids = np.array([ids[0], ids[ids >= MID_TERM][0]], np.int64)  # one term on each side
    weights = np.array([0.95, np.sqrt(1 - 0.95 ** 2)])  # a light tail here: its reach is low
    return SubscriptionBatch(np.array([sid], np.int64), msgs.x[j:j + 1], msgs.y[j:j + 1], np.array([1 + draw % 2]),
                             np.array([0.3]), TermMatrix(np.array([0, 2]), ids, weights))


def _prefix_config(window: WindowSpec, engine: str) -> PartitionConfig:
    from skype.dskype.activation import ActivationConfig

    b = _workload().bounds
    vocab = int(max(_workload().subscriptions.terms.ids.max(), _workload().messages.terms.ids.max())) + 1
    activation = ActivationConfig((0, MID_TERM, vocab), batch_messages=BATCH, window=int(window.size))
    return PartitionConfig(partition=1, num_buckets=1, window=window, bounds=(b.minx, b.miny, b.maxx, b.maxy),
                           engine=engine, activation=activation)


def _prefix_state(core: PartitionCore) -> tuple:
    """What must agree on a prefix partition: the hosted records, the pending commands, the
    dormant replicas and when they wake, and the local top-k (ids, seqs, scores) of every active one."""
    assert core.activation is not None
    active = [sid for sid in sorted(core.hosted.rows) if core.active(sid)]
    lists = core._lists(active)
    return (_state(core)[:5], sorted(core.activation.dormant.items()),
            [(sid, lists[sid][0].tolist(), lists[sid][2].tolist(), np.round(lists[sid][1], 12).tolist())
             for sid in active])


class PrefixPartitionMachine(PartitionMachine):
    """The machine on a ``prefix`` partition with the loose-prefix activation
    (:mod:`skype.dskype.activation`): replicated subscriptions (``nrep = 2``) whose replica here
    sleeps when k local witnesses outrank what its terms here can reach, and wakes when they may
    expire.  The durable models log each batch's sleeps and wakes after its commands, as the
    stateful operator does, and a snapshot carries the dormant set.  After every step live,
    replayed and restored agree on the hosted records, the dormant set and every active local
    list, and so does the partition over the reference engine."""

    @initialize(size=st.sampled_from([60, 150]))
    def start(self, size):
        self.window = WindowSpec("count", float(size))
        self.live = PartitionCore(_prefix_config(self.window, "core"))
        self.oracle = PartitionCore(_prefix_config(self.window, "reference"))
        self.full_log, self.compact_log, self.segments = [], [], []
        self.next_seq = self.cseq = self.sleeps = 0

    def _commands(self, cmds, lo, hi) -> Commands:
        rows = []
        for op, sid, draw, where, at_draw in cmds:
            at = (lo + at_draw % (hi - lo + 1) if where == "inside" else hi + 1 + at_draw % 20 if where == "later"
                  else NO_POSITION)
            record = _prefix_record(sid, draw) if op == "sub" else _id_only(sid)
            rows.append(Commands([self.cseq], [at], [OP_SUB if op == "sub" else OP_UNSUB], record, [2]))
            self.cseq += 1
        return Commands.concat(rows) if rows else Commands.empty()

    @precondition(lambda self: self.next_seq < len(_workload().messages) - 30)
    @rule(n=st.integers(0, BATCH), share=st.sampled_from([0.3, 1.0]), seed=st.integers(0, 2 ** 16),
          cmds=st.lists(command, max_size=6))
    def batch(self, n, share, seed, cmds):
        w = _workload()
        lo, hi = self.next_seq, self.next_seq + n
        rng = np.random.default_rng(seed)
        routed = np.flatnonzero(rng.random(n) < share) + lo
        msgs = w.messages.take(routed) if len(routed) else w.messages.slice(0, 0)
        batch = MessageBatch(msgs.ids, msgs.x, msgs.y, msgs.t, msgs.terms)
        hwm_seq = hi - 1 if n else lo - 1
        hwm_t = float(w.messages.t[hwm_seq]) if hwm_seq >= 0 else -np.inf
        commands = self._commands(cmds, lo, hi)
        outs = [core.apply(PartitionInput(batch, routed.astype(np.int64), commands, hwm_seq, hwm_t))
                for core in (self.live, self.oracle)]
        if len(commands):
            entry = command_log_entry(commands, lo, max(self.live.hwm_seq, hwm_seq))
            self.full_log.append(entry)
            self.compact_log.append(entry)
        if outs[0].activation_entry is not None:  # after the commands, as skype.dskype.durable logs it
            self.full_log.append(outs[0].activation_entry)
            self.compact_log.append(outs[0].activation_entry)
            self.sleeps += outs[0].metrics["sleeps"]
        if len(batch):
            self.segments.append(codec.pack_messages(batch, routed.astype(np.int64)))
        self.next_seq = hi

    def _rebuilt(self, log: list[bytes]) -> PartitionCore:
        return PartitionCore.rebuild(_prefix_config(self.window, "core"), self.live.hwm_seq, self.live.hwm_t,
                                     list(log), self.segments)

    @invariant()
    def replayed_and_restored_equal_live(self):
        if not hasattr(self, "live"):
            return
        want = _prefix_state(self.live)
        assert _prefix_state(self._rebuilt(self.full_log)) == want
        assert _prefix_state(self._rebuilt(self.compact_log)) == want

    @invariant()
    def live_equals_the_reference(self):
        if not hasattr(self, "live"):
            return
        assert _prefix_state(self.live) == _prefix_state(self.oracle)


PrefixPartitionMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=14, deadline=None,
                                                    suppress_health_check=[HealthCheck.too_slow])
test_prefix_partition_live_replayed_restored_and_reference_agree = PrefixPartitionMachine.TestCase


def test_prefix_machine_rules_reach_sleeps_and_wakes():
    """The prefix machine's rules do make replicas sleep and wake (else its invariants would hold
    vacuously): six replicated subscriptions, then full batches; live, replayed, restored and the
    reference agree at every step."""
    machine = PrefixPartitionMachine()
    machine.start(size=60)
    machine.batch(cmds=[("sub", i, 7 * i, "none", 0) for i in range(6)], n=0, seed=0, share=1.0)
    dormant_seen, woke = 0, False
    for b in range(6):
        machine.batch(cmds=[], n=BATCH, seed=b, share=1.0)
        if b == 2:
            machine.snapshot()
        machine.replayed_and_restored_equal_live()
        machine.live_equals_the_reference()
        dormant = len(machine.live.activation.dormant)
        woke |= dormant < dormant_seen
        dormant_seen = max(dormant_seen, dormant)
    assert machine.sleeps > 0 and dormant_seen > 0 and woke
