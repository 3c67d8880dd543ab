"""The merge stage's global k-th score floors (:mod:`skype.dskype.floors`) keep DSkype exact.

A Spark-free run in this process: P partitions each host every subscription as a replica
(``nrep = P``), each message reaches one partition (sometimes two), one merge bucket folds the
replicas' reports, and after every batch the merge's floors go into the next batch's partition
inputs.  The oracle is the centralized engine (one partition, every message, one replica) fed the
same commands and messages; after every batch the merged lists must equal its lists, byte for
byte, and the same run without floors must too.  Adversarial settings, drawn by Hypothesis:

* ties at the floor: messages are copies (new ids) of a pool of a few messages, so many score
  the same;
* expiry of the floor-setting entries: windows of 12-40 messages against batches of up to 25, so
  witnesses leave the window within the next batch (``until`` must stop the floor);
* late subscriptions and re-subscriptions (another record under the same id) at positions inside
  batches, and unsubscribes;
* stale floors: floors computed one or two batches earlier (a slow side channel);
* a restart: the partitions rebuilt from their command logs and window segments, then fed the
  floors computed before the restart.

Each run must also skip admissions (a floor that never bites would make the test vacuous).
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skype.dskype import codec
from skype.errors import InputError
from skype.dskype.codec import OP_SUB, OP_UNSUB, Commands
from skype.dskype.durable import command_log_entry
from skype.dskype.floors import FloorKeeper, Floors, floors_of, witness_floor
from skype.dskype.merge import MergeCore
from skype.dskype.partition import PartitionConfig, PartitionCore, PartitionInput
from skype.dskype.reports import results_lines
from skype.dskype.staging import _id_only
from skype.dskype.window import WindowSpec
from skype.model import MessageBatch, SubscriptionBatch, TermMatrix

SUBS = 10


BOUNDS = (0.0, 0.0, 1.0, 1.0)
VOCAB = 6  # a small vocabulary: most subscription-message pairs share a term and score


def _terms(rng, n: int) -> TermMatrix:
    """n term vectors of 1-3 distinct terms with equal weights (equal weights: more ties)."""
    rows = [np.sort(rng.choice(VOCAB, int(rng.integers(1, 4)), replace=False)) for _ in range(n)]
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum([len(r) for r in rows], out=indptr[1:])
    ids = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    weights = np.concatenate([np.full(len(r), 1 / np.sqrt(len(r))) for r in rows]) if rows else np.zeros(0)
    return TermMatrix(indptr, ids, weights)


def _config(p: int, window: WindowSpec) -> PartitionConfig:
    return PartitionConfig(partition=p, num_buckets=1, window=window, bounds=BOUNDS, floors=True)


def _record(rng, sid: int) -> SubscriptionBatch:
    """A random record under id ``sid``, with a small k (1-4: lists fill, floors exist)."""
    return SubscriptionBatch(np.array([sid], np.int64), rng.random(1), rng.random(1), rng.integers(1, 5, 1),
                             rng.choice([0.3, 0.5], 1), _terms(rng, 1))


def _lists(blob: bytes) -> list[str]:
    return results_lines([blob])


class FloorRun:
    """The distributed run and its centralized oracle (module docstring)."""

    def __init__(self, parts: int, window: int, use_floors: bool, lag: int, margin: float = 0.0,
                 settle: bool = False, side_list: int = 32) -> None:
        spec = WindowSpec("count", float(window))
        self.configs = [_config(p, spec) for p in range(parts)]
        self.cores = [PartitionCore(c) for c in self.configs]
        self.margin, self.settle, self.side_list = margin, settle, side_list
        self._sticky()
        self.central = PartitionCore(_config(0, spec))
        self.merge = MergeCore()
        self.window, self.use_floors, self.lag = window, use_floors, lag
        self.history: list[Floors] = []  # the merge's floors after each batch
        self.logs: list[list[bytes]] = [[] for _ in range(parts)]
        self.segments: list[list[bytes]] = [[] for _ in range(parts)]
        self.hwm = -1
        self.skips = 0
        self.readmits = 0

    def _sticky(self) -> None:
        for core in self.cores:
            core.floors.margin, core.floors.settle = self.margin, self.settle
            core.floors.side_list = self.side_list

    def floors_for_next(self) -> Floors | None:
        if not self.use_floors or len(self.history) <= self.lag:
            return None
        return self.history[-1 - self.lag]

    def batch(self, msgs: MessageBatch, seq: np.ndarray, route: list[np.ndarray], cmds: Commands,
              central_cmds: Commands, lookahead: int, floors: Floors | None = None) -> None:
        hwm = int(seq[-1]) if len(seq) else self.hwm
        lo = self.hwm + 1
        floors = self.floors_for_next() if floors is None else floors
        blobs = []
        for p, core in enumerate(self.cores):
            rows = route[p]
            out = core.apply(PartitionInput(msgs.take(rows), seq[rows], cmds, hwm, float(hwm), floors=floors))
            blobs.extend(out.reports.values())
            if len(cmds):
                self.logs[p].append(command_log_entry(cmds, lo, hwm))
            if len(rows):
                self.segments[p].append(codec.pack_messages(msgs.take(rows), seq[rows]))
            self.skips += out.metrics["work"].get("floor_skips", 0)
            self.readmits += out.metrics["work"].get("floor_readmits", 0)
        self.central.apply(PartitionInput(msgs, seq, central_cmds, hwm, float(hwm)))
        self.merge.apply(blobs)
        self.hwm = hwm
        self.history.append(floors_of(self.merge, hwm, self.window, lookahead))

    def restart(self) -> None:
        """Every partition rebuilt from its command log and window segments."""
        self.cores = [PartitionCore.rebuild(c, self.hwm, float(self.hwm), list(log), list(seg))
                      for c, log, seg in zip(self.configs, self.logs, self.segments)]
        self._sticky()

    def merged(self) -> list[str]:
        return _lists(self.merge.final_results())

    def centralized(self) -> list[str]:
        return _lists(self.central.final_results())


def _commands(rng, cseq: int, lo: int, hi: int, parts: int, first: bool) -> tuple[Commands, Commands]:
    """Subscribe every id at the first batch; later, a few subscribes (new records), unsubscribes."""
    rows, central = [], []
    ops = ([("sub", sid) for sid in range(SUBS)] if first else
           [("sub" if rng.random() < 0.7 else "unsub", int(rng.integers(0, SUBS + 3))) for _ in range(rng.integers(0, 3))])
    for op, sid in ops:
        at = lo if first else int(rng.integers(lo, hi + 1))
        record = _record(rng, sid) if op == "sub" else _id_only(sid)
        code = OP_SUB if op == "sub" else OP_UNSUB
        rows.append(Commands([cseq], [at], [code], record, [parts]))
        central.append(Commands([cseq], [at], [code], record, [1]))
        cseq += 1
    if not rows:
        return Commands.empty(), Commands.empty()
    return Commands.concat(rows), Commands.concat(central)


def _pool(rng, size: int) -> MessageBatch:
    """The distinct messages a stream copies: coordinates on a 4 x 4 grid."""
    grid = rng.integers(0, 4, (2, size)) / 4.0 + 0.125
    return MessageBatch(np.arange(size, dtype=np.int64), grid[0], grid[1], np.zeros(size), _terms(rng, size))


def _messages(rng, pool: MessageBatch, lo: int, n: int) -> MessageBatch:
    """n copies of pool messages under new ids: many equal scores (ties at the floor)."""
    pick = pool.take(rng.integers(0, len(pool), n))
    return MessageBatch(np.arange(lo, lo + n, dtype=np.int64) + 10 ** 6, pick.x, pick.y,
                        np.arange(lo, lo + n, dtype=np.float64), pick.terms)


def _play(seed: int, parts: int, window: int, max_batch: int, pool_size: int, lag: int, restart_at: int,
          use_floors: bool = True, margin: float = 0.0, settle: bool = False, side_list: int = 32) -> FloorRun:
    rng = np.random.default_rng(seed)
    pool = _pool(rng, pool_size)
    run = FloorRun(parts, window, use_floors, lag, margin, settle, side_list)
    cseq, lo, stale = 0, 0, None
    for b in range(14):
        n = int(rng.integers(1, max_batch + 1))
        msgs = _messages(rng, pool, lo, n)
        seq = np.arange(lo, lo + n, dtype=np.int64)
        first_part = rng.integers(0, parts, n)
        second = np.where(rng.random(n) < 0.2, rng.integers(0, parts, n), first_part)
        route = [np.flatnonzero((first_part == p) | (second == p)) for p in range(parts)]
        cmds, central = _commands(rng, cseq, lo, lo + n - 1, parts, b == 0)
        cseq += len(cmds)
        if b == restart_at:
            stale = run.history[-1] if run.history else None
            run.restart()
        run.batch(msgs, seq, route, cmds, central, max_batch,
                  floors=stale if (b == restart_at and use_floors and stale is not None) else None)
        assert run.merged() == run.centralized(), f"batch {b}"
        lo += n
    return run


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 16), parts=st.sampled_from([2, 3]), window=st.sampled_from([12, 25, 40]),
       max_batch=st.sampled_from([8, 25]), pool_size=st.sampled_from([3, 12, 200]), lag=st.sampled_from([0, 0, 1, 2]),
       restart_at=st.sampled_from([-1, 5, 9]), margin=st.sampled_from([0.0, 0.0, 0.05]), settle=st.booleans(),
       side_list=st.sampled_from([0, 1, 3, 32]))
def test_floors_keep_the_merged_lists_equal_to_the_centralized_engine(seed, parts, window, max_batch, pool_size,
                                                                      lag, restart_at, margin, settle, side_list):
    _play(seed, parts, window, max_batch, pool_size, lag, restart_at, margin=margin, settle=settle,
          side_list=side_list)


@pytest.mark.parametrize("pool_size", [3, 200])
def test_floors_skip_admissions_and_the_run_without_them_agrees(pool_size):
    """The floors bite (admissions skipped), and the same stream without floors gives the same lists."""
    with_floors = _play(7, 3, 40, 25, pool_size, 0, -1)
    without = _play(7, 3, 40, 25, pool_size, 0, -1, use_floors=False)
    assert with_floors.skips > 0 and without.skips == 0
    assert with_floors.readmits > 0  # the side list repaired buffers (not only rebuilds)
    assert with_floors.merged() == without.merged()


def test_witness_floor_ties_and_expiry():
    scores, seqs = np.array([0.5, 0.5, 0.5, 0.4]), np.array([10, 30, 20, 40])
    # ties at the k-th score: the newest tied witnesses are taken, the floor is the tied score
    assert witness_floor(scores, seqs, 2, 0, 100) == (0.5, 20 + 99)
    # witnesses must outlive the horizon: with the two newest only, k = 3 has no floor
    assert witness_floor(scores, seqs, 3, 25, 100) is None
    assert witness_floor(scores, seqs, 2, 25, 100) == (0.4, 30 + 99)


def test_keeper_ignores_stale_floors_and_floors_older_than_the_record():
    class Recorder:
        def __init__(self):
            self.calls = []

        def set_floors(self, ids, values, side_list=32):
            self.calls.append((ids.tolist(), values.tolist()))
            from skype.api import ChangeLog

            return ChangeLog.empty()

    keeper, engine = FloorKeeper(), Recorder()
    floors = Floors(np.array([1, 2, 3]), np.array([0.5, 0.6, 0.7]), np.array([100, 50, 100]), np.array([40, 40, 40]))
    keeper.subscribed([3], 41)  # record 3 is newer than the merge state the floors come from
    keeper.apply(engine, floors, 60, lambda sid: True)
    assert engine.calls == [([1], [0.5])]  # 2 lapsed (until 50 < 60), 3 speaks of an older record
    keeper.apply(engine, Floors.empty(), 70, lambda sid: True)
    assert engine.calls[-1] == ([1], [-np.inf])  # no new floor: lifted
    keeper.engine_replaced(80)
    keeper.apply(engine, floors, 90, lambda sid: True)
    assert len(engine.calls) == 2  # a restart at 80: floors as of 40 no longer apply
    keeper.apply(engine, floors, 60, lambda sid: sid != 1)  # not eligible (asleep, single replica): untouched
    assert 1 not in keeper.floored
    # sticky: the engine keeps a lower floor while it stays within twice the margin of the valid one
    keeper, engine = FloorKeeper(margin=0.1), Recorder()
    for f in (0.5, 0.48, 0.44):
        keeper.apply(engine, Floors(np.array([1]), np.array([f]), np.array([100]), np.array([40])), 60, lambda sid: True)
    assert [c[1][0] for c in engine.calls] == pytest.approx([0.45, 0.396])  # 0.48: 0.45 kept, no call
    # settle: a floor applies from the second batch in a row that has one
    keeper, engine = FloorKeeper(settle=True), Recorder()
    one = Floors(np.array([1]), np.array([0.5]), np.array([100]), np.array([40]))
    keeper.apply(engine, one, 60, lambda sid: True)
    assert engine.calls == []
    keeper.apply(engine, one, 70, lambda sid: True)
    assert engine.calls == [([1], [0.5])]


def test_engine_rebuilds_a_buffer_when_its_floor_falls_below_a_skipped_score():
    from skype.engine import Engine

    rng = np.random.default_rng(3)
    sub, pool = _record(rng, 1), _pool(rng, 200)
    msgs = _messages(rng, pool, 0, 100)
    eng, ref = Engine(bounds=BOUNDS, window=50), Engine(bounds=BOUNDS, window=50)
    for e in (eng, ref):
        e.subscribe_batch(sub)
        e.publish_batch(msgs.slice(0, 60))
    eng.set_floors([1], [np.inf], side_list=0)  # skip every admission, keep no side list
    eng.publish_batch(msgs.slice(60, 100))
    ref.publish_batch(msgs.slice(60, 100))
    assert eng.stats()["floor_skips"] > 0
    log = eng.set_floors([1], [-np.inf], side_list=0)  # lifted: the skipped messages come back
    assert eng.stats()["floor_repairs"] == 1
    assert eng.topk_arrays([1])[1].tolist() == ref.topk_arrays([1])[1].tolist()
    assert len(log.sub) > 0
    with pytest.raises(InputError):
        eng.set_floors([99], [0.1])  # not a subscription
    with pytest.raises(InputError):
        eng.set_floors([1], [np.nan])


def test_the_reference_engine_ignores_floors_and_stays_exact():
    from skype.reference import ReferenceEngine

    rng = np.random.default_rng(4)
    sub, msgs = _record(rng, 1), _messages(rng, _pool(rng, 50), 0, 80)
    eng, ref = ReferenceEngine(bounds=BOUNDS, window=30), ReferenceEngine(bounds=BOUNDS, window=30)
    for e in (eng, ref):
        e.subscribe_batch(sub)
    assert len(eng.set_floors([1], [np.inf]).sub) == 0
    for e in (eng, ref):
        e.publish_batch(msgs)
    assert eng.topk_arrays([1])[1].tolist() == ref.topk_arrays([1])[1].tolist()
    with pytest.raises(InputError):
        eng.set_floors([7], [0.5])


def _above(eng, ids, floors):
    """Each subscription's top-k entries scoring >= its floor: (message ids, scores) per id."""
    indptr, msgs, scores = eng.topk_arrays(ids)
    out = []
    for i, f in enumerate(floors):
        a, b = int(indptr[i]), int(indptr[i + 1])
        keep = scores[a:b] >= f
        out.append((msgs[a:b][keep].tolist(), scores[a:b][keep].tolist()))
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 16), window=st.sampled_from([10, 30, 80]), pool_size=st.sampled_from([3, 12, 200]),
       side_list=st.sampled_from([0, 1, 2, 8, 32]), buffer=st.sampled_from(["cskyband", "skyband", "exact"]))
