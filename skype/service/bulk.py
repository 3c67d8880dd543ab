"""Bulk and paginated routes: many subscriptions per request, and reads one page at a time.

* ``POST /v1/subscriptions`` (NDJSON subscription records, as PUT takes them, each with its
  ``id``): all or nothing.  Every record is checked before any is registered, a refusal names
  the record's line, an id already taken or repeated is E007 (409).  The records are registered
  through the engine's bulk path (``subscribe_batch``) and acknowledged once durable, as one log
  record; their creation events follow in ascending id order.  The answer:
  ``{"created", "position", "ids", "tokens"}`` (owner tokens in line order, shown only here).
* ``DELETE /v1/subscriptions`` (``{"ids": [...]}``, application/json): all or nothing (an
  unknown id is E020, nothing deleted); one removal event per id.  Publisher or admin.
* ``GET /v1/subscriptions?after=ID&limit=N``: the records in ascending id order, ids above
  ``after``: ``{"subscriptions": [...], "next_after": ID | null}`` (null: no more).  Publisher
  or admin.
* ``GET /v1/results?after=ID&limit=N``: results-file lines (NDJSON) of one page; the next
  page's ``after`` is in the ``X-Skype-Next-After`` header (absent on the last page).  Without
  ``after`` and ``limit``: every result, as before.  Admin.
* ``POST /v1/messages``: one message record (application/json) or a batch (NDJSON, all or
  nothing, at most ``--max-records``).
* ``GET /v1/messages?last=N`` (the newest N, default 200) or ``?ids=1,2,3`` (those of the
  window's messages, for a page that shows what a result is): NDJSON message records, oldest
  first.  Publisher or admin.

Reads run on the engine thread as functions of the state (the worker's ``read`` job), like
every read, so a page is consistent with the writes before it.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from aiohttp import web

from skype.errors import InputError
from skype.service import manysubs
from skype import validate

if TYPE_CHECKING:
    from skype.service.app import Service

NDJSON = "application/x-ndjson"
DEFAULT_LAST = 200      # GET /v1/messages without ?last=
DEFAULT_LIMIT = 1000    # a page without ?limit=
NEXT_HEADER = "X-Skype-Next-After"


def _count(request: web.Request, name: str, default: int, most: int) -> int:
    text = request.query.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 1:
        raise InputError("E023", what=name, value=text, expected="an integer >= 1")
    return min(value, most)


def _after(request: web.Request) -> int | None:
    text = request.query.get("after")
    if text is None or text == "":
        return None
    try:
        value = int(text)
    except ValueError:
        raise InputError("E023", what="after", value=text, expected="a subscription id (an integer)") from None
    return validate.check_id(value)


async def post_subscriptions(service: Service, request: web.Request) -> web.Response:
    service.need_role(request, "publisher", "create subscriptions")
    if request.content_type != NDJSON:
        raise InputError("E147", method="POST", path=request.path, got=request.headers.get("Content-Type", ""))
    raw = await service.body(request)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError("E031", detail=str(err)) from None
    reply = await service.run("cmd", {"op": "subs", "ndjson": text})
    return web.json_response(reply, status=201)


async def delete_subscriptions(service: Service, request: web.Request) -> web.Response:
    service.need_role(request, "publisher", "delete subscriptions")
    body = await service.json_body(request, '{"ids": [subscription ids]}')
    if not isinstance(body, dict) or set(body) != {"ids"}:
        raise InputError("E023", what="body", value=body, expected='{"ids": [subscription ids]}')
    return web.json_response(await service.run("cmd", {"op": "unsubs", "ids": body["ids"]}))


async def list_subscriptions(service: Service, request: web.Request) -> web.Response:
    service.need_role(request, "publisher", "list the subscriptions")
    after, limit = _after(request), _count(request, "limit", DEFAULT_LIMIT, service.limits.max_records)
    body, _ = await service.run("read", lambda st: manysubs.records_page(st, after, limit))
    return web.Response(body=body, content_type="application/json")


async def get_results(service: Service, request: web.Request) -> web.Response:
    service.need_role(request, "admin", "read every result")
    if "after" not in request.query and "limit" not in request.query:
        return web.Response(body=await service.run("results"), content_type=NDJSON)
    after, limit = _after(request), _count(request, "limit", DEFAULT_LIMIT, service.limits.max_records)
    body, nxt = await service.run("read", lambda st: manysubs.results_page(st, after, limit))
    headers = {NEXT_HEADER: str(nxt)} if nxt is not None else {}
    return web.Response(body=body, content_type=NDJSON, headers=headers)


async def get_messages(service: Service, request: web.Request) -> web.Response:
    """The newest ``last`` window messages, or those with the given ``ids``, as NDJSON message
    records, oldest first."""
    service.need_role(request, "publisher", "read the recent messages (publisher or admin only)")
    most = service.limits.max_records
    if "ids" in request.query:
        text = request.query["ids"]
        try:
            ids = [validate.check_id(int(part)) for part in text.split(",") if part.strip()]
        except (ValueError, InputError):
            raise InputError("E023", what="ids", value=text, expected="message ids separated by commas") from None
        if len(ids) > most:
            raise InputError("E092", n=len(ids), limit=most)
        recs = await service.run("read", lambda st: manysubs.messages_of(st, ids))
    else:
        last = request.query.get("last")
        n = DEFAULT_LAST
        if last is not None:
            try:
                n = int(last)
            except ValueError:
                n = -1
            if n < 0:
                raise InputError("E106", value=last)
        recs = await service.run("messages", min(n, most))
    body = "".join(json.dumps(r, ensure_ascii=False, allow_nan=False) + "\n" for r in recs)
    return web.Response(body=body.encode(), content_type=NDJSON)


async def post_messages(service: Service, request: web.Request) -> web.Response:
    """A message record (JSON) or a batch (NDJSON, all or nothing; design 2 decodes it on the
    engine thread in one call, design 1 names a bad line)."""
    t0 = time.monotonic()  # the request's arrival: skype_publish_request_to_write_seconds starts here
    service.need_role(request, "publisher", "publish messages")
    ndjson = request.content_type == NDJSON
    raw = await service.body(request)
    recs: list = []
    lines: list[int] = []
    if ndjson and service.worker.state.ingest == "columnar":
        # design 2: the engine thread decodes the body in one call (skype.service.ingest)
        if not raw.strip():
            raise InputError("E105", expected="NDJSON message records")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = None  # design 1 names the line
        if text is not None:
            return web.json_response(await service.run("cmd", {"op": "msgs", "ndjson": text}, t0))
    if ndjson:
        for n, line in enumerate(raw.split(b"\n"), start=1):
            if not line.strip():
                continue
            if len(recs) >= service.limits.max_records:
                raise InputError("E092", n=f"more than {len(recs)}", limit=service.limits.max_records)
            try:
                recs.append(json.loads(line))
            except ValueError as err:
                raise InputError("E010", detail=str(err), line=n) from None
            lines.append(n)
        if not recs:
            raise InputError("E105", expected="NDJSON message records")
    else:
        if not raw.strip():
            raise InputError("E105", expected="a message record")
        try:
            recs = [json.loads(raw)]
        except ValueError as err:
            raise InputError("E010", detail=str(err)) from None
        lines = [1]
    try:
        reply = await service.run("cmd", ({"op": "msgs", "recs": recs}, lines), t0)
    except InputError as err:
        if not ndjson:
            err.line = None
        raise
    return web.json_response(reply)
