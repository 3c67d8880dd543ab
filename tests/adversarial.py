"""Adversarial workloads for differential tests of the core against the reference.

Dense (a tiny Zipf vocabulary, so every subscription has many matches and the thresholds and
pruning rules are exercised), on a grid (points on quadtree cell borders and corners, duplicate
locations), with few distinct weights (identical scores), extreme alphas, and k from 1 to larger
than the number of matches.
"""

from __future__ import annotations

import numpy as np

from skype.model import Bounds, MessageBatch, SubscriptionBatch, TermMatrix
from skype.text import Vocabulary, normalize_rows

BOUNDS = Bounds(0.0, 0.0, 16.0, 16.0)
EXTREME_ALPHAS = np.array([0.0, 1.0, 1e-9, 1.0 - 1e-9, 0.5])


def _terms(rng, rows, vocab_size, max_terms, zipf, weights):
    lens = rng.integers(1, max_terms + 1, size=rows)
    p = 1.0 / np.arange(1, vocab_size + 1) ** zipf
    p /= p.sum()
    r, ids = [], []
    for i, n in enumerate(lens):
        chosen = np.unique(rng.choice(vocab_size, size=n, p=p))
        r.extend([i] * len(chosen))
        ids.extend(chosen.tolist())
    r, ids = np.array(r, np.int64), np.array(ids, np.int64)
    raw = rng.choice(weights, size=len(ids)) if weights is not None else rng.random(len(ids)) + 0.05
    w = normalize_rows(r, raw.astype(float), rows)
    indptr = np.zeros(rows + 1, np.int64)
    np.cumsum(np.bincount(r, minlength=rows), out=indptr[1:])
    return TermMatrix(indptr, ids, w)


def _points(rng, n, grid):
    if grid:
        return rng.integers(0, 17, n) * 1.0, rng.integers(0, 17, n) * 1.0  # borders, corners, duplicates
    return rng.random(n) * 16.0, rng.random(n) * 16.0


def dense_workload(seed: int, *, num_subs=300, num_messages=2000, vocab_size=20, zipf=1.0, grid=True,
                   tied_weights=True, max_k=12, crowd=False):
    """(vocabulary, subscriptions, messages) over BOUNDS."""
    rng = np.random.default_rng(seed)
    weights = np.array([1.0, 2.0, 0.5]) if tied_weights else None
    sx, sy = _points(rng, num_subs, grid)
    if crowd:  # half the subscriptions on one point: forces splits down to the depth limit
        sx[: num_subs // 2] = 5.0
        sy[: num_subs // 2] = 5.0
    alpha = rng.random(num_subs)
    extreme = rng.random(num_subs) < 0.3
    alpha[extreme] = rng.choice(EXTREME_ALPHAS, size=int(extreme.sum()))
    k = rng.integers(1, max_k + 1, size=num_subs)
    subs = SubscriptionBatch(np.arange(num_subs) * 7 + 3, sx, sy, k, alpha,
                             _terms(rng, num_subs, vocab_size, 3, zipf, weights))
    mx, my = _points(rng, num_messages, grid)
    t = np.cumsum(rng.choice([0.0, 0.5, 1.0], size=num_messages))
    msgs = MessageBatch(np.arange(num_messages) * 11 + 5, mx, my, t,
                        _terms(rng, num_messages, vocab_size, 4, zipf, weights))
    vocab = Vocabulary.from_document_frequencies({f"w{i}": vocab_size - i for i in range(vocab_size)}, num_messages)
    return vocab, subs, msgs
