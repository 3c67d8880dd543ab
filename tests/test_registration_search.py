"""Registration by search (``registration="search"``: per-term k-d trees, csrc/skype/_core/regtree.pyx,
over regsearch.pyx's entries and masks) against its oracles, the replay and the reference.

The search must hand ``Buffers.init_sub_from`` exactly the runs the replay (bulk.pyx) hands it,
so every buffer (entries, dominance counters, thresholds, plans) is identical between the two
registration paths; and the results before and after the stream equal the reference engine's.
Adversarial inputs: tied scores (few distinct weights, grid locations), alpha 0 and 1,
subscriptions whose terms the window never holds, k larger than the matches, several passes
(a small heap budget); for the trees also crowded locations (splits on equal coordinates,
points on node borders), terms with one message, an empty and a one-message window.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adversarial import BOUNDS, dense_workload
from skype import Engine, ReferenceEngine
from skype.engine import BUFFERS
from skype.errors import InputError
from skype.model import MessageBatch, SubscriptionBatch, TermMatrix
from skype.text import Vocabulary, normalize_rows
from test_bulk_registration import FILL, INDEXES, WINDOWS, drive, reference, results, workload

SEARCHES = ("search",)
MODES = ("replay",) + SEARCHES


def engine(vocab, registration, *, buffer, budget=1 << 20, factor=2, **kw):
    eng = Engine(bounds=BOUNDS, vocabulary=vocab, buffer=buffer, registration=registration, **kw)
    eng._core.configure_bulk(1, budget, factor, True)  # the core's knobs: small batches, several passes
    return eng


def states(eng, ids):
    return [eng.buffer_state(int(i)) for i in ids]


@pytest.mark.parametrize("mode", SEARCHES)
@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("index", INDEXES)
@pytest.mark.parametrize("buffer", BUFFERS)
def test_search_registration_equals_reference(buffer, index, window, mode):
    vocab, subs, msgs = workload(1)
    eng = engine(vocab, mode, buffer=buffer, budget=600, factor=1, index=index, **WINDOWS[window],
                 **INDEXES[index])
    assert drive(eng, subs, msgs) == reference(1, window, None)
    assert eng.check_invariants()
    b = eng.stats()["bulk_registration"]
    assert b["mode"] == "search" and b["passes"] > 1 and b["search"]["searches"] > 0


@pytest.mark.parametrize("mode", SEARCHES)
@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("buffer", BUFFERS)
def test_search_registration_mid_stream_equals_reference(buffer, window, mode):
    vocab, subs, msgs = workload(2)
    eng = engine(vocab, mode, buffer=buffer, leaf_capacity=8, **WINDOWS[window])
    assert drive(eng, subs, msgs, split=60) == reference(2, window, 60)
    assert eng.stats()["bulk_registration"]["subscriptions"] == 160


@pytest.mark.parametrize("buffer", BUFFERS)
def test_buffers_identical_to_the_replay(buffer):
    """Same runs, same passes, same build order: every buffer's whole state is the replay's,
    right after registration and after a stream that re-evaluates some of them."""
    vocab, subs, msgs = workload(5)
    got = {}
    for mode in MODES:
        eng = engine(vocab, mode, buffer=buffer, budget=700, factor=1, window=150)
        eng.publish_batch(msgs.slice(0, FILL))
        eng.subscribe_batch(subs)
        after = states(eng, subs.ids)
        eng.publish_batch(msgs.slice(FILL, len(msgs)))
        got[mode] = (after, states(eng, subs.ids), eng.stats()["bulk_fallbacks"])
    assert got["search"] == got["replay"]


@pytest.mark.parametrize("buffer", BUFFERS)
def test_runs_in_many_parts_give_the_same_buffers(buffer):
    """A pass's runs are searched and built in parts bounded by RUNS_AT_ONCE: parts of a few
    subscriptions (each part its own sort by term) give every buffer the state of one part."""
    from skype._core.regtree import set_runs_at_once

    vocab, subs, msgs = workload(5)
    got = []
    for at_once in (1 << 21, 1, 90):
        before = set_runs_at_once(at_once)
        try:
            eng = engine(vocab, "search", buffer=buffer, budget=700, factor=1, window=150)
            eng.publish_batch(msgs.slice(0, FILL))
            eng.subscribe_batch(subs)
        finally:
            set_runs_at_once(before)
        after = states(eng, subs.ids)
        eng.publish_batch(msgs.slice(FILL, len(msgs)))
        got.append((after, states(eng, subs.ids), eng.stats()["bulk_fallbacks"]))
    assert got[1] == got[0] and got[2] == got[0]


@pytest.mark.parametrize("order", [0, 1])
@pytest.mark.parametrize("buffer", BUFFERS)
def test_batch_order_and_prefetch_keep_search_equal_to_replay(buffer, order):
    """The batch ordered by term and place (1) or kept as given (0): the search's buffers equal
    the replay's under the same order, whatever the prefetch of the entry items' loads and the
    parts, and the results after the stream equal the reference's."""
    from skype._core.regtree import set_prefetch_items, set_runs_at_once, set_search_order

    vocab, subs, msgs = workload(6)
    ref = reference(6, "count", None)
    got = []
    for mode, prefetch, at_once in (("replay", 0, 1 << 21), ("search", 0, 1 << 21), ("search", 1, 90),
                                    ("search", 2, 1)):
        before = (set_search_order(order), set_prefetch_items(prefetch), set_runs_at_once(at_once))
        try:
            eng = engine(vocab, mode, buffer=buffer, budget=700, factor=1, window=150)
            eng.publish_batch(msgs.slice(0, FILL))
            eng.subscribe_batch(subs)
        finally:
            set_search_order(before[0])
            set_prefetch_items(before[1])
            set_runs_at_once(before[2])
        got.append(states(eng, subs.ids))
        eng.publish_batch(msgs.slice(FILL, len(msgs)))
        assert results(eng) == ref[2]
        assert eng.check_invariants()
    assert all(g == got[0] for g in got[1:])