def test_side_list_keeps_every_entry_above_the_floor_exact(seed, window, pool_size, side_list, buffer):
    """The engine's contract for any floors, valid or not: every top-k entry scoring >= the floor in
    force is the floorless engine's; a lifted floor gives its whole list.  Floors rise, fall and
    lapse at random between batches, so listed skipped messages are re-admitted (ties at the floor:
    a pool of 3 messages), expire before a floor falls (windows of 10), or overflow the list (1-2)."""
    from skype.engine import Engine

    rng = np.random.default_rng(seed)
    pool = _pool(rng, pool_size)
    subs = SubscriptionBatch(np.arange(6, dtype=np.int64), rng.random(6), rng.random(6), rng.integers(1, 5, 6),
                             rng.choice([0.3, 0.5], 6), _terms(rng, 6))
    eng, ref = Engine(bounds=BOUNDS, window=window, buffer=buffer), Engine(bounds=BOUNDS, window=window, buffer=buffer)
    for e in (eng, ref):
        e.subscribe_batch(subs)
    ids = np.arange(6, dtype=np.int64)
    floors = np.full(6, -np.inf)
    lo = 0
    for _ in range(12):
        # a new floor per subscription: a pool score (ties), just above or below one, or lifted
        scores = ref.topk_arrays(ids)[2]
        choices = np.r_[scores, scores + 1e-9, scores - 1e-9, -np.inf, np.inf] if len(scores) else np.r_[-np.inf]
        floors = np.where(rng.random(6) < 0.7, rng.choice(choices, 6), floors)
        eng.set_floors(ids, floors, side_list=side_list)
        assert _above(eng, ids, floors) == _above(ref, ids, floors)
        n = int(rng.integers(1, 25))
        msgs = _messages(rng, pool, lo, n)
        for e in (eng, ref):
            e.publish_batch(msgs)
        lo += n
        assert _above(eng, ids, floors) == _above(ref, ids, floors)
    eng.set_floors(ids, np.full(6, -np.inf), side_list=side_list)
    assert eng.topk_arrays(ids)[1].tolist() == ref.topk_arrays(ids)[1].tolist()


