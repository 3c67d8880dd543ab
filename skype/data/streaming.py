"""The generated ``tweets`` workload, streamed: the messages of :func:`make_workload` regenerated
in order, a chunk of numpy arrays at a time, never held whole.

Algorithm.  ``tweets_messages`` draws from one random stream in blocks: every message's length,
then every term draw, then every place, then every x jitter, every y jitter, and last every
inter-arrival time.  Each of those draws is a sequence of independent per-element draws (a
uniform is one 64-bit word, normals and exponentials are sequential ziggurat draws), so drawing a
block in pieces yields the same numbers as drawing it whole.  A first pass walks the blocks once,
counting the document frequencies (the vocabulary) and saving the generator's state at the start
of each block; a :class:`_Cursor` then holds one generator per block, each at its block's
position for the next message, and produces any run of consecutive messages from them.  Term
vectors are weighed row by row and timestamps are a running sum carried across chunks, so a
streamed chunk equals the same rows of the materialised workload, bit for bit.

Subscriptions sample source messages anywhere in the stream: their indices are drawn first (a
copy of the subscription generator), one pass gathers only those rows, and
:func:`make_subscriptions` runs on them unchanged (through :class:`_Gathered`).

Memory: the lengths (4 bytes a message), the vocabulary and the places' coordinates (not their
names), instead of about 190 bytes a message.
Invariant: ``TweetsStream(...).batch(a, b)`` equals ``make_workload("tweets", ...).messages``'s rows
``a .. b - 1``; tests/test_workload_stream.py checks it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from skype.data.geonames import place_points
from skype.data.workloads import CHUNK_MESSAGES, _chunks, _streams, english_words, make_subscriptions
from skype.model import DEFAULT_BOUNDS, Bounds, MessageBatch, SubscriptionBatch, TermMatrix
from skype.text import Vocabulary

JITTER = 0.05  # tweets_messages's location jitter (degrees)


def _rng_at(state: Mapping[str, Any]) -> np.random.Generator:
    rng = np.random.default_rng()
    rng.bit_generator.state = state
    return rng


class TweetsStream:
    """The messages of ``make_workload("tweets", num_messages=..., seed=...)``, regenerated on
    demand (see the module's comment)."""

    def __init__(self, num_messages: int, seed: int, bounds: Bounds = DEFAULT_BOUNDS, *,
                 vocab_size: int = 100_000, mean_terms: float = 9.0, chunk: int = CHUNK_MESSAGES) -> None:
        self.num_messages, self.bounds, self.chunk = num_messages, bounds, max(1, chunk)
        rng, self.sub_rng = _streams(seed)
        self.words, probs = english_words(vocab_size)
        self.cdf = np.cumsum(probs)
        self.lengths = (1 + rng.poisson(mean_terms - 1.0, size=num_messages)).astype(np.int32)
        self.states: dict[str, Mapping[str, Any]] = {"keys": rng.bit_generator.state}
        nwords = len(self.words)
        df = np.zeros(nwords, dtype=np.int64)
        for a, b in _chunks(num_messages, self.chunk):   # the term draws: document frequencies
            keys = self._keys(rng, a, b)
            rows = np.repeat(np.arange(a, b, dtype=np.int64), self.lengths[a:b])
            pairs = np.unique(rows * nwords + keys)
            df += np.bincount(pairs % nwords, minlength=nwords)
        self.states["pick"] = rng.bit_generator.state
        self.place_lon, self.place_lat, population = place_points()   # not the names: ~25 MB
        self.place_cdf = np.cumsum(population.astype(np.float64) + 1.0)
        for a, b in _chunks(num_messages, self.chunk):
            rng.random(b - a)
        self.states["x"] = rng.bit_generator.state
        for a, b in _chunks(num_messages, self.chunk):
            rng.normal(0.0, JITTER, size=b - a)
        self.states["y"] = rng.bit_generator.state
        for a, b in _chunks(num_messages, self.chunk):
            rng.normal(0.0, JITTER, size=b - a)
        self.states["t"] = rng.bit_generator.state
        present = np.flatnonzero(df)
        self.vocabulary = Vocabulary.from_document_frequencies(
            {self.words[i]: int(df[i]) for i in present}, num_messages)
        self.key_to_id = np.full(nwords, -1, dtype=np.int64)
        self.key_to_id[present] = self.vocabulary.ids([self.words[i] for i in present])
        self._cursor = _Cursor(self)

    def _keys(self, rng: np.random.Generator, a: int, b: int) -> np.ndarray:
        n = int(self.lengths[a:b].sum())
        return np.searchsorted(self.cdf, rng.random(n) * self.cdf[-1], side="right").clip(0, len(self.words) - 1)

    def batch(self, a: int, b: int) -> MessageBatch:
        """Messages a .. b - 1 (fastest when a is where the previous call stopped)."""
        if a < self._cursor.pos:
            self._cursor = _Cursor(self)
        while self._cursor.pos < a:
            self._cursor.skip(min(self.chunk, a - self._cursor.pos))
        parts = []
        while self._cursor.pos < b:
            parts.append(self._cursor.take(min(self.chunk, b - self._cursor.pos)))
        return parts[0] if len(parts) == 1 else MessageBatch.concat(parts)

    def subscriptions(self, num_subs: int, *, sub_terms: tuple[int, int] = (1, 3), k: int = 20,
                      sub_keywords: str = "message") -> SubscriptionBatch:
        """``make_workload``'s subscriptions (once per stream: it consumes the subscription
        generator)."""
        src = _rng_at(self.sub_rng.bit_generator.state).integers(0, self.num_messages, size=num_subs)
        rows = np.unique(src)
        parts = []
        for a, b in _chunks(self.num_messages, self.chunk):
            lo, hi = np.searchsorted(rows, [a, b])
            if hi > lo:
                parts.append(self.batch(a, b).take(rows[lo:hi] - a))
        gathered = _Gathered(self.num_messages, rows, MessageBatch.concat(parts))
        return make_subscriptions(gathered, self.vocabulary, num_subs, self.sub_rng,  # type: ignore[arg-type]
                                  sub_terms=sub_terms, k=k, sub_keywords=sub_keywords)


class _Cursor:
    """One generator per draw block, each at the position of message ``pos``."""

    def __init__(self, stream: TweetsStream) -> None:
        self.s = stream
        self.rng = {name: _rng_at(state) for name, state in stream.states.items()}
        self.pos = 0
        self.t_last = 0.0

    def skip(self, n: int) -> None:
        a, b = self.pos, self.pos + n
        self.rng["keys"].random(int(self.s.lengths[a:b].sum()))
        self.rng["pick"].random(n)
        self.rng["x"].normal(0.0, JITTER, size=n)
        self.rng["y"].normal(0.0, JITTER, size=n)
        self._times(n)
        self.pos = b

    def _times(self, n: int) -> np.ndarray:
        gaps = self.rng["t"].exponential(1.0, size=n)
        if n:
            gaps[0] += self.t_last      # np.cumsum adds left to right: the whole stream's sums
            t = np.cumsum(gaps)
            self.t_last = float(t[-1])
            return t
        return gaps

    def take(self, n: int) -> MessageBatch:
        s, a, b = self.s, self.pos, self.pos + n
        keys = s._keys(self.rng["keys"], a, b)
        rows = np.repeat(np.arange(n, dtype=np.int64), s.lengths[a:b])
        terms = s.vocabulary.weigh_term_ids(rows, s.key_to_id[keys], n)
        pick = np.searchsorted(s.place_cdf, self.rng["pick"].random(n) * s.place_cdf[-1],
                               side="right").clip(0, len(s.place_lon) - 1)
        bounds = s.bounds
        x = np.clip(s.place_lon[pick] + self.rng["x"].normal(0.0, JITTER, size=n), bounds.minx, bounds.maxx)
        y = np.clip(s.place_lat[pick] + self.rng["y"].normal(0.0, JITTER, size=n), bounds.miny, bounds.maxy)
        t = self._times(n)
        self.pos = b
        return MessageBatch(np.arange(a, b, dtype=np.int64), x, y, t, TermMatrix(terms.indptr, terms.ids, terms.weights))


class _Column:
    def __init__(self, rows: np.ndarray, values: np.ndarray) -> None:
        self.rows, self.values = rows, values

    def __getitem__(self, index: np.ndarray) -> np.ndarray:
        return self.values[np.searchsorted(self.rows, index)]


class _GatheredTerms:
    def __init__(self, rows: np.ndarray, terms: TermMatrix) -> None:
        self.rows, self.terms = rows, terms

    def take(self, index: np.ndarray) -> TermMatrix:
        return self.terms.take(np.searchsorted(self.rows, index))


class _Gathered:
    """What :func:`make_subscriptions` reads of a message batch (its length, and the x, y and
    terms of the rows it samples), over only the gathered ``rows`` of the stream."""

    def __init__(self, num_messages: int, rows: np.ndarray, batch: MessageBatch) -> None:
        self.num_messages = num_messages
        self.x, self.y = _Column(rows, batch.x), _Column(rows, batch.y)
        self.terms = _GatheredTerms(rows, batch.terms)

    def __len__(self) -> int:
        return self.num_messages


class StreamedMessages:
    """Messages ``start .. stop - 1`` of a :class:`TweetsStream`, used where ``run_stream`` uses a
    :class:`MessageBatch` (length, slices, batches in order, timestamps)."""

    def __init__(self, stream: TweetsStream, start: int = 0, stop: int | None = None) -> None:
        self.stream, self.start = stream, start
        self.stop = stream.num_messages if stop is None else stop

    def __len__(self) -> int:
        return self.stop - self.start

    def slice(self, start: int, stop: int) -> StreamedMessages:
        stop = min(max(stop, start), len(self))
        return StreamedMessages(self.stream, self.start + start, self.start + stop)

    def batches(self, size: int) -> Iterator[MessageBatch]:
        for a in range(self.start, self.stop, size):
            yield self.stream.batch(a, min(a + size, self.stop))

    @property
    def t(self) -> np.ndarray:
        """The timestamps (generated for the call: 8 bytes a message)."""
        cursor = _Cursor(self.stream)
        for a, b in _chunks(self.start, self.stream.chunk):
            cursor._times(b - a)
        out = np.empty(len(self), dtype=np.float64)
        for a, b in _chunks(len(self), self.stream.chunk):
            out[a:b] = cursor._times(b - a)
        return out

    def materialize(self) -> MessageBatch:
        return self.stream.batch(self.start, self.stop)