def test_short_runs_fall_back_identically():
    # hot terms, tied scores: runs of k + 16 are too short for many skyband scans
    vocab, subs, msgs = dense_workload(seed=3, num_subs=160, num_messages=900, vocab_size=6, zipf=2.0)
    got = {}
    for mode in MODES:
        eng = engine(vocab, mode, buffer="skyband", factor=1, window=300)
        eng.publish_batch(msgs.slice(0, FILL))
        eng.subscribe_batch(subs)
        got[mode] = (states(eng, subs.ids), eng.stats()["bulk_fallbacks"])
    assert got["search"] == got["replay"]
    assert got["search"][1] > 0


@pytest.mark.parametrize("mode", ["guess", "search-bands", "search-mask64"])
def test_unknown_registration_mode_is_refused(mode):
    """Only the search and its oracle, the replay (the earlier layouts were removed)."""
    with pytest.raises(InputError, match="registration"):
        Engine(bounds=BOUNDS, window=10, registration=mode)


def _matrix(rows, vocab_size, max_terms, weights, draw):
    r, ids, raw = [], [], []
    for i in range(rows):
        chosen = sorted(set(draw(st.lists(st.integers(0, vocab_size - 1), min_size=1, max_size=max_terms))))
        r.extend([i] * len(chosen))
        ids.extend(chosen)
        raw.extend(draw(st.sampled_from(weights)) for _ in chosen)
    r_a = np.array(r, np.int64)
    w = normalize_rows(r_a, np.array(raw, float), rows)
    indptr = np.zeros(rows + 1, np.int64)
    np.cumsum(np.bincount(r_a, minlength=rows), out=indptr[1:])
    return TermMatrix(indptr, np.array(ids, np.int64), w)


