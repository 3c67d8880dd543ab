"""Columnar ingest of an NDJSON message batch (the service's design 2 of ``POST /v1/messages``).

Design 1 (``--ingest records``) parses every line with ``json.loads`` and validates each record
in Python (``skype.io`` then ``skype.validate.check_message``: about 60 µs a message).  Design 2
decodes the whole body in one call into typed records (``msgspec``: the types are checked in C,
``bool`` is not a number, an id is an integer), turns them into numpy columns, and validates the
columns with vectorised checks: finite coordinates inside the bounds, finite and non-decreasing
timestamps, no id twice, one of ``text`` and ``terms`` per record, a non-empty term vector of at
most ``MAX_TERMS`` terms with finite positive weights.  Term ids are assigned in record order and,
inside a record, in the order of its terms, exactly as design 1 assigns them, and the weights
are bit for bit those of design 1: tf-idf (text) or the given weights merged per normalised term
(terms), scaled to unit length by :func:`skype.text.normalize_rows`, the one normalisation of every
path (squares summed in record order, no BLAS), so the weights do not depend on the CPU.

Errors keep design 1's meaning exactly: any batch the columnar checks refuse (or cannot decode)
is handed to design 1's record-by-record validation, which raises the catalogue error of the
first bad record, naming its line.  So the columnar path never describes an error itself: it only
has to be sure a batch it accepts is one design 1 accepts, with the same columns.
"""

from __future__ import annotations

import json

import msgspec
import numpy as np

from skype.errors import InputError
from skype.model import Bounds, MessageBatch, TermMatrix
from skype.text import MAX_TERMS, Vocabulary, normalize_rows, normalize_term, tokenize



class MessageRecord(msgspec.Struct):
    """A message record as ``skype.io.message_from_obj`` reads it (other fields are ignored)."""

    id: int
    x: float
    y: float
    t: float | None = None
    text: str | None = None
    terms: dict[str, float] | None = None


_DECODER = msgspec.json.Decoder(MessageRecord)
# bytes.strip()'s whitespace: a line of only these is blank (skipped; it still counts as a line)
_BLANK = np.zeros(256, bool)
_BLANK[[9, 10, 11, 12, 13, 32]] = True


class Rejected(Exception):
    """The columnar checks refuse the batch: design 1 names the error (module docstring)."""


def record_lines(raw: bytes) -> tuple[np.ndarray, np.ndarray]:
    """The byte offset and the 1-based line number of every non-blank line of ``raw``."""
    arr = np.frombuffer(raw, np.uint8)
    starts = np.r_[0, np.flatnonzero(arr == 10) + 1]
    ends = np.r_[starts[1:] - 1, len(arr)]
    # a line whose first byte is not whitespace is filled; only the others need a look
    first = arr[np.minimum(starts, max(len(arr) - 1, 0))] if len(arr) else np.zeros(len(starts), np.uint8)
    doubt = (ends == starts) | _BLANK[first]
    filled = ~doubt
    for i in np.flatnonzero(doubt).tolist():
        filled[i] = bool(raw[int(starts[i]):int(ends[i])].strip())
    lines = np.flatnonzero(filled)
    return starts[lines], lines + 1


def parse_records(raw: bytes) -> tuple[list, list[int]]:
    """Design 1's parse: each non-blank line with ``json.loads`` (E010 names the line)."""
    recs: list = []
    lines: list[int] = []
    for n, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            recs.append(json.loads(line))
        except ValueError as err:
            raise InputError("E010", detail=str(err), line=n) from None
        lines.append(n)
    return recs, lines


class Counters:
    """Per-message Python work of the ingest (deterministic, unlike a clock): records decoded,
    terms looked up one by one, records handed to design 1."""

    def __init__(self) -> None:
        self.batches = self.records = self.term_lookups = self.term_misses = self.fallback_records = 0


