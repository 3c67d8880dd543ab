"""Input validation, done once at the boundary.  The core trusts what passes here.

Record checks raise :class:`~skype.errors.InputError` naming the record; batch checks find the
first bad row and raise for it (a batch of a million rows costs a few numpy passes).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from skype.errors import InputError
from skype.model import Bounds, Message, MessageBatch, Subscription, SubscriptionBatch, TermMatrix
from skype.text import MAX_TERMS, Vocabulary

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# The largest k accepted (E029): deeper than any top-k a subscriber reads, small enough that
# every quantity the core scales by k (k * nmax_factor, k * refresh_factor) stays far inside 64
# bits, and that a buffer entry's dominance counter (< k) fits in 16 bits (arena.pxd).  Terms per record are limited by skype.text.MAX_TERMS (E030).
MAX_K = 65_535


def check_id(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InputError("E025", value=value)
    if not INT64_MIN <= int(value) <= INT64_MAX:
        raise InputError("E025", value=value)
    return int(value)


def check_number(field: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InputError("E012", field=field, expected="a number", value=value)
    return float(value)


def check_location(x: Any, y: Any, bounds: Bounds) -> tuple[float, float]:
    fx, fy = check_number("x", x), check_number("y", y)
    if not math.isfinite(fx):
        raise InputError("E001", field="x", value=x)
    if not math.isfinite(fy):
        raise InputError("E001", field="y", value=y)
    if not bounds.contains(fx, fy):
        raise InputError("E002", x=fx, y=fy, bounds=str(bounds))
    return fx, fy


def check_k(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or int(k) < 1:
        raise InputError("E003", value=k)
    if int(k) > MAX_K:
        raise InputError("E029", value=k, limit=MAX_K)
    return int(k)


def check_alpha(alpha: Any) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.integer, np.floating)):
        raise InputError("E004", value=alpha)
    a = float(alpha)
    if not (0.0 <= a <= 1.0):  # also rejects NaN
        raise InputError("E004", value=alpha)
    return a


def check_timestamp(t: Any) -> float:
    ft = check_number("t", t)
    if not math.isfinite(ft):
        raise InputError("E021", t=t)
    return ft


def term_vector(record: Subscription | Message, vocab: Vocabulary) -> tuple[np.ndarray, np.ndarray]:
    """The record's (ids, unit weights) from exactly one of ``text`` and ``terms``."""
    has_text, has_terms = record.text is not None, record.terms is not None
    if has_text == has_terms:
        raise InputError("E013", got="both" if has_text else "neither")
    if has_text:
        if not isinstance(record.text, str):
            raise InputError("E012", field="text", expected="a string", value=record.text)
        return vocab.vectorize_text(record.text)
    return vocab.vectorize_terms(record.terms)  # type: ignore[arg-type]


def check_subscription(sub: Subscription, vocab: Vocabulary, bounds: Bounds):
    """Validate one subscription; returns (id, x, y, k, alpha, ids, weights)."""
    sid = None
    try:
        sid = check_id(sub.id)
        x, y = check_location(sub.x, sub.y, bounds)
        k = check_k(sub.k)
        alpha = check_alpha(sub.alpha)
        ids, weights = term_vector(sub, vocab)
    except InputError as err:
        raise err.located(record_id=sid if sid is not None else sub.id) from None
    return sid, x, y, k, alpha, ids, weights


def check_message(msg: Message, vocab: Vocabulary, bounds: Bounds, default_t: float):
    """Validate one message; returns (id, x, y, t, ids, weights).  ``t`` defaults to ``default_t``."""
    mid = None
    try:
        mid = check_id(msg.id)
        x, y = check_location(msg.x, msg.y, bounds)
        t = default_t if msg.t is None else check_timestamp(msg.t)
        ids, weights = term_vector(msg, vocab)
    except InputError as err:
        raise err.located(record_id=mid if mid is not None else msg.id) from None
    return mid, x, y, t, ids, weights


# --------------------------------------------------------------------------- batches


def _first_bad(mask: np.ndarray) -> int | None:
    bad = np.flatnonzero(~mask)
    return int(bad[0]) if len(bad) else None


