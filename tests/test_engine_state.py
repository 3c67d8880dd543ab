"""``Engine.export_state`` / ``Engine.import_state`` (issue 34): a restart imports the top-k
subscriptions with their result buffers instead of registering them again.

Differential: engine A runs a stream (fill, bulk registration, part of the stream, single
subscribes and unsubscribes, so that slots are reused and buffers were rebuilt by re-evaluations);
its state goes into engine B, which holds A's window (its messages oldest first, as a service
snapshot keeps them).  Right after the import B's results, thresholds and whole buffers (entries
with their messages, scores and dominance counters, the cost model's fields) equal A's; then both
run the rest of the stream, with unsubscribes and a bulk registration more: every change log and
the final results and buffers are equal, and equal the reference engine's.  Every buffer kind,
every index, count and time windows, adversarial inputs (tied scores, grid locations, extreme
alphas).  Each check of ``import_state`` refuses (E160, E007) having registered nothing.
"""

from __future__ import annotations

import numpy as np
import pytest

from adversarial import BOUNDS, dense_workload
from skype import Engine, ReferenceEngine
from skype.engine import BUFFERS
from skype.engine_state import STATE_ARRAYS
from skype.errors import InputError

WINDOWS = {"count": {"window": 150}, "time": {"window_seconds": 100.0}}
INDEXES = {"blocks": {}, "igpt": {"leaf_capacity": 8}, "ciq": {}, "cone": {"cone": {"tail_min": 8}}}
FILL, CUT = 400, 650  # messages before the registration; A alone runs up to CUT


def workload(seed):
    return dense_workload(seed=seed, num_subs=160, num_messages=900, max_k=12)


def rows(log):
    return sorted(zip(log.at.tolist(), log.sub.tolist(), log.msg.tolist(), log.entered.tolist()))


def results(engine):
    return {sid: [(m.id, m.score) for m in ms] for sid, ms in engine.results()}


def buffers(engine):
    """Every buffer's whole state, each entry's message by its age (the newest arrival's seq
    minus its seq: windows that hold the same messages agree on it) and ``born`` left out (the
    arrival counter it holds is the engine's own)."""
    newest = engine.stats()["arrivals"]
    out = {}
    for sid in sorted(engine.subscription_ids().tolist()):
        st = dict(engine.buffer_state(sid))
        st["entries"] = [((newest - seq) & 0xFFFFFFFF, score, dc) for seq, score, dc in st["entries"]]
        st.pop("born")
        out[sid] = st
    return out


def window_batch(engine, msgs):
    """The engine's window as the batch of its messages, oldest first (what a snapshot keeps)."""
    where = {int(m): i for i, m in enumerate(msgs.ids.tolist())}
    held = engine.window_ids()
    return msgs.take(np.array([where[int(m)] for m in held.tolist()], np.int64))


def first_part(engine, subs, msgs):
    """Fill, register in bulk, stream to CUT with an unsubscribe and two single subscribes
    (reused slots), returning the change rows."""
    out = []
    engine.publish_batch(msgs.slice(0, FILL))
    engine.subscribe_batch(subs.slice(0, 150))
    out += rows(engine.publish_batch(msgs.slice(FILL, 500)))
    for sid in subs.ids[:3].tolist():
        engine.unsubscribe(int(sid))
    engine.subscribe_batch(subs.slice(150, 152))
    out += rows(engine.publish_batch(msgs.slice(500, CUT)))
    return out


def second_part(engine, subs, msgs):
    out = rows(engine.publish_batch(msgs.slice(CUT, 750)))
    for sid in subs.ids[10:14].tolist():
        engine.unsubscribe(int(sid))
    engine.subscribe_batch(subs.slice(152, 160))
    out += rows(engine.publish_batch(msgs.slice(750, len(msgs))))
    return out


