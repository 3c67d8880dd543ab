"""The engine's contract (skype/api.py, skype/engine.py): the options object and its keyword
front, the two subscribe verbs (one record; a batch of columns, records or compiled specs), and
the public verbs the runtime and the benches use (``topn_arrays``, ``query_spec``,
``kind_counts``, ``buffer_state``).

Every verb is checked against an independent answer: the reference engine (brute force), the
record-by-record path, or the verb it stands beside (``topn``, ``query``); on random streams
(Hypothesis) and on duplicates, unknown ids and refused options.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skype import Bounds, Engine, InputError, Message, ReferenceEngine, Subscription
from skype.engine_settings import EngineKeywords, EngineOptions, EngineSettings
from skype.queries import KnnSubscription, RangeSubscription, TermsSubscription, compile_subscription
from skype.text import Vocabulary

BOUNDS = Bounds(0.0, 0.0, 10.0, 10.0)
WORDS = ["coffee", "tea", "metro", "park", "museum", "pizza"]


def _stream(seed: int, n: int) -> list[Message]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        words = rng.choice(WORDS, size=int(rng.integers(1, 4)), replace=False)
        out.append(Message(id=i + 1, x=float(rng.integers(0, 11)), y=float(rng.integers(0, 11)), t=float(i),
                           text=" ".join(words)))
    return out


def _records(seed: int) -> list:
    """Subscriptions of every kind, ids 1..24 (tied grid locations, few words)."""
    rng = np.random.default_rng(seed)
    out: list = []
    for i in range(1, 25):
        x, y = float(rng.integers(0, 11)), float(rng.integers(0, 11))
        kind = i % 4
        word = str(rng.choice(WORDS))
        if kind == 0:
            out.append(Subscription(id=i, x=x, y=y, k=int(rng.integers(1, 4)), alpha=float(rng.choice([0.0, 0.5, 1.0])),
                                    text=word))
        elif kind == 1:
            out.append(RangeSubscription(id=i, rect=(min(x, 5.0), min(y, 5.0), max(x, 5.0), max(y, 5.0)), text=word))
        elif kind == 2:
            out.append(KnnSubscription(id=i, x=x, y=y, k=2, text=word))
        else:
            out.append(TermsSubscription(id=i, rect=(0.0, 0.0, x + 1.0, y + 1.0), k=2))
    return out


def _changes(changes) -> list:
    """Result changes with their entries as sorted sets (a terms change lists term names in
    the order of the engine's term ids, which follow the order the engine met them)."""
    return [(c.sub_id, sorted(map(str, c.entered)), sorted(map(str, c.left))) for c in changes]


def _all_results(engine) -> dict:
    return {sid: (kind, [repr(r) for r in result]) for sid, kind, result in engine.results_by_kind()}


# ---------------------------------------------------------------------- the options object
def test_options_object_mapping_and_keywords_build_the_same_engine():
    msgs = _stream(1, 80)
    subs = [r for r in _records(1) if isinstance(r, Subscription)]
    built = [
        Engine(EngineOptions(index="igpt", buffer="exact", leaf_capacity=4), window=20, bounds=BOUNDS),
        Engine({"index": "igpt", "buffer": "exact", "leaf_capacity": 4}, window=20, bounds=BOUNDS),
        Engine(window=20, bounds=BOUNDS, index="igpt", buffer="exact", leaf_capacity=4),
        Engine(EngineOptions(index="blocks"), window=20, bounds=BOUNDS, index="igpt", buffer="exact", leaf_capacity=4),
    ]
    ref = ReferenceEngine(window=20, bounds=BOUNDS)
    for e in [*built, ref]:
        for s in subs:
            e.subscribe(s)
        for m in msgs:
            e.publish(m)
    want = dict(ref.results())
    for e in built:
        assert e.options == EngineOptions(index="igpt", buffer="exact", leaf_capacity=4)
        assert (e.index_kind, e.buffer_kind) == ("igpt", "exact")
        assert dict(e.results()) == want


def test_options_refused():
    with pytest.raises(InputError, match="engine option"):
        Engine({"index": "blocks", "windows": 3}, window=10)
    with pytest.raises(TypeError, match="indexx"):
        Engine(window=10, indexx="blocks")
    with pytest.raises(InputError, match="engine options"):
        Engine(["blocks"], window=10)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="index"):
        Engine(EngineOptions(index="btree"), window=10)  # the engine checks the values