def check_terms(terms: TermMatrix, rows: int, ids: np.ndarray) -> None:
    if terms.rows != rows:
        raise InputError("E026", detail=f"{rows} records but {terms.rows} term rows")
    if terms.indptr[0] != 0 or np.any(np.diff(terms.indptr) < 0) or terms.indptr[-1] != len(terms.ids):
        raise InputError("E027", detail="indptr must start at 0, not decrease and end at len(ids)")
    if len(terms.weights) != len(terms.ids):
        raise InputError("E027", detail="ids and weights differ in length")
    lens = terms.lengths()
    row = _first_bad(lens > 0)
    if row is not None:
        raise InputError("E005", text="", record_id=int(ids[row]))
    row = _first_bad(lens <= MAX_TERMS)
    if row is not None:
        raise InputError("E030", n=int(lens[row]), limit=MAX_TERMS, record_id=int(ids[row]))
    if len(terms.ids) and terms.ids.min() < 0:
        raise InputError("E027", detail="negative term id")
    w_ok = np.isfinite(terms.weights) & (terms.weights > 0)
    if not w_ok.all():
        pos = int(np.flatnonzero(~w_ok)[0])
        row = int(np.searchsorted(terms.indptr, pos, side="right") - 1)
        raise InputError("E006", term=int(terms.ids[pos]), weight=float(terms.weights[pos]), record_id=int(ids[row]))
    # ids strictly ascending inside each row
    if len(terms.ids) > 1:
        step_ok = np.diff(terms.ids) > 0
        row_start = np.zeros(len(terms.ids), dtype=bool)
        row_start[terms.indptr[:-1][lens > 0]] = True
        ok = step_ok | row_start[1:]
        if not ok.all():
            pos = int(np.flatnonzero(~ok)[0]) + 1
            row = int(np.searchsorted(terms.indptr, pos, side="right") - 1)
            raise InputError("E027", detail="term ids must be strictly ascending in a row", record_id=int(ids[row]))
    # unit length
    sq = np.add.reduceat(terms.weights * terms.weights, terms.indptr[:-1]) if len(terms.ids) else np.zeros(0)
    row = _first_bad(np.abs(sq - 1.0) <= 1e-9)
    if row is not None:
        raise InputError("E027", detail=f"weights are not unit length (|w|^2 = {sq[row]!r})", record_id=int(ids[row]))


def check_locations(ids: np.ndarray, x: np.ndarray, y: np.ndarray, bounds: Bounds) -> None:
    for name, arr in (("x", x), ("y", y)):
        row = _first_bad(np.isfinite(arr))
        if row is not None:
            raise InputError("E001", field=name, value=float(arr[row]), record_id=int(ids[row]))
    inside = (x >= bounds.minx) & (x <= bounds.maxx) & (y >= bounds.miny) & (y <= bounds.maxy)
    row = _first_bad(inside)
    if row is not None:
        raise InputError("E002", x=float(x[row]), y=float(y[row]), bounds=str(bounds), record_id=int(ids[row]))


def check_subscription_batch(batch: SubscriptionBatch, bounds: Bounds) -> None:
    n = len(batch.ids)
    for name, arr in (("x", batch.x), ("y", batch.y), ("k", batch.k), ("alpha", batch.alpha)):
        if len(arr) != n:
            raise InputError("E026", detail=f"{n} ids but {len(arr)} values of {name}")
    check_locations(batch.ids, batch.x, batch.y, bounds)
    row = _first_bad(batch.k >= 1)
    if row is not None:
        raise InputError("E003", value=int(batch.k[row]), record_id=int(batch.ids[row]))
    row = _first_bad(batch.k <= MAX_K)
    if row is not None:
        raise InputError("E029", value=int(batch.k[row]), limit=MAX_K, record_id=int(batch.ids[row]))
    row = _first_bad((batch.alpha >= 0.0) & (batch.alpha <= 1.0))
    if row is not None:
        raise InputError("E004", value=float(batch.alpha[row]), record_id=int(batch.ids[row]))
    uniq, counts = np.unique(batch.ids, return_counts=True)
    if len(uniq) != n:
        raise InputError("E007", id=int(uniq[np.argmax(counts > 1)]))
    check_terms(batch.terms, n, batch.ids)


def check_message_batch(batch: MessageBatch, bounds: Bounds, last_t: float) -> None:
    n = len(batch.ids)
    for name, arr in (("x", batch.x), ("y", batch.y), ("t", batch.t)):
        if len(arr) != n:
            raise InputError("E026", detail=f"{n} ids but {len(arr)} values of {name}")
    check_locations(batch.ids, batch.x, batch.y, bounds)
    row = _first_bad(np.isfinite(batch.t))
    if row is not None:
        raise InputError("E021", t=float(batch.t[row]), record_id=int(batch.ids[row]))
    if n:
        prev = np.concatenate([[last_t], batch.t[:-1]])
        row = _first_bad(batch.t >= prev)
        if row is not None:
            raise InputError("E009", t=float(batch.t[row]), prev=float(prev[row]), record_id=int(batch.ids[row]))
    check_terms(batch.terms, n, batch.ids)


def check_window(window: Any, window_seconds: Any) -> tuple[int | None, float | None]:
    if (window is None) == (window_seconds is None):
        raise InputError("E015", window=window, seconds=window_seconds)
    if window is not None:
        if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
            raise InputError("E016", value=window)
        return int(window), None
    if isinstance(window_seconds, bool) or not isinstance(window_seconds, (int, float)):
        raise InputError("E017", value=window_seconds)
    if not math.isfinite(window_seconds) or window_seconds <= 0:
        raise InputError("E017", value=window_seconds)
    return None, float(window_seconds)


def record_fields(obj: Mapping[str, Any], required: tuple[str, ...], kind: str) -> None:
    if not isinstance(obj, Mapping):
        raise InputError("E033", kind=kind, value=obj)
    for name in required:
        if name not in obj:
            raise InputError("E011", field=name)
