"""The message index's entry signatures (csrc/skype/_core/termlists.pyx): an entry of the lists carries
a 16-bit signature of its message's terms and its weight in 1/65535ths rounded up, and is bounded
from them alone (only the other query terms whose bit the signature holds add to the bound).  If a
bound fell below a designated message's score, the ranking order would break: ``topn`` (a pull in
ranking order) and the change logs are compared with the reference on adversarial workloads (tied
weights and locations, one-term messages, query terms sharing a signature bit, alpha 0 and 1), with
signatures on and off; and the signatures must read fewer window records where the bound without
them is loose."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from adversarial import BOUNDS, dense_workload
from skype import Engine, ReferenceEngine
from skype._core.termlists import set_entry_signatures
from skype.model import MessageBatch, SubscriptionBatch, TermMatrix
from skype.text import Vocabulary


def entry_bit(t: int) -> int:
    """The signature bit of term t (termlists.pxd's ``entry_bit``)."""
    return ((t * 2654435761) & 0xFFFFFFFF) >> 28


def rows(log, start):
    return sorted(zip((log.at + start).tolist(), log.sub.tolist(), log.msg.tolist(), log.entered.tolist()))


def engine(vocab, signatures: bool, **kw) -> Engine:
    set_entry_signatures(signatures)
    try:
        return Engine(bounds=BOUNDS, vocabulary=vocab, message_index="lists", **kw)
    finally:
        set_entry_signatures(True)


def assert_same_as_reference(vocab, subs, msgs, window, buffer, depth):
    engines = [engine(vocab, True, window=window, buffer=buffer), engine(vocab, False, window=window, buffer=buffer),
               ReferenceEngine(bounds=BOUNDS, vocabulary=vocab, window=window)]
    logs = [[] for _ in engines]
    for e in engines:
        e.subscribe_batch(subs)
    for start in range(0, len(msgs), 200):
        for e, log in zip(engines, logs):
            log.extend(rows(e.publish_batch(msgs.slice(start, start + 200)), start))
    assert logs[0] == logs[2] and logs[1] == logs[2]
    for sid in subs.ids.tolist():
        want = engines[2].topn(sid, depth)
        assert engines[0].topn(sid, depth) == want
        assert engines[1].topn(sid, depth) == want
    return engines


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000), vocab_size=st.sampled_from([3, 20, 48]), tied=st.booleans(),
       buffer=st.sampled_from(["exact", "cskyband"]))
def test_signature_bounds_rank_exactly(seed, vocab_size, tied, buffer):
    """Dense adversarial workloads (tied weights and grid locations, alphas 0, 1 and near them):
    with 20 or 48 terms, many terms share a bit; topn and the change logs equal the reference's."""
    vocab, subs, msgs = dense_workload(seed, num_subs=30, num_messages=800, vocab_size=vocab_size,
                                       tied_weights=tied, max_k=10)
    assert_same_as_reference(vocab, subs, msgs, 300, buffer, 80)


def pair_terms():
    """Terms a, b with the same signature bit and c with another one."""
    a = 0
    b = next(t for t in range(1, 200) if entry_bit(t) == entry_bit(a))
    c = next(t for t in range(1, 200) if entry_bit(t) != entry_bit(a))
    return a, b, c


def one_term_workload(seed, n=900, nsubs=24):
    """Messages of one term each (weight 1) or of two, on a few spots (equal scores); two-term
    subscriptions {a, b} (a shared bit) and {a, c}, alpha 0, 1 or 0.5."""
    rng = np.random.default_rng(seed)
    a, b, c = pair_terms()
    vocab = Vocabulary.from_document_frequencies({f"w{i}": 1 for i in range(max(a, b, c) + 1)}, n)
    rows_ = []
    for _ in range(n):
        if rng.random() < 0.8:
            rows_.append((np.array([rng.choice([a, b, c])]), np.array([1.0])))
        else:
            ids = np.sort(rng.choice([a, b, c], 2, replace=False))
            w = rng.choice([1.0, 2.0], 2)
            rows_.append((ids, w / np.linalg.norm(w)))
    spots = rng.integers(0, 5, (n, 2)) * 4.0
    msgs = MessageBatch(np.arange(n, dtype=np.int64), spots[:, 0], spots[:, 1], np.arange(n, dtype=np.float64),
                        TermMatrix.from_rows(rows_))
    srows = []
    for i in range(nsubs):
        other = b if i % 2 else c
        w = rng.choice([1.0, 3.0], 2)
        srows.append((np.sort(np.array([a, other])), w / np.linalg.norm(w)))
    sspots = rng.integers(0, 5, (nsubs, 2)) * 4.0
    alphas = np.array([0.0, 1.0, 0.5])[np.arange(nsubs) % 3]
    subs = SubscriptionBatch(np.arange(nsubs, dtype=np.int64), sspots[:, 0], sspots[:, 1],
                             rng.integers(1, 8, nsubs).astype(np.int64), alphas, TermMatrix.from_rows(srows))
    return vocab, subs, msgs


@pytest.mark.parametrize("buffer", ["exact", "cskyband", "kmax"])
def test_one_term_messages_and_shared_bits_rank_exactly(buffer):
    vocab, subs, msgs = one_term_workload(7)
    assert_same_as_reference(vocab, subs, msgs, 400, buffer, 120)


def test_signatures_read_fewer_window_records():
    """Two-term subscriptions over one-term messages: without signatures an entry of a is bounded
    as if its message could hold the other term too, so far more entries pop (each a window record read) than
    messages are reported; with them, the bound is the message's own score up to rounding."""
    vocab, subs, msgs = one_term_workload(3, n=3000, nsubs=40)
    stats = {}
    for on in (True, False):
        e = engine(vocab, on, window=3000, buffer="exact")
        e.publish_batch(msgs)
        e.subscribe_batch(subs)
        for sid in subs.ids.tolist():
            e.topn(sid, 50)
        stats[on] = e.stats()["message_index"]
    assert stats[True]["entry_signatures"] and not stats[False]["entry_signatures"]
    assert stats[True]["query_reported"] == stats[False]["query_reported"]
    assert stats[True]["query_reads"] < 0.8 * stats[False]["query_reads"]
