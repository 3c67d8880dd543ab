"""Realistic dissemination thresholds theta_s for building and testing distributions.

:func:`estimate_thresholds` registers the subscriptions in an engine, publishes a warm-up window
of messages (the last ``window`` messages given: a count window only ever holds those, so
publishing earlier ones would change nothing but the time taken), and reads
``engine.thresholds()``.  Engines:

* ``"core"``: :class:`skype.Engine` (the Cython core; its threshold may be the cSkyband one);
* ``"reference"``: :class:`skype.reference.ReferenceEngine` (kScore; slow beyond ~20k
  subscriptions);
* ``"auto"``: the core if ``skype.Engine`` imports, else the reference engine;
* ``"kscore"``: :func:`kscore_thresholds`, the reference engine's thresholds (kScore over the
  window: the k-th best score, 0 with fewer than k scoring messages) computed by a vectorised
  brute force: every (subscription, window message) pair sharing a term is scored with the
  reference's operations in the reference's order, so the values are bit-identical (tested).
  It exists for large measurements (100k subscriptions) while the core is not available;
* ``"none"``: zeros (no pruning; loose prefixes are whole term lists).
"""

from __future__ import annotations

import numpy as np

from skype.errors import invalid_choice
from skype.model import DEFAULT_BOUNDS, Bounds, MessageBatch, SubscriptionBatch
from skype.text import Vocabulary

THRESHOLD_ENGINES = ("auto", "core", "reference", "kscore", "none")


def core_engine_class():
    """``skype.Engine`` if the core is built, else None."""
    try:
        from skype import Engine
    except ImportError:
        return None
    return Engine


def resolve_engine(engine: str) -> str:
    """The engine ``estimate_thresholds`` will use for ``engine`` (``auto`` resolved)."""
    if engine not in THRESHOLD_ENGINES:
        raise invalid_choice("threshold engine", engine, THRESHOLD_ENGINES)
    if engine == "auto":
        return "core" if core_engine_class() is not None else "reference"
    if engine == "core" and core_engine_class() is None:
        raise invalid_choice("threshold engine (skype.Engine is not built yet)", engine,
                             [e for e in THRESHOLD_ENGINES if e != "core"])
    return engine


def warmup_window(messages: MessageBatch, window: int) -> MessageBatch:
    """The last ``window`` messages: what a count window holds after the whole stream."""
    return messages.slice(max(0, len(messages) - int(window)), len(messages))


def estimate_thresholds(subscriptions: SubscriptionBatch, messages: MessageBatch, vocabulary: Vocabulary | None,
                        window: int, engine: str = "auto", *, bounds: Bounds = DEFAULT_BOUNDS) -> np.ndarray:
    """theta_s of every subscription (aligned with ``subscriptions``) after a warm-up window.

    >>> from skype.data import make_workload
    >>> w = make_workload("tweets", num_subs=50, num_messages=400, seed=3, k=3)
    >>> ref = estimate_thresholds(w.subscriptions, w.messages, w.vocabulary, 300, engine="reference")
    >>> fast = estimate_thresholds(w.subscriptions, w.messages, w.vocabulary, 300, engine="kscore")
    >>> bool((ref == fast).all()), bool((ref > 0).any())
    (True, True)
    """
    kind = resolve_engine(engine)
    if kind == "none" or len(subscriptions) == 0:
        return np.zeros(len(subscriptions), dtype=np.float64)
    warm = warmup_window(messages, window)
    if kind == "kscore":
        return kscore_thresholds(subscriptions, warm, bounds.max_dist)
    if kind == "core":
        cls = core_engine_class()
    else:
        from skype.reference import ReferenceEngine as cls
    eng = cls(window=max(1, int(window)), bounds=bounds, vocabulary=vocabulary)
    eng.subscribe_batch(subscriptions)
    if len(warm):
        eng.publish_batch(warm)
    return np.asarray(eng.thresholds(subscriptions.ids), dtype=np.float64)


