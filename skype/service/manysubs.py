"""Bulk subscription commands and the pages of the subscriptions, for :class:`~skype.service.state.State`.

``subscribe_many`` applies ``{"op": "subs", "ndjson", "token_hashes"?}``: all or nothing.  Every
record is checked against the state first, with the same checks as a single ``PUT``: a body of
topk records by columns (:func:`columnar_topk`: one typed decode, vectorised checks, the term
vectors weighed as the message ingest weighs them, bit for bit design 1's), any other body, or
one those checks refuse, record by record (:func:`checked_records`), which names the first bad
record's line (E007 for an id taken or repeated in the body).  Only then are the records registered, topk ones with one ``subscribe_batch`` (the engine's bulk path),
the other kinds after them, and the command is logged (the ``before`` hook) as one record.  A
failure of either undoes the registration, and the state's ``apply`` undoes the new terms.
``unsubscribe_many`` applies ``{"op": "unsubs", "ids"}``: every id must exist and appear once.
Both emit one :class:`~skype.service.events.EventBlock` whose events carry each
subscription's whole current result (as entered, or as left with ``removed``), in ascending id
order; top-k ones are columns from one ``topk_arrays`` call.

Pages: the subscription ids in ascending order are kept as one array until the subscriptions
change (``State.subs_version``), so a page is a binary search and a slice.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Callable

import msgspec
import numpy as np

from skype import io, queries, validate
from skype.errors import InputError
from skype.model import Subscription
from skype.service.auth import new_owner_tokens, owner_hash
from skype.model import SubscriptionBatch
from skype.service import ingest
from skype.service.events import EventBlock
from skype.workload import subscriptions_batch

from skype.service.state import ENTRY_KEY, MESSAGE_FIELDS, pack_record

if TYPE_CHECKING:
    from skype.service.state import State

_EMPTY_I = np.zeros(0, np.int64)
_EMPTY_F = np.zeros(0, np.float64)


def _ndjson_lines(text: str, limit: int, expected: str) -> tuple[list[int], list[str]]:
    """The line numbers and texts (stripped) of an NDJSON body's non-blank lines (E092 above
    ``limit`` records; E105 for none)."""
    numbered = [(n, line) for n, line in enumerate(text.split("\n"), start=1) if line.strip()]
    if len(numbered) > limit:
        raise InputError("E092", n=f"more than {limit}", limit=limit)
    if not numbered:
        raise InputError("E105", expected=f"NDJSON {expected}")
    return [n for n, _ in numbered], [line.strip() for _, line in numbered]


def _ndjson_values(lines: list[int], texts: list[str]) -> list:
    """The JSON values of the lines: decoded in one msgspec call; should that refuse them, line
    by line with :mod:`json`, which names the line (E010) and accepts what ``json`` accepts, as
    a single PUT does."""
    try:
        recs = msgspec.json.decode(("[" + ",".join(texts) + "]").encode())
        if len(recs) == len(texts):  # a line holding two values would shift the lines
            return recs
    except msgspec.DecodeError:
        pass
    out = []
    for n, line in zip(lines, texts):
        try:
            out.append(json.loads(line))
        except ValueError as err:
            raise InputError("E010", detail=str(err), line=n) from None
    return out


class SubscriptionRecord(msgspec.Struct):
    """A topk subscription record as ``skype.io.subscription_from_obj`` reads it (other fields
    ignored).  ``terms`` and ``until`` may be absent but not null where design 1 refuses null."""

    id: int
    x: float
    y: float
    k: int
    alpha: float
    text: str | None = None
    terms: dict[str, float] | msgspec.UnsetType | None = msgspec.UNSET  # null: refused (below)
    until: float | None = None
    kind: str = "topk"
    op: str | msgspec.UnsetType = msgspec.UNSET


_DECODER = msgspec.json.Decoder(SubscriptionRecord)


def columnar_topk(raw: bytes, count: int, state: State, clock: float) -> tuple[list[int], SubscriptionBatch, list]:
    """The ``count`` records of ``raw``, all topk, decoded in one call and checked by columns
    (ids distinct and free, coordinates finite inside the bounds, 1 <= k <= MAX_K, alpha in [0,
    1], until finite and not before the clock, term vectors as :mod:`~skype.service.ingest`
    weighs messages, bit for bit design 1's): (ids in line order, the batch, each record's
    ``op`` or None).  Raises
    :class:`~skype.service.ingest.Rejected` for any body these checks do not accept (having
    possibly given new terms ids: the caller rolls them back), and
    :func:`checked_records` then names the error, as the message ingest does."""
    try:
        recs = _DECODER.decode_lines(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise ingest.Rejected() from None
    n = len(recs)
    if n != count or n == 0 or any(r.kind != "topk" or (r.op is not msgspec.UNSET and r.op != "sub")
                                   for r in recs):
        raise ingest.Rejected()
    try:
        ids = np.fromiter([r.id for r in recs], np.int64, n)
    except OverflowError:
        raise ingest.Rejected() from None
    if len(np.unique(ids)) != n or np.isin(ids, sorted_ids(state)).any():
        raise ingest.Rejected()
    x = np.fromiter([r.x for r in recs], np.float64, n)
    y = np.fromiter([r.y for r in recs], np.float64, n)
    k = np.fromiter([r.k if -2**62 < r.k < 2**62 else 0 for r in recs], np.int64, n)
    alpha = np.fromiter([r.alpha for r in recs], np.float64, n)
    b = state.engine.bounds
    ok = np.isfinite(x) & np.isfinite(y) & (x >= b.minx) & (x <= b.maxx) & (y >= b.miny) & (y <= b.maxy) \
        & (k >= 1) & (k <= validate.MAX_K) & (alpha >= 0.0) & (alpha <= 1.0)
    if not ok.all():
        raise ingest.Rejected()
    until = np.fromiter([np.nan if r.until is None else r.until for r in recs], np.float64, n)
    given = ~np.isnan(until)
    if given.any() and not (np.isfinite(until[given]) & (until[given] >= clock)).all():
        raise ingest.Rejected()
    for r in recs:
        if r.terms is None:  # "terms": null, which design 1 refuses (E012)
            raise ingest.Rejected()
        if r.terms is msgspec.UNSET:
            r.terms = None  # absent, as term_matrix reads it
    batch = SubscriptionBatch(ids, x, y, k, alpha, ingest.term_matrix(recs, state.vocabulary, None))
    if given.any():
        batch.meta["until"] = until
    return ids.tolist(), batch, [None if r.op is msgspec.UNSET else r.op for r in recs]


def checked_records(recs: list, lines: list[int], state: State, clock: float) -> tuple[list[int], SubscriptionBatch | None, list]:
    """Design 1: every record parsed and checked in Python, in order, as a single PUT is; the
    first bad one raises its catalogue error naming its line.  (ids in line order, the topk
    batch or None, the other kinds' subscriptions)."""
    ids: list[int] = []
    taken: set[int] = set()
    topk_rows: list[tuple] = []
    others: list = []
    for rec, line in zip(recs, lines):
        try:
            if not isinstance(rec, dict):
                raise InputError("E033", kind="subscription", value=rec)
            if rec.get("op", "sub") != "sub":
                raise InputError("E018", op=rec.get("op"))
            sub = io.subscription_from_obj(rec)
            sid = validate.check_id(rec["id"])
            if sid in taken or sid in state.records:
                raise InputError("E007", id=sid, record_id=sid)
            if isinstance(sub, Subscription):
                row = validate.check_subscription(sub, state.vocabulary, state.engine.bounds)
                topk_rows.append(row + (queries.check_until(sub.until, clock),))
            else:  # the kind's own checks (compiled again when registered)
                queries.compile_subscription(sub, state.vocabulary, state.engine.bounds, clock)
                others.append(sub)
        except InputError as err:
            raise err.located(line=line) from None
        taken.add(sid)
        ids.append(sid)
    return ids, subscriptions_batch(topk_rows) if topk_rows else None, others


def subscribe_many(state: State, cmd: dict, before: Callable[[dict], object]) -> tuple[Any, list[EventBlock]]:
    """Bulk create (``{"op": "subs", "ndjson"}``): every record is checked first (a bad one
    is named by its line, E007 for an id taken or repeated), then all are registered, topk
    ones with one ``subscribe_batch``, then logged (one record); their creation events are
    one block, in ascending id order.  On replay ``token_hashes`` comes from the log; else
    an owner token is made per record and answered once (``tokens``, in line order)."""
    lines, texts = _ndjson_lines(cmd["ndjson"], state.max_records, "subscription records")
    hashes = cmd.get("token_hashes")
    tokens: list[str] | None = None
    if hashes is None:
        tokens = new_owner_tokens(len(lines))
        hashes = [owner_hash(t) for t in tokens]
    elif len(hashes) != len(lines):
        raise ValueError(f"a bulk subscription record holds {len(lines)} records and {len(hashes)} owners")
    clock = state.engine.clock
    mark = len(state.vocabulary)
    others: list = []
    batch: SubscriptionBatch | None
    try:
        ids, batch, ops = columnar_topk(cmd["ndjson"].encode(), len(lines), state, clock)
        with_op = [i for i, op in enumerate(ops) if op is not None]
    except ingest.Rejected:  # the records' own checks name the error (or accept after all)
        state.vocabulary.forget_from(mark)
        recs = _ndjson_values(lines, texts)
        ids, batch, others = checked_records(recs, lines, state, clock)
        with_op = [i for i, rec in enumerate(recs) if "op" in rec]
    try:
        if batch is not None:
            state.engine.subscribe_batch(batch)
        if others:
            state.open_queries()
            state.engine.subscribe_batch(others)
        before(dict(cmd, token_hashes=hashes))  # logged with the owners' hashes
    except BaseException:  # not registered, or not logged: undo
        for sid in ids:
            if state.engine.has_subscription(sid):
                state.engine.unsubscribe(sid)
        raise
    for sid, owner, line_text in zip(ids, hashes, texts):  # each record as sent
        state.records[sid] = line_text.encode()
        state.tokens[sid] = owner
    for i in with_op:  # ... without its op
        state.records[ids[i]] = pack_record({k: v for k, v in json.loads(texts[i]).items() if k != "op"})
    other_ids = {int(sub.id) for sub in others}
    state.other_kinds |= other_ids
    state.subs_version += 1
    order = np.array(sorted(ids), np.int64)
    block = block_of_results(state, order, other_ids, entered=True)
    reply: dict[str, Any] = {"created": len(ids), "position": state.position, "ids": ids}
    if tokens is not None:
        reply["tokens"] = tokens
    return reply, [block]

def unsubscribe_many(state: State, ids: Any, before: Callable[[dict], object], cmd: dict) -> tuple[Any, list[EventBlock]]:
    """Bulk delete (``{"op": "unsubs", "ids"}``): every id must name a subscription (E020,
    nothing deleted) and appear once; one removal event per id, in ascending id order."""
    if not isinstance(ids, list) or not ids:
        raise InputError("E023", what="ids", value=ids, expected="a non-empty list of subscription ids")
    if len(ids) > state.max_records:
        raise InputError("E092", n=len(ids), limit=state.max_records)
    checked = [validate.check_id(i) for i in ids]
    if len(set(checked)) != len(checked):
        raise InputError("E023", what="ids", value="a list with repeated ids", expected="distinct ids")
    for sid in checked:
        if sid not in state.records:
            raise InputError("E020", id=sid, record_id=sid)
    order = np.array(sorted(checked), np.int64)
    block = block_of_results(state, order, state.other_kinds & set(checked), entered=False)
    before(cmd)
    for sid in checked:
        state.engine.unsubscribe(sid)
        del state.records[sid]
        state.tokens.pop(sid, None)
        state.other_kinds.discard(sid)
    state.subs_version += 1
    return {"deleted": len(checked), "position": state.position}, [block]

def block_of_results(state: State, subs: np.ndarray, others: set[int], *, entered: bool) -> EventBlock:
    """One event per subscription of ``subs`` (ascending) carrying its whole current result:
    as entered (created) or as left (removed); top-k ones as columns, one
    ``topk_arrays`` call, the other kinds as objects."""
    count = len(subs)
    seq0 = state.seq + 1
    state.seq += count
    is_other = np.isin(subs, np.fromiter(others, np.int64, len(others))) if others else np.zeros(count, bool)
    topk_at = np.flatnonzero(~is_other)
    indptr, mids, scores = state.engine.topk_arrays(subs[topk_at]) if len(topk_at) else (
        np.zeros(1, np.int64), _EMPTY_I, _EMPTY_F)
    ptr = np.zeros(count + 1, np.int64)
    per = np.zeros(count, np.int64)
    per[topk_at] = np.diff(indptr)
    np.cumsum(per, out=ptr[1:])
    objects: dict[int, dict] = {}
    for i in np.flatnonzero(is_other).tolist():
        sid = int(subs[i])
        kind = state.engine.kind_of(sid)
        now = io.answer_entries(kind, state.engine.result(sid))
        obj: dict[str, Any] = {"sub": sid, "seq": seq0 + i, "position": state.position}
        if entered:
            obj.update(entered=now, left=[])
        else:
            obj.update(entered=[], left=[ENTRY_KEY[kind](e) for e in now], removed=True)
        objects[i] = obj
    zeros = np.zeros(count + 1, np.int64)
    if entered:
        return EventBlock(seq0, subs, state.position, ent_ptr=ptr, ent_ids=mids, ent_scores=scores,
                          left_ptr=zeros, objects=objects)
    return EventBlock(seq0, subs, state.position, ent_ptr=zeros, left_ptr=ptr, left_ids=mids,
                      removed=np.ones(count, bool), objects=objects)


def sorted_ids(state: State) -> np.ndarray:
    """Every subscription id, ascending (kept until the subscriptions change)."""
    version, ids = state.sorted_ids_cache
    if version != state.subs_version:
        ids = np.fromiter(state.records, np.int64, len(state.records))
        ids.sort()
        state.sorted_ids_cache = (state.subs_version, ids)
    return ids

def page_ids(state: State, after: int | None, limit: int) -> tuple[list[int], int | None]:
    """Up to ``limit`` subscription ids above ``after`` (None: from the first), ascending, and
    the ``after`` of the next page (None: this is the last)."""
    ids = sorted_ids(state)
    start = 0 if after is None else int(np.searchsorted(ids, after, side="right"))
    page = ids[start:start + limit].tolist()
    return page, (page[-1] if page and start + limit < len(ids) else None)

def records_page(state: State, after: int | None, limit: int) -> tuple[bytes, int | None]:
    """``{"subscriptions": [records as PUT], "next_after": id | null}`` of one page."""
    page, nxt = page_ids(state, after, limit)
    body = b'{"subscriptions":[' + b",".join(state.records[sid] for sid in page) + b'],"next_after":' + \
        (b"null" if nxt is None else str(nxt).encode()) + b"}"
    return body, nxt

def results_page(state: State, after: int | None, limit: int) -> tuple[bytes, int | None]:
    """One page of ``GET /v1/results``: results-file lines of ids above ``after``."""
    page, nxt = page_ids(state, after, limit)
    engine = state.engine
    lines = (json.dumps(obj, ensure_ascii=False, allow_nan=False)
             for obj in io.kind_result_objects((sid, engine.kind_of(sid), engine.result(sid)) for sid in page))
    return "".join(line + "\n" for line in lines).encode(), nxt

def messages_of(state: State, ids: list[int]) -> list[dict]:
    """The records of the window messages with these ids (the others are gone), oldest first,
    shaped as :meth:`last_messages`."""
    return [{k: rec[k] for k in MESSAGE_FIELDS if k in rec} for rec in state.window.find(ids)]