def test_side_list_readmits_instead_of_rebuilding_and_rebuilds_on_overflow():
    """A lifted floor re-admits the listed skipped messages (no rebuild) while the list holds them
    all; past its length, the list drops one and the lifted floor rebuilds."""
    from skype.engine import Engine

    rng = np.random.default_rng(3)
    sub, pool = _record(rng, 1), _pool(rng, 200)
    msgs = _messages(rng, pool, 0, 100)
    for side_list, rebuilds in ((64, 0), (2, 1)):
        eng, ref = Engine(bounds=BOUNDS, window=50), Engine(bounds=BOUNDS, window=50)
        for e in (eng, ref):
            e.subscribe_batch(sub)
            e.publish_batch(msgs.slice(0, 60))
        eng.set_floors([1], [np.inf], side_list=side_list)  # skip every admission
        eng.publish_batch(msgs.slice(60, 100))
        ref.publish_batch(msgs.slice(60, 100))
        skips = eng.stats()["floor_skips"]
        assert skips > 2  # more than the short list holds
        log = eng.set_floors([1], [-np.inf], side_list=side_list)  # lifted: the skipped messages come back
        stats = eng.stats()
        assert (stats["floor_repairs"], stats["floor_readmits"]) == (rebuilds, 1 - rebuilds)
        assert eng.topk_arrays([1])[1].tolist() == ref.topk_arrays([1])[1].tolist()
        assert len(log.sub) > 0
    with pytest.raises(InputError):
        eng.set_floors([1], [0.1], side_list=-1)