def test_the_keyword_front_names_every_option_with_its_type():
    """``EngineKeywords`` (what a type checker sees of ``Engine(**keywords)``) and
    ``EngineOptions`` hold the same fields with the same annotations."""
    import dataclasses

    keywords = {name: getattr(t, "__forward_arg__", t) for name, t in EngineKeywords.__annotations__.items()}
    assert keywords == {f.name: f.type for f in dataclasses.fields(EngineOptions)}


def test_settings_give_the_options_of_their_engine():
    settings = EngineSettings.from_options({"index": "ipt", "buffer": "kmax", "kmax": 7, "registration": "replay"})
    options = settings.options(snapshots=True)
    assert (options.index, options.buffer, options.kmax, options.registration, options.snapshots) == (
        "ipt", "kmax", 7, "replay", True)
    assert EngineOptions().with_changes(micro_batch=8).micro_batch == 8
    with pytest.raises(TypeError):
        EngineOptions().with_changes(nothing=1)


# ---------------------------------------------------------------------- one verb, one batch verb
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.sampled_from([0, 15, 40]), st.sampled_from(["records", "specs"]))
def test_a_batch_of_records_or_specs_equals_one_by_one_and_the_reference(seed, before, form):
    """``subscribe_batch`` with records of every kind (or their compiled specs beside topk
    records), at any point of the stream, gives every subscription the results of ``subscribe``
    one by one, and the reference engine's."""
    msgs, records = _stream(seed, 70), _records(seed)
    one = Engine(window=25, bounds=BOUNDS, snapshots=True)
    batch = Engine(window=25, bounds=BOUNDS, snapshots=True)
    ref = ReferenceEngine(window=25, bounds=BOUNDS)
    for m in msgs[:before]:
        for e in (one, batch, ref):
            e.publish(m)
    for r in records:
        one.subscribe(r)
        ref.subscribe(r)
    if form == "specs":
        items = [r if isinstance(r, Subscription) else
                 compile_subscription(r, batch.vocabulary, batch.bounds, batch.clock) for r in records]
    else:
        items = records
    assert batch.subscribe_batch(items) is None
    assert _all_results(batch) == _all_results(one) == _all_results(ref)
    for m in msgs[before:]:
        assert _changes(batch.publish(m)) == _changes(one.publish(m)) == _changes(ref.publish(m))
    assert _all_results(batch) == _all_results(ref)
    assert batch.kind_counts() == one.kind_counts() == ref.kind_counts() == {"topk": 6, "range": 6, "knn": 6,
                                                                            "terms": 6}


def test_a_batch_refuses_a_duplicate_id_of_any_form():
    e = Engine(window=10, bounds=BOUNDS, snapshots=True)
    e.subscribe(RangeSubscription(id=3, rect=(0, 0, 1, 1), text="tea"))
    spec = compile_subscription(KnnSubscription(id=3, x=1, y=1, text="tea"), e.vocabulary, e.bounds, e.clock)
    for item in (Subscription(id=3, x=1, y=1, k=1, alpha=0.5, text="tea"), spec,
                 TermsSubscription(id=3, rect=(0, 0, 1, 1))):
        with pytest.raises(InputError, match="E007"):
            e.subscribe_batch([item])
    assert e.kind_counts() == {"topk": 0, "range": 1}


def test_a_topk_only_engine_refuses_other_kinds_in_a_batch():
    e = Engine(window=10, bounds=BOUNDS)
    with pytest.raises(InputError, match="E050"):
        e.subscribe_batch([RangeSubscription(id=1, rect=(0, 0, 1, 1), text="tea")])