def restored(a, vocab, msgs, **kw):
    b = Engine(bounds=BOUNDS, vocabulary=vocab, **kw)
    win = window_batch(a, msgs)
    for start in range(0, len(win), 64):
        b.publish_batch(win.slice(start, min(start + 64, len(win))))
    b.import_state(a.export_state())
    return b


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("index", INDEXES)
@pytest.mark.parametrize("buffer", BUFFERS)
def test_imported_engine_equals_the_exporter_and_the_reference(buffer, index, window):
    vocab, subs, msgs = workload(3)
    kw = dict(buffer=buffer, index=index, **WINDOWS[window], **INDEXES[index])
    a = Engine(bounds=BOUNDS, vocabulary=vocab, **kw)
    ref = ReferenceEngine(bounds=BOUNDS, vocabulary=vocab, **WINDOWS[window])
    assert first_part(a, subs, msgs) == first_part(ref, subs, msgs)
    b = restored(a, vocab, msgs, **kw)
    assert results(b) == results(a) == results(ref)
    assert buffers(b) == buffers(a)
    assert b.check_invariants()
    tail = second_part(a, subs, msgs)
    assert second_part(b, subs, msgs) == tail == second_part(ref, subs, msgs)
    assert results(b) == results(a) == results(ref)
    assert b.check_invariants()


@pytest.mark.parametrize("buffer", BUFFERS)
def test_buffers_right_after_import_equal_the_exporters_in_a_query_window_engine(buffer):
    """``snapshots=True``: the top-k core keeps no window until the import wakes it."""
    vocab, subs, msgs = workload(4)
    a = Engine(bounds=BOUNDS, vocabulary=vocab, buffer=buffer, window=150, snapshots=True)
    first_part(a, subs, msgs)
    b = restored(a, vocab, msgs, buffer=buffer, window=150, snapshots=True)
    assert buffers(b) == buffers(a) and results(b) == results(a)
    assert second_part(b, subs, msgs) == second_part(a, subs, msgs)


def test_until_is_kept():
    vocab, subs, msgs = workload(5)
    a = Engine(bounds=BOUNDS, vocabulary=vocab, window=150)
    a.publish_batch(msgs.slice(0, FILL))
    until = np.full(len(subs), np.nan)
    until[::3] = float(msgs.t[FILL + 100])
    subs.meta["until"] = until
    a.subscribe_batch(subs)
    b = restored(a, vocab, msgs, window=150)
    ref = ReferenceEngine(bounds=BOUNDS, vocabulary=vocab, window=150)
    ref.publish_batch(msgs.slice(0, FILL))
    ref.subscribe_batch(subs)
    want = rows(ref.publish_batch(msgs.slice(FILL, len(msgs))))
    assert rows(b.publish_batch(msgs.slice(FILL, len(msgs)))) == want
    assert rows(a.publish_batch(msgs.slice(FILL, len(msgs)))) == want
    assert results(b) == results(ref)


def test_an_empty_state_imports_nothing():
    vocab, subs, msgs = workload(6)
    a = Engine(bounds=BOUNDS, vocabulary=vocab, window=150)
    a.publish_batch(msgs.slice(0, FILL))
    b = restored(a, vocab, msgs, window=150)
    assert len(b.subscription_ids()) == 0


def _exported():
    vocab, subs, msgs = workload(7)
    a = Engine(bounds=BOUNDS, vocabulary=vocab, window=150)
    first_part(a, subs, msgs)
    return a, vocab, msgs, a.export_state()


def _target(a, vocab, msgs, **kw):
    b = Engine(bounds=BOUNDS, vocabulary=vocab, **dict({"window": 150}, **kw))
    b.publish_batch(window_batch(a, msgs))
    return b


def _changed(state, name, fn):
    out = dict(state)
    out[name] = fn(state[name].copy())
    return out


def _set(i, v):
    def fn(arr):
        arr[i] = v
        return arr
    return fn


BAD = {
    "a missing array": lambda s: {k: v for k, v in s.items() if k != "theta"},
    "another version": lambda s: _changed(s, "version", _set(0, 2)),
    "a wrong dtype": lambda s: _changed(s, "x", lambda a: a.astype(np.float32)),
    "a short array": lambda s: _changed(s, "alpha", lambda a: a[:-1]),
    "an offset past the end": lambda s: _changed(s, "entry_indptr", _set(-1, 10**9)),
    "offsets going back": lambda s: _changed(s, "term_indptr", _set(1, -1)),
    "a repeated id": lambda s: _changed(s, "ids", _set(1, int(s["ids"][0]))),
    "a k of 0": lambda s: _changed(s, "k", _set(0, 0)),
    "an alpha above 1": lambda s: _changed(s, "alpha", _set(0, 1.5)),
    "a location not finite": lambda s: _changed(s, "y", _set(0, np.nan)),
    "a term outside the vocabulary": lambda s: _changed(s, "term_ids", _set(0, 10**6)),
    "a weight of 0": lambda s: _changed(s, "term_weights", _set(0, 0.0)),
    "a negative threshold": lambda s: _changed(s, "theta", _set(0, -1.0)),
    "an entry outside the window": lambda s: _changed(s, "entry_pos", _set(0, len(s["window_ids"]))),
    "an entry's score not finite": lambda s: _changed(s, "entry_score", _set(0, np.inf)),
    "entries out of ranking order": lambda s: _changed(s, "entry_score", lambda a: a[::-1].copy()),
    "another window": lambda s: _changed(s, "window_ids", lambda a: a[::-1].copy()),
}