@pytest.mark.parametrize("rising", [True, False])
def test_a_full_side_list_remembers_what_it_dropped(rising):
    """A list of one skipped message: arrivals scoring ever higher (or lower) each push one out;
    the lifted floor must then rebuild (the dropped ones matter), not re-admit the one kept."""
    from skype.engine import Engine

    one = TermMatrix(np.array([0, 1]), np.array([0]), np.array([1.0]))
    sub = SubscriptionBatch(np.array([1]), np.array([0.5]), np.array([0.5]), np.array([3]), np.array([0.5]), one)
    n = 8
    gap = np.linspace(0.4, 0.05, n) if rising else np.linspace(0.05, 0.4, n)  # closer: a higher score
    msgs = MessageBatch(np.arange(n), 0.5 + gap, np.full(n, 0.5), np.arange(n, dtype=np.float64),
                        TermMatrix(np.arange(n + 1), np.zeros(n, np.int64), np.ones(n)))
    eng, ref = Engine(bounds=BOUNDS, window=50), Engine(bounds=BOUNDS, window=50)
    for e in (eng, ref):
        e.subscribe_batch(sub)
    eng.set_floors([1], [np.inf], side_list=1)
    for e in (eng, ref):
        e.publish_batch(msgs)
    assert eng.stats()["floor_skips"] == n
    eng.set_floors([1], [-np.inf], side_list=1)
    assert eng.stats()["floor_repairs"] == 1
    assert eng.topk_arrays([1])[1].tolist() == ref.topk_arrays([1])[1].tolist()
