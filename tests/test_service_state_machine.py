"""A Hypothesis state machine for :class:`skype.service.state.State` (issue 38): live, replayed
and restored equal after every step, and equal to the reference.

The machine drives the service's state the way the engine thread does
(:mod:`skype.service.worker`): every command goes through ``State.apply`` with the log append
(a real :class:`~skype.service.wal.Log`) as its ``before`` hook, and a ``snapshot`` step
captures the state, rotates the log and writes a snapshot as ``take_snapshot`` does (reusing
the last subscriptions file while ``subs_version`` is unchanged; with the window's engine batch,
or without it as an older snapshot; with the engine's exported state, or without it as an older
snapshot).  Commands: single and bulk
subscribes of every kind (topk by text or terms, with ``until``; range, knn, terms), re-subscribes
of a live id, single and bulk unsubscribes (of live and unknown ids), message batches as NDJSON
(the columnar ingest) or as records, with fresh ids, ids that have left the window, ids still in
it and bad records, and ``advance`` under a time window.  After every step:

* a **reference** state (the same commands on :class:`~skype.reference.ReferenceEngine`) refuses
  exactly what the live state refuses, with the same code, and emits the same events;
* a refused command changes nothing and is not logged;
* **replayed** (a fresh state applying the whole log, copied as a crash would leave it) and
  **restored** (the newest snapshot, then the log after it, as ``Worker._recover`` does) hold
  the same results (the results file's bytes), records, owners, vocabulary, window records,
  position and seq as the live state, and replay the live state's events after the snapshot.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from skype.engine import Engine
from skype.errors import InputError
from skype.model import Bounds
from skype.reference import ReferenceEngine
from skype.service import snapshot
from skype.service.auth import owner_hash
from skype.service.state import State
from skype.service.wal import Log

BOUNDS = Bounds(-4.0, -4.0, 4.0, 4.0)
WORDS = ["pizza", "pasta", "sushi", "ramen", "tacos"]
IDS = 10  # subscription ids 0..IDS-1: re-subscribes and unsubscribes meet live ids often
SCRATCH = "/dev/shm" if Path("/dev/shm").is_dir() else None  # snapshots fsync: memory keeps it quick

coord = st.one_of(st.integers(-8, 8).map(lambda v: v / 2.0), st.floats(-4.0, 4.0))
text = st.lists(st.sampled_from(WORDS + ["Pizza", "new1", "new2"]), min_size=1, max_size=3).map(" ".join)
terms = st.dictionaries(st.sampled_from(WORDS + ["rare"]), st.sampled_from([1.0, 0.5, 2.0, 3.25]),
                        min_size=1, max_size=3)
corner = st.one_of(st.integers(-8, 7).map(lambda v: v / 2.0), st.floats(-4.0, 3.5))
rect = st.tuples(corner, corner, st.floats(0.5, 6.0), st.floats(0.5, 6.0)).map(
    lambda r: [r[0], r[1], min(r[0] + r[2], 4.0), min(r[1] + r[3], 4.0)])


@st.composite
def subscription(draw, sid: int) -> dict:
    kind = draw(st.sampled_from(["topk", "topk", "topk", "range", "knn", "terms"]))
    rec: dict = {"id": sid}
    if kind == "topk":
        rec.update(x=draw(coord), y=draw(coord), k=draw(st.integers(1, 4)),
                   alpha=draw(st.sampled_from([0.0, 1.0, 0.5, 0.25])))
    else:
        rec["kind"] = kind
    if kind in ("range", "terms"):
        rec["rect"] = draw(rect)
    if kind == "knn":
        rec.update(x=draw(coord), y=draw(coord), k=draw(st.integers(1, 3)))
    if kind in ("knn", "terms"):
        rec["k"] = draw(st.integers(1, 3))
    if kind != "terms":
        if draw(st.booleans()):
            rec["text"] = draw(text)
        else:
            rec["terms"] = draw(terms)
        if kind != "topk" and draw(st.booleans()):
            rec["match"] = draw(st.sampled_from(["any", "all"]))
    if draw(st.integers(0, 3)) == 0:
        rec["until"] = draw(st.sampled_from([None, 3.0, 12.0, 1e9]))
    if draw(st.integers(0, 15)) == 0:
        rec["k"] = 0  # refused (E003), by both
    return rec


def _engine(window: dict, eager: bool = True):
    """The service's engine; ``eager=False``: the query window opened by the state when first
    needed (``serve --queries lazy``), so live, replayed and restored states open it at
    different moments."""
    return lambda vocabulary: Engine(bounds=BOUNDS, vocabulary=vocabulary, snapshots=eager, **window)


def _reference(window: dict):
    return lambda vocabulary: ReferenceEngine(bounds=BOUNDS, vocabulary=vocabulary, **window)


def _view(state: State) -> tuple:
    """Everything a restart must give back."""
    return (state.results_ndjson(), dict(state.records), dict(state.tokens), sorted(state.other_kinds),
            state.vocabulary.to_dict(), [(i, t, rec) for i, t, rec in state.window_records()],
            state.position, state.seq, state.engine.clock)


def _events(blocks: list) -> list[dict]:
    return [ev for block in blocks for ev in block.events()]


class ServiceStateMachine(RuleBasedStateMachine):
    @initialize(kind=st.sampled_from(["count", "time"]), size=st.sampled_from([3, 8]),
                first=st.lists(st.integers(0, IDS - 1), min_size=1, max_size=4, unique=True), eager=st.booleans(),
                data=st.data())
    def start(self, kind, size, first, eager, data):
        self.window = {"window": size} if kind == "count" else {"window_seconds": float(size)}
        self.eager = eager
        self.timed = kind == "time"
        self.dir = Path(tempfile.mkdtemp(prefix="skype-state-machine-", dir=SCRATCH))
        self.live = State(_engine(self.window, self.eager))
        self.oracle = State(_reference(self.window))
        self.log = Log(self.dir / "log", "never")  # compacted by snapshots, as the server's
        self.full_log = Log(self.dir / "full", "never")  # never compacted: the replayed state's input
        list(self.log.recover())
        list(self.full_log.recover())
        self.logged: list[dict] = []
        self.events: list[dict] = []  # every event the live state emitted, in order
        self.next_msg = 0
        self.clock = 0.0
        self.subs_written: tuple[int, Path] | None = None
        self.subscribe_many(first, data)  # a few subscriptions from the start: every step has followers

    def teardown(self):
        if hasattr(self, "dir"):
            self.log.close()
            self.full_log.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------------ commands
    def _append(self, cmd: dict) -> None:
        """The ``before`` hook: the log append (both logs)."""
        self.log.append(cmd)
        self.full_log.append(cmd)
        self.logged.append(cmd)

    def _apply(self, cmd: dict) -> None:
        """The same command on both states: both refuse it (same code, nothing changed, nothing
        logged) or both apply it with the same reply and events."""
        before_view, logged = _view(self.live), self.log.next_index
        try:
            reply, blocks = self.live.apply(cmd, before=self._append)
        except InputError as err:
            assert self.log.next_index == logged, "a refused command was logged"
            assert _view(self.live) == before_view, "a refused command changed the state"
            oracle_view = _view(self.oracle)
            try:
                self.oracle.apply(cmd)
            except InputError as oracle_err:
                assert oracle_err.code == err.code
                assert _view(self.oracle) == oracle_view
                return
            raise AssertionError(f"the live state refused {cmd} ({err}) and the reference accepted it")
        assert self.log.next_index == logged + 1
        want_reply, want_blocks = self.oracle.apply(json.loads(json.dumps(self.logged[-1])))  # as logged
        if "tokens" in reply:  # owner tokens are new per request: the log holds their hashes
            reply, want_reply = dict(reply, tokens=None), dict(want_reply, tokens=None)
        assert reply == want_reply
        got = _events(blocks)
        assert got == _events(want_blocks)
        self.events.extend(got)

    @rule(sid=st.integers(0, IDS - 1), data=st.data(), owner=st.sampled_from(["", owner_hash("a"), owner_hash("b")]))
    def subscribe(self, sid, data, owner):
        self._apply({"op": "sub", "rec": data.draw(subscription(sid)), "token_hash": owner})

    @rule(sids=st.lists(st.integers(0, IDS + 2), min_size=1, max_size=4), data=st.data())
    def subscribe_many(self, sids, data):
        body = "".join(json.dumps(data.draw(subscription(sid))) + "\n" for sid in sids)
        self._apply({"op": "subs", "ndjson": body})

    @rule(sid=st.integers(0, IDS + 2))
    def unsubscribe(self, sid):
        self._apply({"op": "unsub", "id": sid})

    @rule(sids=st.lists(st.integers(0, IDS + 2), min_size=1, max_size=4, unique=True))
    def unsubscribe_many(self, sids):
        self._apply({"op": "unsubs", "ids": sids})

    @rule(n=st.integers(1, 6), reuse=st.sampled_from([None] * 4 + ["old", "recent"]), ndjson=st.booleans(),
          bad=st.sampled_from([None] * 12 + ["x", "text", "t"]), data=st.data())
    def publish(self, n, reuse, ndjson, bad, data):
        recs = []
        for i in range(n):
            if self.timed:
                self.clock += data.draw(st.sampled_from([0.0, 0.5, 1.0, 4.0]))
            rec = {"id": self.next_msg, "x": data.draw(coord), "y": data.draw(coord)}
            self.next_msg += 1
            if data.draw(st.booleans()):
                rec["text"] = data.draw(text)
            else:
                rec["terms"] = data.draw(terms)
            if self.timed:
                rec["t"] = self.clock
            recs.append(rec)
        if reuse == "old" and self.next_msg > 40:  # an id long out of the window: accepted again
            recs[0]["id"] = data.draw(st.integers(0, 5))
        elif reuse == "recent" and self.next_msg > n:  # maybe still in the window: E019 if so
            recs[-1]["id"] = self.next_msg - n - 1
        if bad is not None:
            at = data.draw(st.integers(0, n - 1))
            recs[at][bad] = {"x": 99.0, "text": "", "t": -1.0}[bad]
        if ndjson:
            self._apply({"op": "msgs", "ndjson": "".join(json.dumps(r) + "\n" for r in recs)})
        else:
            self._apply({"op": "msgs", "recs": recs})

    @precondition(lambda self: self.timed)
    @rule(data=st.data())
    def snapshot_query(self, data):
        """A snapshot query of any kind (fields as a subscription's): the live state answers as
        the reference does, or refuses it with the same code; with ``--queries lazy`` the first
        one opens the live engine's query window."""
        rec = data.draw(subscription(0))
        rec.pop("id")
        rec.pop("until", None)
        rec = dict(rec, kind=rec.get("kind", "topk"), qid=1)
        answers = []
        for state in (self.live, self.oracle):
            try:
                answers.append(state.query(dict(rec)))
            except InputError as err:
                answers.append(err.code)
        assert answers[0] == answers[1]

    @rule(step=st.sampled_from([0.0, 1.0, 3.0, 20.0, -1.0]))
    def advance(self, step):
        self._apply({"op": "advance", "t": self.clock + step})  # back in time: refused (E009) once a clock is set
        self.clock = max(self.clock, self.live.engine.clock)

    @rule(with_batch=st.booleans(), with_engine=st.booleans())
    def take_snapshot(self, with_batch, with_engine):
        """As ``Worker.take_snapshot``: capture, rotate the log, write (the last subscriptions file
        again when no subscription changed since); without the window's batch, as an older
        snapshot, half the time; with the engine's state (``Engine.export_state``: the restore
        imports the subscriptions' buffers) half the time, else without, as an older one."""
        st_ = self.live
        index = self.log.next_index
        if self.subs_written is not None and self.subs_written[0] == st_.subs_version:
            subs: list | Path = self.subs_written[1]
        else:
            subs = [(sid, rec.decode(), st_.tokens.get(sid, "")) for sid, rec in sorted(st_.records.items())]
        meta = st_.meta()
        meta["vocabulary"] = {k: list(v) if isinstance(v, list) else v for k, v in meta["vocabulary"].items()}
        self.log.rotate()
        window = (*st_.window.columns(), st_.window.batch()) if with_batch else st_.window.columns()
        engine_state = st_.engine_state() if with_engine else None
        path = snapshot.write(self.dir / "snapshots", index, meta, subs, window, engine_state)
        self.subs_written = (st_.subs_version, path / "subscriptions.parquet")
        oldest = snapshot.oldest_kept(self.dir / "snapshots")
        if oldest is not None:
            self.log.drop_before(oldest)

    # ------------------------------------------------------------------ restarts
    def _crash_copy(self) -> Path:
        """The data directory as a SIGKILL now would leave it (every append is written)."""
        copy = Path(tempfile.mkdtemp(prefix="skype-state-machine-copy-", dir=SCRATCH))
        shutil.copytree(self.dir, copy, dirs_exist_ok=True)
        return copy

    @invariant()
    def replayed_and_restored_equal_live(self):
        if not hasattr(self, "live"):
            return
        want = _view(self.live)
        copy = self._crash_copy()
        try:
            replayed = State(_engine(self.window, self.eager))
            events = _events([blk for _, cmd in Log(copy / "full", "never").recover(0)
                              for blk in replayed.apply(cmd)[1]])
            assert events == self.events
            assert _view(replayed) == want
            snap = snapshot.load_newest(copy / "snapshots") if (copy / "snapshots").is_dir() else None
            if snap is None:
                return
            meta, subs, window, engine_state = snap
            assert (engine_state is not None) == ("engine.npz" in meta["crc"])
            restored = State(_engine(self.window, self.eager))
            restored.restore(meta, subs, window, engine_state)
            if engine_state is not None:  # imported, not registered again
                assert restored.restored_by == "engine state"
            events = _events([blk for _, cmd in Log(copy / "log", "never").recover(int(meta["log_index"]))
                              for blk in restored.apply(cmd)[1]])
            assert events == [ev for ev in self.events if ev["seq"] > int(meta["seq"])]
            assert _view(restored) == want
        finally:
            shutil.rmtree(copy, ignore_errors=True)

    @invariant()
    def live_equals_the_reference(self):
        if not hasattr(self, "live"):
            return
        assert _view(self.live) == _view(self.oracle)


ServiceStateMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=25, deadline=None,
                                                 suppress_health_check=[HealthCheck.too_slow])
test_service_state_live_replayed_restored_and_reference_agree = ServiceStateMachine.TestCase
