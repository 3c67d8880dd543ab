"""The state's side of the bulk calls and pages (``skype.service.manysubs``), in process, with
Hypothesis: a bulk body with one bad record anywhere is refused naming its line and leaves the
state exactly as it was (records, owners, vocabulary, seq, the engine's subscriptions); a good
one gives the results of single subscribes; pages equal slices of the sorted ids."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given, settings, strategies as st

from skype.errors import InputError
from skype.reference import ReferenceEngine
from skype.service import ingest, manysubs
from skype.service.state import State

WORDS = ["pizza", "pasta", "sushi", "ramen", "tacos", "curry"]
BAD = [("k", 0, "E003"), ("alpha", 2.0, "E004"), ("x", "east", "E012"), ("text", "", "E005"),
       ("terms", {"pizza": -1.0}, "E006"), ("terms", None, "E012"), ("k", True, "E003"), ("id", 2**63, "E025")]


def new_state() -> State:
    state = State(lambda v: ReferenceEngine(window=12, vocabulary=v))
    msgs = "".join(json.dumps({"id": i, "x": (i % 5) - 2.0, "y": (i % 3) - 1.0, "text": f"{WORDS[i % 6]} w{i}"}) + "\n"
                   for i in range(20))
    state.apply({"op": "msgs", "ndjson": msgs})
    return state


def sub(sid: int, draw_word: str, k: int) -> dict:
    return {"id": sid, "x": float(sid % 7) - 3, "y": float(sid % 5) - 2, "k": k, "alpha": 0.5,
            "text": f"{draw_word} fresh{sid}"}  # fresh terms: a refusal must forget them


def snapshot(state: State) -> tuple:
    return (dict(state.records), dict(state.tokens), len(state.vocabulary), state.seq,
            sorted(state.engine.subscription_ids().tolist()))


@settings(max_examples=40, deadline=None)
@given(ids=st.lists(st.integers(1, 10**6), min_size=1, max_size=30, unique=True), data=st.data())
def test_a_bad_record_anywhere_changes_nothing(ids, data):
    state = new_state()
    state.apply({"op": "sub", "rec": sub(999_999_999, "pizza", 2), "token_hash": ""})
    recs = [sub(sid, data.draw(st.sampled_from(WORDS)), data.draw(st.integers(1, 4))) for sid in ids]
    at = data.draw(st.integers(0, len(recs) - 1))
    field, value, code = data.draw(st.sampled_from(BAD + [("id", 999_999_999, "E007"), ("id", None, "E012")]))
    if field == "id" and value is None:
        if len(recs) < 2:
            return
        value, code = recs[(at + 1) % len(recs)]["id"], "E007"  # repeated in the body
    bad = dict(recs[at])
    if field == "terms":
        bad.pop("text")
    bad[field] = value
    recs[at] = bad
    lines = [json.dumps(r) for r in recs]
    blank = data.draw(st.integers(0, len(lines)))
    lines.insert(blank, "   ")  # a blank line is skipped but counted
    before = snapshot(state)
    try:
        state.apply({"op": "subs", "ndjson": "\n".join(lines)})
    except InputError as err:
        assert err.code == code, (err, field)
        line = at + 1 + (blank <= at)
        if field == "id" and code == "E007" and value != 999_999_999:
            line = max(at, (at + 1) % len(recs)) + 1 + (blank <= max(at, (at + 1) % len(recs)))
        assert err.line == line, (err, at, blank)
    else:
        raise AssertionError("the bad record was accepted")
    assert snapshot(state) == before


@settings(max_examples=25, deadline=None)
@given(ids=st.lists(st.integers(1, 10**9), min_size=1, max_size=40, unique=True), data=st.data())
def test_bulk_equals_single_subscribes_and_pages_are_slices(ids, data):
    bulk, single = new_state(), new_state()
    recs = [sub(sid, data.draw(st.sampled_from(WORDS)), data.draw(st.integers(1, 4))) for sid in ids]
    reply, events = bulk.apply({"op": "subs", "ndjson": "".join(json.dumps(r) + "\n" for r in recs)})
    assert reply["created"] == len(recs) and reply["ids"] == ids and len(reply["tokens"]) == len(recs)
    for rec in sorted(recs, key=lambda r: r["id"]):  # the creation events come in id order
        single.apply({"op": "sub", "rec": rec, "token_hash": ""})
    assert bulk.results_ndjson() == single.results_ndjson()
    assert bulk.seq == single.seq
    block = events[0]
    assert block.subs.tolist() == sorted(ids) and block.seq0 == single.seq - len(ids) + 1
    order = sorted(ids)
    after = data.draw(st.one_of(st.none(), st.integers(0, 10**9)))
    limit = data.draw(st.integers(1, 50))
    page, nxt = manysubs.page_ids(bulk, after, limit)
    rest = [i for i in order if after is None or i > after]
    assert page == rest[:limit] and nxt == (page[-1] if len(rest) > limit else None)
    body, _ = manysubs.records_page(bulk, after, limit)
    assert [r["id"] for r in json.loads(body)["subscriptions"]] == page
    text, _ = manysubs.results_page(bulk, after, limit)
    assert [json.loads(x)["id"] for x in text.decode().splitlines()] == page
    # bulk delete of a random subset: the same results as single deletes
    gone = data.draw(st.lists(st.sampled_from(ids), unique=True, max_size=len(ids)))
    if gone:
        bulk.apply({"op": "unsubs", "ids": gone})
        for sid in sorted(gone):
            single.apply({"op": "unsub", "id": sid})
        assert bulk.results_ndjson() == single.results_ndjson() and bulk.seq == single.seq
        assert np.array_equal(manysubs.sorted_ids(bulk), np.array(sorted(set(ids) - set(gone)), np.int64))


TEXTS = st.lists(st.sampled_from(WORDS + ["Pizza", "PASTA", "the", "café", "Café", "naïve", "x1", "a"]),
                 min_size=0, max_size=20).map(" ".join)
TERMS = st.dictionaries(st.sampled_from(WORDS + ["Pizza", "SUSHI", "ǅemal", "x1"]),
                        st.floats(0.01, 100.0) | st.integers(1, 9), min_size=1, max_size=6)


@st.composite
def topk_record(draw, sid: int) -> dict:
    rec: dict = {"id": sid, "x": draw(st.floats(-4, 4) | st.integers(-4, 4)), "y": draw(st.floats(-3, 3)),
                 "k": draw(st.integers(1, 6)), "alpha": draw(st.sampled_from([0, 1, 0.25, 0.5]))}
    if draw(st.booleans()):
        rec["text"] = draw(TEXTS)
    else:
        rec["terms"] = draw(TERMS)
    if draw(st.booleans()):
        rec["until"] = draw(st.sampled_from([None, 100.0, 19.0, 5.0, 1e9]))
    if draw(st.booleans()):
        rec["op"] = "sub"
    return rec


@settings(max_examples=60, deadline=None)
@given(ids=st.lists(st.integers(1, 10**12), min_size=1, max_size=25, unique=True), data=st.data())
def test_columnar_checks_equal_the_records_checks(ids, data):
    """Where the columnar path accepts a body, the record-by-record path accepts it too and
    gives the same batch, bit for bit, and the same new term ids; where it refuses, the
    service falls back to that path (so only acceptance needs to agree)."""
    recs = [data.draw(topk_record(sid)) for sid in ids]
    body = "".join(json.dumps(r) + "\n" for r in recs)
    columnar, records = new_state(), new_state()
    clock = columnar.engine.clock
    try:
        got_ids, got, _ = manysubs.columnar_topk(body.encode(), len(recs), columnar, clock)
    except ingest.Rejected:
        return
    want_ids, want, others = manysubs.checked_records([json.loads(json.dumps(r)) for r in recs],
                                                      list(range(1, len(recs) + 1)), records, clock)
    assert others == [] and got_ids == want_ids == ids
    for name in ("ids", "x", "y", "k", "alpha"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
    for name in ("indptr", "ids", "weights"):
        assert getattr(got.terms, name).tobytes() == getattr(want.terms, name).astype(
            getattr(got.terms, name).dtype).tobytes(), name
    assert ("until" in got.meta) == ("until" in want.meta)
    if "until" in got.meta:
        assert np.array_equal(got.meta["until"], want.meta["until"], equal_nan=True)
    assert [columnar.vocabulary.term(i) for i in range(len(columnar.vocabulary))] == \
        [records.vocabulary.term(i) for i in range(len(records.vocabulary))]


def _restored(state: State, tmp_path, name: str, *, columns: bool, monkeypatch) -> State:
    from skype.service import snapshot as snap

    subs = [(sid, rec.decode(), state.tokens.get(sid, "")) for sid, rec in sorted(state.records.items())]
    path = snap.write(tmp_path / name, 1, state.meta(), subs, state.window.columns())
    meta, recs, window, _ = snap.read(path)  # (no engine state: written without one)
    again = State(lambda v: ReferenceEngine(window=12, vocabulary=v))
    if not columns:
        monkeypatch.setattr(State, "_restore_topk_by_columns", lambda self, packed, clock: False)
    again.restore(meta, recs, window)
    monkeypatch.undo()
    return again


def _view(state: State) -> tuple:
    results = {sid: [(m.id, m.score) for m in state.engine.topk(sid)] if sid not in state.other_kinds else None
               for sid in state.records}
    records = {sid: json.loads(rec) for sid, rec in state.records.items()}  # a bulk body keeps its lines as sent
    return (results, records, dict(state.tokens), state.vocabulary.to_dict(),
            manysubs.page_ids(state, None, 1000))


@settings(max_examples=20, deadline=None)
@given(ids=st.lists(st.integers(1, 10**9), min_size=1, max_size=30, unique=True), data=st.data())
def test_a_restore_by_columns_equals_the_record_path_and_the_live_state(ids, data, tmp_path_factory):
    """Restoring a snapshot's topk subscriptions through the bulk call's columnar checks gives
    the live state's results, records, owners, vocabulary and pages, exactly as the
    record-by-record path does; a snapshot holding another kind falls back to that path."""
    import pytest

    state = new_state()
    recs = []
    for sid in ids:
        rec = sub(sid, data.draw(st.sampled_from(WORDS)), data.draw(st.integers(1, 4)))
        if data.draw(st.booleans()):
            rec.pop("text")
            rec["terms"] = {data.draw(st.sampled_from(WORDS)): data.draw(st.floats(0.1, 5.0)), f"t{sid}": 1.0}
        if data.draw(st.booleans()):
            rec["until"] = 1e9
        recs.append(rec)
    if data.draw(st.booleans()):
        recs.append({"id": 2 * 10**9, "kind": "range", "rect": [-3.0, -2.0, 3.0, 2.0], "match": "any",
                     "text": "pizza ramen"})
    state.apply({"op": "subs", "ndjson": "".join(json.dumps(r) + "\n" for r in recs)})
    msgs = "".join(json.dumps({"id": 100 + i, "x": (i % 5) - 2.0, "y": (i % 3) - 1.0,
                               "text": f"{WORDS[(i * 5) % 6]} fresh{ids[i % len(ids)]}"}) + "\n" for i in range(15))
    state.apply({"op": "msgs", "ndjson": msgs})
    tmp = tmp_path_factory.mktemp("restore")
    with pytest.MonkeyPatch.context() as mp:
        by_columns = _restored(state, tmp, "a", columns=True, monkeypatch=mp)
        by_records = _restored(state, tmp, "b", columns=False, monkeypatch=mp)
    assert _view(by_columns) == _view(state) == _view(by_records)