@st.composite
def adversarial(draw):
    """A window over message terms [0, v) and subscriptions over [0, v + 3): some subscription
    terms are absent from the window (and rare ones have a single message); grid locations and
    few weights tie scores; alphas include 0 and 1; k up to 40 (often above the matches)."""
    v = draw(st.integers(1, 6))
    n_msgs = draw(st.integers(1, 240))
    n_subs = draw(st.integers(1, 40))
    # a 5 x 5 grid, one or two crowded points (the trees split on weights, medians on equal
    # coordinates, points on node borders), or a finer grid (deeper spatial splits)
    cells = draw(st.sampled_from([5, 1, 2, 23]))
    step = 4.0 if cells <= 5 else 0.7
    grid = st.integers(0, cells - 1).map(lambda c: c * step)
    weights = [1.0, 2.0] if draw(st.booleans()) else [1.0, 2.0, 0.5, 3.0, 0.7]
    msgs = MessageBatch(np.arange(n_msgs, dtype=np.int64) * 5 + 1,
                        np.array(draw(st.lists(grid, min_size=n_msgs, max_size=n_msgs))),
                        np.array(draw(st.lists(grid, min_size=n_msgs, max_size=n_msgs))),
                        np.arange(n_msgs, dtype=float), _matrix(n_msgs, v, 4, weights, draw))
    alpha = st.sampled_from([0.0, 1.0, 0.5, 0.25, 1e-9])
    subs = SubscriptionBatch(np.arange(n_subs, dtype=np.int64) * 3 + 2,
                             np.array(draw(st.lists(grid, min_size=n_subs, max_size=n_subs))),
                             np.array(draw(st.lists(grid, min_size=n_subs, max_size=n_subs))),
                             np.array(draw(st.lists(st.integers(1, 40), min_size=n_subs, max_size=n_subs)), np.int64),
                             np.array(draw(st.lists(alpha, min_size=n_subs, max_size=n_subs))),
                             _matrix(n_subs, v + 3, 3, weights, draw))
    vocab = Vocabulary.from_document_frequencies({f"w{i}": v + 3 - i for i in range(v + 3)}, n_msgs)
    return vocab, subs, msgs, draw(st.sampled_from(BUFFERS)), draw(st.integers(1, 3))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(adversarial())