def columnar_batch(raw: bytes, count: int, vocab: Vocabulary, bounds: Bounds, position: int,
                   last_t: float, counters: Counters | None = None, t: np.ndarray | None = None) -> MessageBatch:
    """The batch of the ``count`` records of ``raw``, validated by columns; raises
    :class:`Rejected` (having possibly given new terms ids: the caller rolls the vocabulary back).
    ``t``: the timestamps, instead of the records' (a snapshot's window)."""
    try:
        recs = _DECODER.decode_lines(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise Rejected() from None
    n = len(recs)
    if n != count or n == 0:
        raise Rejected()
    try:
        ids = np.fromiter([r.id for r in recs], np.int64, n)
    except OverflowError:  # beyond int64 (E025)
        raise Rejected() from None
    x = np.fromiter([r.x for r in recs], np.float64, n)
    y = np.fromiter([r.y for r in recs], np.float64, n)
    if t is None:
        t_list = [r.t for r in recs]
        if None in t_list:  # the arrival number, as design 1 defaults it
            t_list = [float(position + i) if v is None else v for i, v in enumerate(t_list)]
        t = np.fromiter(t_list, np.float64, n)
    coords_ok = np.isfinite(x) & np.isfinite(y) & (x >= bounds.minx) & (x <= bounds.maxx) \
        & (y >= bounds.miny) & (y <= bounds.maxy)
    if not coords_ok.all() or not np.isfinite(t).all():
        raise Rejected()
    if t[0] < last_t or (n > 1 and np.any(t[1:] < t[:-1])):
        raise Rejected()
    sorted_ids = np.sort(ids)
    if n > 1 and not (sorted_ids[1:] != sorted_ids[:-1]).all():
        raise Rejected()
    terms = _term_matrix(recs, vocab, counters)
    if counters is not None:
        counters.batches += 1
        counters.records += n
    return MessageBatch(ids, x, y, t, terms)


def _term_matrix(recs: list[MessageRecord], vocab: Vocabulary, counters: Counters | None) -> TermMatrix:
    n = len(recs)
    keys: list[str] = []
    weights: list[float] = []
    lens: list[int] = []
    text_rows: list[int] = []
    for i, r in enumerate(recs):
        terms, text = r.terms, r.text
        if terms is not None:
            if text is not None or not terms or len(terms) > MAX_TERMS:
                raise Rejected()
            keys.extend(terms)
            weights.extend(terms.values())
            lens.append(len(terms))
        elif text is not None:
            tokens = tokenize(text)
            keys.extend(tokens)
            weights.extend([1.0] * len(tokens))  # a count: the term frequency
            lens.append(len(tokens))
            text_rows.append(i)
        else:
            raise Rejected()
    w = np.array(weights, np.float64)
    if not (np.isfinite(w) & (w > 0)).all():
        raise Rejected()
    rows = np.repeat(np.arange(n, dtype=np.int64), lens)
    is_text = np.zeros(n, bool)
    is_text[text_rows] = True
    tids = _term_ids(keys, is_text[rows], vocab, counters)
    space = vocab.id_space()
    keys_ = rows * space + tids
    order = np.argsort(keys_, kind="stable")
    ordered = keys_[order]
    new = np.r_[True, ordered[1:] != ordered[:-1]] if len(ordered) else np.zeros(0, bool)
    uniq = ordered[new]
    inverse = np.empty(len(keys_), np.int64)
    inverse[order] = np.cumsum(new) - 1
    urows, uids = np.divmod(uniq, space)
    merged = np.bincount(inverse, weights=w, minlength=len(uniq))  # in order, from 0.0: as design 1
    per_row = np.bincount(urows, minlength=n)
    if np.any(per_row == 0) or np.any(per_row > MAX_TERMS):
        raise Rejected()
    text_entry = is_text[urows]
    if text_entry.any():
        merged[text_entry] *= vocab.idf(uids[text_entry])
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(per_row, out=indptr[1:])
    return TermMatrix(indptr, uids, normalize_rows(urows, merged, n))


def _term_ids(keys: list[str], text: np.ndarray, vocab: Vocabulary, counters: Counters | None) -> np.ndarray:
    """Term ids in order of occurrence.  A ``terms`` key is normalised (NFC, casefold) before
    it is looked up; an ASCII key's normal form is its lower case, so known ASCII keys cost
    one dictionary look-up.  New terms get ids in the order they occur, as in design 1."""
    get = vocab._ids.get
    out = [get(k) if text_k else (get(k.lower()) if k.isascii() else None)
           for k, text_k in zip(keys, text.tolist())]
    misses = 0
    for i, tid in enumerate(out):
        if tid is None:
            key = keys[i]
            if key == "":
                raise Rejected()
            out[i] = vocab.id(key if text[i] else normalize_term(key))
            misses += 1
    if counters is not None:
        counters.term_lookups += len(keys)
        counters.term_misses += misses
    return np.fromiter(out, np.int64, len(out))