# ---------------------------------------------------------------------- public verbs beside the old ones
@pytest.mark.parametrize("make", [lambda: Engine(window=30, bounds=BOUNDS, snapshots=True),
                                  lambda: ReferenceEngine(window=30, bounds=BOUNDS)], ids=["core", "reference"])
def test_topn_arrays_and_query_spec_answer_as_topn_and_query(make):
    e = make()
    records = _records(7)
    e.subscribe_batch(records)
    for m in _stream(7, 60):
        e.publish(m)
    for r in records:
        if isinstance(r, Subscription):
            for n in (0, 1, 5, 100):
                ids, scores = e.topn_arrays(r.id, n)
                assert [(int(i), float(s)) for i, s in zip(ids, scores)] == [(m.id, m.score) for m in e.topn(r.id, n)]
    from skype.queries import compile_query

    for kind, fields in [("range", {"rect": (0, 0, 6, 6), "text": "coffee"}), ("knn", {"x": 3, "y": 3, "k": 4}),
                         ("terms", {"rect": (0, 0, 10, 10), "k": 3})]:
        spec = compile_query(kind, fields, e.vocabulary, e.bounds, e.clock, snapshot=True)
        assert e.query_spec(spec) == e.query(kind, **fields)
        assert e.query_spec(spec, e.clock) == e.query(kind, **fields)
    with pytest.raises(InputError, match="E020"):
        e.topn_arrays(999, 1)
    with pytest.raises(InputError, match="E023"):
        e.topn_arrays(records[0].id, -1)


def test_buffer_state_is_the_cores_and_refuses_an_unknown_id():
    e = Engine(window=20, bounds=BOUNDS, buffer="exact")
    e.subscribe(Subscription(id=1, x=1, y=1, k=2, alpha=0.5, text="coffee"))
    for m in _stream(3, 30):
        e.publish(m)
    state = e.buffer_state(1)
    assert state["k"] == 2 and len(state["entries"]) >= len(e.topk(1))
    with pytest.raises(InputError, match="E020"):
        e.buffer_state(2)


def test_the_vocabulary_the_engine_keeps_is_the_one_given():
    v = Vocabulary()
    assert Engine(EngineOptions(), window=5, vocabulary=v).vocabulary is v


def test_the_structures_the_benches_drive_are_the_engines_own():
    """``window_memory_parts`` adds up to the window's figure in ``stats()``; the index and the
    table are the objects the engine's stats describe."""
    e = Engine(window=50, bounds=BOUNDS)
    e.subscribe(Subscription(id=1, x=1, y=1, k=2, alpha=0.5, text="coffee"))
    for m in _stream(5, 80):
        e.publish(m)
    parts = e.window_memory_parts()
    assert set(parts) >= {"messages", "terms"} and sum(parts.values()) == e.stats()["memory_bytes"]["window"]
    assert e.subscription_index.memory_bytes() == e.stats()["memory_bytes"]["subscription_index"]
    assert type(e.subscription_table).__name__ == "SubTable"
    s = e.stats()
    mem = s["memory_parts"]
    buffer_parts = ("buffer_records", "buffer_entries_held", "buffer_class_rounding", "buffer_page_slack")
    assert sum(mem[k] for k in buffer_parts) == s["memory_bytes"]["buffers"]
    assert mem["buffer_entries_held"] == s["buffered_entries"] * s["buffer_arena"]["entry_bytes"] > 0
    assert mem["buffer_class_rounding"] >= 0 and mem["buffer_page_slack"] >= 0
    assert sum(v for k, v in mem.items() if k.startswith("window_")) == s["memory_bytes"]["window"]
    assert mem["registration_index_peak"] == 0          # one subscription: no bulk registration


def test_a_vocabulary_from_its_table_is_the_same_vocabulary():
    v = Vocabulary.build([["coffee", "paris"], ["paris", "metro"], ["paris"]])
    terms, df = v.table()
    again = Vocabulary.from_table(terms, df, v.num_docs)
    assert again.to_dict() == v.to_dict() and again.table() == (terms, df)
    assert [again.id(t) for t in terms] == list(range(len(terms)))
    assert again.id("unseen") == len(terms)  # a new term takes the next id, as in the original