def test_search_equals_replay_and_reference_on_adversarial_windows(case):
    vocab, subs, msgs, buffer, factor = case
    window = max(1, len(msgs) // 2)
    ref = ReferenceEngine(bounds=BOUNDS, vocabulary=vocab, window=window)
    ref.publish_batch(msgs)
    ref.subscribe_batch(subs)
    got = {}
    for mode in MODES:
        eng = engine(vocab, mode, buffer=buffer, factor=factor, window=window)
        eng.publish_batch(msgs)
        eng.subscribe_batch(subs)
        got[mode] = states(eng, subs.ids)
        assert results(eng) == results(ref)
    assert got["search"] == got["replay"]


@pytest.mark.parametrize("fill", [0, 1])
@pytest.mark.parametrize("mode", MODES)
def test_registration_into_an_empty_or_one_message_window(mode, fill):
    vocab, subs, msgs = workload(3)
    ref = ReferenceEngine(bounds=BOUNDS, vocabulary=vocab, window=150)
    eng = engine(vocab, mode, buffer="cskyband", window=150)
    for e in (ref, eng):
        e.publish_batch(msgs.slice(0, fill))
        e.subscribe_batch(subs)
    assert results(eng) == results(ref)
    for e in (ref, eng):
        e.publish_batch(msgs.slice(fill, FILL))
    assert results(eng) == results(ref)
    assert eng.check_invariants()


def test_tree_layout_counters():
    """The default search builds one k-d tree per term (leaves of up to 8 entries, so at least
    entries / 8 leaves and fewer than 2 nodes per leaf) and counts its descents and scans."""
    vocab, subs, msgs = workload(4)
    eng = engine(vocab, "search", buffer="cskyband", window=300)
    eng.publish_batch(msgs.slice(0, FILL))
    eng.subscribe_batch(subs)
    search = eng.stats()["bulk_registration"]["search"]
    leaves_at_least = search["entries"] / 8
    assert leaves_at_least <= search["nodes"] < 4 * leaves_at_least + 2 * 20
    # cSkyband initialises 32 sampled subscriptions per subscription first (the cost model)
    assert search["searches"] == len(subs) - 32 and search["descents"] > 0 and search["entry_scans"] > 0


def _shared_terms_workload(seed, vocab_size, max_msg_terms, max_sub_terms, alphas, ks, n_msgs=300, n_subs=240):
    """Messages and subscriptions over many shared terms, ties (grid locations, two weights):
    many messages hold several terms of a subscription (designation, entry items), and the
    entry masks collide (false matches) or saturate when messages hold many terms."""
    rng = np.random.default_rng(seed)

    def matrix(rows, max_terms):
        counts = rng.integers(1, max_terms + 1, rows)
        ids, r = [], []
        for i, c in enumerate(counts):
            chosen = np.unique(rng.zipf(1.3, c) % vocab_size)
            ids.extend(chosen.tolist())
            r.extend([i] * len(chosen))
        r_a = np.array(r, np.int64)
        w = normalize_rows(r_a, rng.choice([1.0, 2.0], len(r_a)), rows)
        indptr = np.zeros(rows + 1, np.int64)
        np.cumsum(np.bincount(r_a, minlength=rows), out=indptr[1:])
        return TermMatrix(indptr, np.array(ids, np.int64), w)

    grid = lambda n: rng.integers(0, 5, n) * 4.0  # noqa: E731  (BOUNDS: 0..16)
    msgs = MessageBatch(np.arange(n_msgs, dtype=np.int64) + 1, grid(n_msgs), grid(n_msgs),
                        np.arange(n_msgs, dtype=float), matrix(n_msgs, max_msg_terms))
    subs = SubscriptionBatch(np.arange(n_subs, dtype=np.int64) + 1, grid(n_subs), grid(n_subs),
                             rng.choice(ks, n_subs).astype(np.int64), rng.choice(alphas, n_subs),
                             matrix(n_subs, max_sub_terms))
    vocab = Vocabulary.from_document_frequencies({f"w{i}": vocab_size - i for i in range(vocab_size)}, n_msgs)
    return vocab, subs, msgs


@pytest.mark.parametrize("case", [
    # (vocabulary, terms a message at most, terms a subscription at most)
    (400, 12, 6),    # wide masks barely collide: the masks decide designation and entry items
    (2000, 60, 8),   # messages of up to 60 terms: wide masks saturate, every test says "may hold"
    (30, 10, 8),     # few terms, all shared: most messages hold several terms of a subscription
])
@pytest.mark.parametrize("alphas, ks", [([0.0], [1]), ([1.0], [500]), ([0.0, 0.5, 1.0, 0.3], [1, 3, 20, 500])])
def test_entry_masks_on_shared_terms(case, alphas, ks):
    """The entry masks (128 bits, 4 a term, the batch's terms only) only decide which messages
    are read from the window: every buffer equals the replay's and every result the reference's,
    with many shared terms, colliding and saturated masks, ties, alpha 0 and 1, k = 1 and k
    above the matches."""
    vocab, subs, msgs = _shared_terms_workload(len(alphas) * 7 + case[0], *case, alphas, ks)
    ref = ReferenceEngine(bounds=BOUNDS, vocabulary=vocab, window=300)
    ref.publish_batch(msgs)
    ref.subscribe_batch(subs)
    got = {}
    for mode in MODES:
        eng = engine(vocab, mode, buffer="cskyband", budget=2000, factor=1, window=300)
        eng.publish_batch(msgs)
        eng.subscribe_batch(subs)
        got[mode] = states(eng, subs.ids)
        assert results(eng) == results(ref)
    assert got["search"] == got["replay"]