@pytest.mark.parametrize("case", BAD)
def test_a_state_that_does_not_fit_is_refused_changing_nothing(case):
    a, vocab, msgs, state = _exported()
    b = _target(a, vocab, msgs)
    with pytest.raises(InputError) as err:
        b.import_state(BAD[case](state))
    assert err.value.code == "E160"
    assert len(b.subscription_ids()) == 0
    b.import_state(state)  # the good one still goes in
    assert results(b) == results(a)


def test_other_buffer_kind_refused():
    a, vocab, msgs, state = _exported()
    b = _target(a, vocab, msgs, buffer="exact")
    with pytest.raises(InputError) as err:
        b.import_state(state)
    assert err.value.code == "E160" and "buffer kind" in str(err.value)


@pytest.mark.parametrize("other", [{"kmax": 30}, {"skyband_ratio": 0.5}, {"cost": {"barrier": "window"}},
                                   {"cost": {"refresh_factor": 4.0}}])
def test_other_buffer_parameters_refused(other):
    a, vocab, msgs, state = _exported()
    b = _target(a, vocab, msgs, **other)
    with pytest.raises(InputError) as err:
        b.import_state(state)
    assert err.value.code == "E160" and "buffer parameters" in str(err.value) and len(b.subscription_ids()) == 0


def test_a_window_holding_other_messages_is_refused():
    a, vocab, msgs, state = _exported()
    b = Engine(bounds=BOUNDS, vocabulary=vocab, window=150)
    win = window_batch(a, msgs)
    b.publish_batch(win.slice(1, len(win)))  # one message short
    with pytest.raises(InputError) as err:
        b.import_state(state)
    assert err.value.code == "E160" and len(b.subscription_ids()) == 0


def test_a_subscription_already_registered_is_refused():
    a, vocab, msgs, state = _exported()
    b = _target(a, vocab, msgs)
    b.subscribe_batch(_one(state, vocab))
    with pytest.raises(InputError) as err:
        b.import_state(state)
    assert err.value.code == "E007" and len(b.subscription_ids()) == 1


def _one(state, vocab):
    from skype.model import SubscriptionBatch, TermMatrix

    n = int(state["term_indptr"][1])
    return SubscriptionBatch(state["ids"][:1], state["x"][:1], state["y"][:1], state["k"][:1], state["alpha"][:1],
                             TermMatrix(np.array([0, n]), state["term_ids"][:n].astype(np.int64),
                                        state["term_weights"][:n]))


def test_the_arrays_are_the_documented_ones():
    _, _, _, state = _exported()
    assert set(state) == set(STATE_ARRAYS)
    assert all(state[name].dtype == dtype for name, (dtype, _) in STATE_ARRAYS.items())


@pytest.mark.parametrize("holders", [{"reverse_map": False}, {"exact_holders": False}, {"micro_batch": 16}])
def test_imported_engine_equals_the_exporter_with_other_holder_and_batch_settings(holders):
    vocab, subs, msgs = workload(8)
    kw = dict(window=150, **holders)
    a = Engine(bounds=BOUNDS, vocabulary=vocab, **kw)
    ref = ReferenceEngine(bounds=BOUNDS, vocabulary=vocab, window=150)
    assert first_part(a, subs, msgs) == first_part(ref, subs, msgs)
    b = restored(a, vocab, msgs, **kw)
    assert buffers(b) == buffers(a) and results(b) == results(ref)
    assert second_part(b, subs, msgs) == second_part(a, subs, msgs) == second_part(ref, subs, msgs)
    assert results(b) == results(a) == results(ref)