def scored_pairs(subscriptions: SubscriptionBatch, messages: MessageBatch, max_dist: float,
                 sub_rows: slice | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (subscription row, message row) pair sharing a term, with its score ST.

    Operation by operation as :func:`skype.reference.score`: TSim summed from 0.0 over the common
    terms in ascending term id (``np.bincount`` adds sequentially in array order, and a stable sort
    keeps each pair's products in the subscription's term order), then
    ``SSim = 1 - sqrt(dx*dx + dy*dy) / MaxDist`` and ``alpha*SSim + (1-alpha)*TSim``.
    ``sub_rows`` restricts the subscriptions to a slice (rows stay global).
    """
    st = subscriptions.terms
    lo_row, hi_row = (0, st.rows) if sub_rows is None else (sub_rows.start, sub_rows.stop)
    a, b = st.indptr[lo_row], st.indptr[hi_row]
    s_rows = np.repeat(np.arange(lo_row, hi_row, dtype=np.int64), st.lengths()[lo_row:hi_row])
    s_terms, s_w = st.ids[a:b], st.weights[a:b]
    mt = messages.terms
    m_rows = np.repeat(np.arange(mt.rows, dtype=np.int64), mt.lengths())
    order = np.argsort(mt.ids, kind="stable")
    m_terms, m_rows, m_w = mt.ids[order], m_rows[order], mt.weights[order]
    first = np.searchsorted(m_terms, s_terms, side="left")
    count = np.searchsorted(m_terms, s_terms, side="right") - first
    total = int(count.sum())
    entry = np.repeat(np.arange(len(s_terms), dtype=np.int64), count)  # ascending: s's term order kept
    offset = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
    pos = first[entry] + offset
    num_msgs = max(len(messages), 1)
    key = s_rows[entry] * num_msgs + m_rows[pos]
    order = np.argsort(key, kind="stable")  # stable: a pair's products stay in s's term order
    key = key[order]
    first_of_pair = np.r_[True, key[1:] != key[:-1]] if len(key) else np.zeros(0, bool)
    pairs = key[first_of_pair]
    tsim = np.bincount(np.cumsum(first_of_pair) - 1, weights=(s_w[entry] * m_w[pos])[order], minlength=len(pairs))
    ps, pm = np.divmod(pairs, num_msgs)
    dx = messages.x[pm] - subscriptions.x[ps]
    dy = messages.y[pm] - subscriptions.y[ps]
    ssim = 1.0 - np.sqrt(dx * dx + dy * dy) / max_dist
    alpha = subscriptions.alpha[ps]
    return ps, pm, alpha * ssim + (1.0 - alpha) * tsim


def kscore_thresholds(subscriptions: SubscriptionBatch, window: MessageBatch, max_dist: float,
                      max_pairs: int = 4_000_000) -> np.ndarray:
    """kScore of every subscription over ``window`` (0 with fewer than k scoring messages),
    in chunks of subscriptions of about ``max_pairs`` expanded term matches each."""
    n = len(subscriptions)
    out = np.zeros(n, dtype=np.float64)
    if n == 0 or len(window) == 0:
        return out
    st = subscriptions.terms
    size = int(max(window.terms.ids.max(initial=0), st.ids.max(initial=0))) + 1
    matches = np.bincount(window.terms.ids, minlength=size)[st.ids]  # window entries per sub entry
    per_sub = np.bincount(np.repeat(np.arange(n), st.lengths()), weights=matches, minlength=n)
    cum = np.cumsum(per_sub)
    start = 0
    while start < n:
        base = cum[start - 1] if start else 0.0
        stop = min(n, max(start + 1, int(np.searchsorted(cum, base + max_pairs, side="right"))))
        ps, _, score = scored_pairs(subscriptions, window, max_dist, slice(start, stop))
        order = np.lexsort((-score, ps))
        ps, score = ps[order], score[order]
        rank = np.arange(len(ps)) - np.searchsorted(ps, ps, side="left")
        at_k = rank == subscriptions.k[ps] - 1
        out[ps[at_k]] = score[at_k]
        start = stop
    return out
