"""Raw stream records -> stream events, on the executors (no pyspark here).

A *raw* record is a record of the public file formats (``README``: JSON objects with ``text`` or
a ``terms`` object): a message ``{"id", "x", "y", "t"?, "text" | "terms"}``, or a command
``{"op": "sub" | "unsub", "at"?, "id", "x", "y", "k", "alpha", "text" | "terms"}`` (``op``
defaults to ``sub``; an unsubscribe may carry the record it removes, which then decides where it
goes), or a results request ``{"op": "results", "at"?}`` (the stages answer with every
subscription's top-k once the stream reaches ``at``: how an open stream gets its final results).
:func:`records_to_events` validates and vectorises them with the shipped vocabulary
(:mod:`skype.dskype.vocabulary`) through the very functions the centralized engine's loader uses
(``skype.validate.check_message`` / ``check_subscription``), so ids and weights are identical.

Positions are given by the caller, never recounted here: a message's position is its global
sequence number ``seq`` (the count window's meaning), a command's its ordinal ``cseq``.  A record
that fails validation is left out and returned as a dead letter (kind, position, id, code, error)
*keeping its position*, exactly as the routing screen treats records it rejects.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Iterator

import numpy as np

from skype.errors import InputError

KIND_MESSAGE, KIND_SUBSCRIBE, KIND_UNSUBSCRIBE, KIND_RESULTS = 0, 1, 2, 3  # as skype.dskype.routing


def parse_lines(lines: Iterable[bytes], first_position: int) -> Iterator[tuple[int, Any]]:
    """``(position, object | InputError)`` for every non-blank JSONL line (blank lines hold no
    position, as the file source counts them)."""
    position = first_position
    for raw in lines:
        if not raw.strip():
            continue
        try:
            obj: Any = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as err:
            obj = InputError("E031", detail=f"byte {err.start + 1}: {err.reason}")
        except json.JSONDecodeError as err:
            obj = InputError("E010", detail=f"{err.msg} at column {err.colno}")
        yield position, obj
        position += 1


def dead_letter(kind: str, position: int, record: Any, err: InputError) -> dict:
    rid = record.get("id") if isinstance(record, dict) else None
    return {"kind": kind, "position": position, "id": rid if isinstance(rid, int) else None, "code": err.code,
            "error": str(err)}


def _message_row(obj: Any, position: int, vocab, bounds) -> tuple:
    from skype import io, validate

    if isinstance(obj, InputError):
        raise obj
    msg = io.message_from_obj(obj)
    return validate.check_message(msg, vocab, bounds, float(position))


def _command_row(obj: Any, vocab, bounds, default_at: int | None) -> tuple:
    """(kind, at, id, x, y, k, alpha, term ids, weights) of a raw command."""
    from skype import io, validate
    from skype.model import Subscription

    if isinstance(obj, InputError):
        raise obj
    if not isinstance(obj, dict):
        raise InputError("E033", kind="command", value=obj)
    op = obj.get("op", "sub")
    at = obj.get("at", default_at)
    if at is not None and (isinstance(at, bool) or not isinstance(at, int) or at < 0):
        raise InputError("E023", what="a command's at", expected="an integer >= 0 (messages before it)", value=at)
    if op == "sub":
        sub = io.subscription_from_obj({k: v for k, v in obj.items() if k not in ("op", "at")})
        if not isinstance(sub, Subscription) or sub.until is not None:
            raise InputError("E048", where="distributed", kind=obj.get("kind", "topk with until"),
                             supported="topk subscriptions without until")
        sid, x, y, k, alpha, ids, weights = validate.check_subscription(sub, vocab, bounds)
        return KIND_SUBSCRIBE, at, sid, x, y, k, alpha, ids, weights
    if op == "unsub":
        sid = validate.check_id(obj.get("id"))
        if all(f in obj for f in ("x", "y", "k", "alpha")) and ("text" in obj or "terms" in obj):
            _, x, y, k, alpha, ids, weights = _command_row(dict(obj, op="sub"), vocab, bounds, at)[2:]
            return KIND_UNSUBSCRIBE, at, sid, x, y, k, alpha, ids, weights
        return KIND_UNSUBSCRIBE, at, sid, 0.0, 0.0, 0, 0.0, np.zeros(0, np.int64), np.zeros(0)
    if op == "results":
        return KIND_RESULTS, at, 0, 0.0, 0.0, 0, 0.0, np.zeros(0, np.int64), np.zeros(0)
    if op == "query":  # docs/queries.md: the driver that stages the stream compiles queries
        raise InputError("E138", where="executor ingestion (--vocabulary, Kafka)",
                         reason="a query is compiled by the driver that stages the stream, with its terms' ids in "
                                "stream order and the clock of its position; run the workload staged")
    raise InputError("E086", op=op)


def records_to_events(records: Iterable[tuple[int, Any]], kind: str, vocab, bounds,
                      default_at: int | None = None):
    """Raw records with their positions -> (a RecordBatch of the stream-event schema, dead letters).

    ``kind``: ``"messages"`` or ``"commands"``; ``default_at``: the ``at`` of commands without one
    (None: the start of the micro-batch they arrive in)."""

    rows: list[tuple] = []
    dead: list[dict] = []
    for position, obj in records:
        try:
            if kind == "messages":
                mid, x, y, t, ids, weights = _message_row(obj, position, vocab, bounds)
                rows.append((KIND_MESSAGE, position, None, mid, x, y, t, None, None, ids, weights))
            else:
                ev, at, sid, x, y, k, alpha, ids, weights = _command_row(obj, vocab, bounds, default_at)
                rows.append((ev, position, at, sid, x, y, None, k, alpha, ids, weights))
        except InputError as err:
            dead.append(dead_letter(kind[:-1], position, obj, err))
    return events_batch(rows), dead


def events_batch(rows: list[tuple]):
    """Rows (kind, seq, at, id, x, y, t, k, alpha, term ids, weights) -> a stream-event RecordBatch."""
    import pyarrow as pa

    from skype.dskype.routing import event_arrow_schema

    schema = event_arrow_schema()
    cols: list[tuple[Any, ...]] = list(zip(*rows)) if rows else [()] * len(schema)
    cols += [(None,) * len(rows)] * (len(schema) - len(cols))  # trailing fields rows leave out (spec)
    arrays = []
    for i, field in enumerate(schema):
        if field.name in ("term_ids", "weights"):
            lens = np.fromiter((len(v) for v in cols[i]), np.int64, len(cols[i]))
            offsets = np.zeros(len(lens) + 1, np.int32)
            np.cumsum(lens, out=offsets[1:])
            dtype = np.int64 if field.name == "term_ids" else np.float64
            values = np.concatenate([np.asarray(v, dtype) for v in cols[i]]) if len(lens) else np.zeros(0, dtype)
            arrays.append(pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, field.type.value_type)))
        else:
            arrays.append(pa.array([None if v is None else v for v in cols[i]], field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def document_tokens(obj: Any) -> list[str]:
    """The tokens a raw message contributes to a vocabulary sample (empty if it has none)."""
    from skype.text import normalize_term, tokenize

    if not isinstance(obj, dict):
        return []
    text, terms = obj.get("text"), obj.get("terms")
    if isinstance(text, str):
        return tokenize(text)
    if isinstance(terms, dict):
        return [normalize_term(t) for t in terms if isinstance(t, str)]
    return []
