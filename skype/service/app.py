"""The HTTP API of ``python -m skype.run serve`` (aiohttp): routes, auth, limits, streams.

Every route that reads or changes the engine sends a job to the engine thread
(:mod:`skype.service.worker`) and awaits it; nothing here touches the engine.  Every request
passes :mod:`skype.service.guard` (Host, Origin, Content-Type, query tokens) first; a route
naming a subscription answers a caller who may not see it the same whether it exists or not
(no id enumeration).  The bulk and paginated routes are in :mod:`skype.service.bulk`; the
service is built by :func:`skype.service.build.create_app`.  Errors are
catalogue errors answered as ``{"error": {"code", "message", "line"?}}`` with the status of
:data:`STATUS` (by default 400 for an input error, 503 for an operational one).  Event streams
(SSE, one or many subscriptions, and WebSocket) are :class:`~skype.service.fanout.Connection` s written by the fan-out; a stream resumes after a
``seq`` from the hub's ring when it holds every event of the stream's subscriptions after it
(per-subscription watermarks), or after a ``reset`` (the current result) when it does not, when
the backlog is above ``--stream-queue`` events, or when the ``seq`` is beyond the newest.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from functools import partial
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from skype.errors import CodedError, InputError, OperationalError
from skype.service import bulk
from skype.service.auth import Tokens, new_owner_token, owner_hash
from skype.service.fanout import Connection, Fanout
from skype.service.guard import Guard, stream_route
from skype.service.hub import Hub
from skype.service.worker import Busy, Worker
from skype import validate

PAGE_DIR = Path(__file__).parent / "page"
STATUS = {"E020": 404, "E008": 404, "E090": 404, "E091": 413, "E092": 413, "E093": 429, "E094": 503,
          "E095": 401, "E096": 403, "E098": 429, "E099": 429, "E007": 409, "E019": 409,
          "E145": 421, "E146": 403, "E147": 415, "E148": 400}
NDJSON = "application/x-ndjson"
RESET_RETRY_S = 0.05  # a stream's reset waits this long when the engine queue is full, then asks again


def error_response(err: CodedError, *, line: bool = False) -> web.Response:
    body: dict[str, Any] = {"code": err.code, "message": err.detail}
    if err.record_id is not None:
        body["message"] = f"record id {err.record_id}: {err.detail}"
    if line and err.line is not None:
        body["line"] = err.line
    default = 503 if isinstance(err, OperationalError) else 400  # retry later, or fix the request
    return web.json_response({"error": body}, status=STATUS.get(err.code, default))


class Limits:
    def __init__(self, max_body_bytes: int, max_records: int, max_connections: int,
                 max_streams_per_connection: int, stream_queue: int, stream_buffer_bytes: int = 4 << 20) -> None:
        self.max_body_bytes, self.max_records = max_body_bytes, max_records
        self.max_connections, self.max_streams = max_connections, max_streams_per_connection
        self.stream_queue = stream_queue  # events a resume replays at most (more: resets)
        self.stream_buffer_bytes = stream_buffer_bytes  # unsent bytes a stream may hold before it is cut


class Service:
    def __init__(self, worker: Worker, hub: Hub, tokens: Tokens | None, limits: Limits, metrics: Any,
                 guard: Guard | None = None) -> None:
        self.worker, self.hub, self.tokens, self.limits, self.metrics = worker, hub, tokens, limits, metrics
        # default: loopback names on any port (a test server's port is chosen later)
        self.guard = guard if guard is not None else Guard("127.0.0.1", None, tokenless=tokens is None)
        self.open = 0
        self.streams: set[web.StreamResponse] = set()
        self.fanout = hub.fanout if hub.fanout is not None else Fanout(
            hub, metrics, max_buffer_bytes=limits.stream_buffer_bytes)

    # ------------------------------------------------------------------ helpers
    def token(self, request: web.Request) -> str | None:
        """The request's token: ``Authorization: Bearer``, or ``?token=`` on the stream routes."""
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            return auth[7:].strip()
        return request.query.get("token") if stream_route(request) else None

    def need_owner(self, token: str | None, sid: int, action: str, publisher_ok: bool = False) -> None:
        """Subscription ``sid`` exists (E020) and ``token`` may ``action`` on it.  When tokens are
        required, a caller who could not see it were it there gets the same answer whether it is
        there or not (E095 without a token, E096 with another's): ids cannot be enumerated."""
        exists = sid in self.worker.state.records
        if self.tokens is None:
            if not exists:
                raise InputError("E020", id=sid, record_id=sid)
            return
        if token is None:
            raise InputError("E095", detail=action)
        if self.tokens.is_admin(token) or (publisher_ok and self.tokens.is_publisher(token)):
            if not exists:
                raise InputError("E020", id=sid, record_id=sid)
            return
        if not exists or not self.tokens.is_owner(token, self.worker.state.tokens.get(sid)):
            raise InputError("E096", action=action)

    def need_role(self, request: web.Request, role: str, action: str) -> None:
        """``role`` "publisher" (or admin) or "admin" when tokens are required."""
        if self.tokens is None:
            return
        tok = self.token(request)
        if tok is None:
            raise InputError("E095", detail=action)
        if not (self.tokens.is_admin(tok) if role == "admin" else self.tokens.is_publisher(tok)):
            raise InputError("E096", action=f"{action} ({role} only)" if role == "admin" else action)

    async def run(self, kind: str, payload: Any = None, t0: float | None = None) -> Any:
        try:
            fut = self.worker.submit(kind, payload, t0)
        except Busy:
            raise OperationalError("E093", size=self.worker.jobs.maxsize) from None
        return await fut

    async def body(self, request: web.Request) -> bytes:
        limit = self.limits.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise InputError("E091", size=request.content_length, limit=limit)
        data = bytearray()
        async for chunk in request.content.iter_any():
            data += chunk
            if len(data) > limit:
                raise InputError("E091", size=f"more than {len(data)}", limit=limit)
        return bytes(data)

    async def json_body(self, request: web.Request, expected: str) -> Any:
        raw = await self.body(request)
        if not raw.strip():
            raise InputError("E105", expected=expected)
        try:
            return json.loads(raw)
        except ValueError as err:
            raise InputError("E010", detail=str(err)) from None

    @staticmethod
    def sub_id(request: web.Request) -> int:
        text = request.match_info["id"]
        try:
            value = int(text)
        except ValueError:
            raise InputError("E025", value=text) from None
        return validate.check_id(value)

    @staticmethod
    def after_of(value: str | None) -> int | None:
        if value is None or value == "":
            return None
        try:
            after = int(value)
        except ValueError:
            after = -1
        if after < 0:
            raise InputError("E023", what="after (Last-Event-ID)", expected="an event seq, an integer >= 0",
                             value=value)
        return after

    # ------------------------------------------------------------------ middleware
    @web.middleware
    async def middleware(self, request: web.Request, handler) -> web.StreamResponse:
        route = request.match_info.route.resource.canonical if request.match_info.route.resource else "unmatched"
        status = 500
        counted = request.path != "/healthz" and request.path != "/metrics"
        try:
            if counted and self.open >= self.limits.max_connections:
                raise OperationalError("E098", limit=self.limits.max_connections)
            if (request.path.startswith("/v1/") or request.path == "/healthz") and self.worker.status != "ok":
                raise OperationalError("E094", status=self.worker.status)
            if counted:
                self.open += 1
            try:
                resp = await handler(request)
            finally:
                if counted:
                    self.open -= 1
            status = resp.status
            return resp
        except CodedError as err:  # input (4xx) or operational (429/503)
            resp = error_response(err, line=request.content_type == NDJSON)
            status = resp.status
            return resp
        except web.HTTPNotFound:
            resp = error_response(InputError("E090", method=request.method, path=request.path))
            status = 404
            return resp
        except web.HTTPMethodNotAllowed:
            resp = error_response(InputError("E090", method=request.method, path=request.path))
            status = 404
            return resp
        finally:
            self.metrics.requests.labels(route, str(status)).inc()

    # ------------------------------------------------------------------ routes
    async def healthz(self, request: web.Request) -> web.Response:
        if not self.worker.healthy:  # the engine or snapshot thread died: 503 failed at once
            raise OperationalError("E094", status="failed")
        st = self.worker.state
        return web.json_response({"status": "ok", "subscriptions": len(st.records), "window": st.window_size,
                                  "position": st.position})

    async def put_subscription(self, request: web.Request) -> web.Response:
        self.need_role(request, "publisher", "create or replace subscriptions")
        sid = self.sub_id(request)
        rec = await self.json_body(request, "a subscription record")
        if not isinstance(rec, dict):
            raise InputError("E033", kind="subscription", value=rec)
        if rec.get("op", "sub") != "sub":
            raise InputError("E018", op=rec.get("op"))
        rec = {k: v for k, v in rec.items() if k != "op"}
        if "id" in rec and rec["id"] != sid:
            raise InputError("E100", body=rec["id"], path=sid)
        rec["id"] = sid
        token = new_owner_token()  # shown once: the state and the log keep its hash
        reply = await self.run("cmd", {"op": "sub", "rec": rec, "token_hash": owner_hash(token)})
        created = reply.pop("created")
        if created:
            reply["token"] = token
        return web.json_response(reply, status=201 if created else 200)

    async def delete_subscription(self, request: web.Request) -> web.Response:
        sid = self.sub_id(request)
        self.need_owner(self.token(request), sid, "delete this subscription", publisher_ok=True)
        return web.json_response(await self.run("cmd", {"op": "unsub", "id": sid}))

    async def get_subscription(self, request: web.Request) -> web.Response:
        sid = self.sub_id(request)
        self.need_owner(self.token(request), sid, "read this subscription")
        return web.json_response(await self.run("result", sid))

    async def post_query(self, request: web.Request) -> web.Response:
        self.need_role(request, "publisher", "run snapshot queries")
        rec = await self.json_body(request, "a query record")
        if isinstance(rec, dict) and rec.get("op", "query") != "query":
            raise InputError("E018", op=rec.get("op"))
        line = await self.run("query", rec)
        if inspect.isawaitable(line):  # an engine that answers later (serve --engine spark: skype.service.spark_queries)
            line = await line
        # the contract's answer is the answers file's `answer`; the position it was taken at
        # (the line's `after`) travels in a header
        return web.json_response(line["answer"], headers={"X-Skype-Position": str(line["after"])})

    async def post_advance(self, request: web.Request) -> web.Response:
        self.need_role(request, "publisher", "advance the clock")
        rec = await self.json_body(request, '{"t": seconds}')
        if not isinstance(rec, dict):
            raise InputError("E033", kind="advance", value=rec)
        if "t" not in rec:
            raise InputError("E011", field="t")
        return web.json_response(await self.run("cmd", {"op": "advance", "t": rec["t"]}))

    async def metrics_route(self, request: web.Request) -> web.Response:
        self.metrics.queue_depth.set(self.worker.jobs.qsize())
        resp = web.Response(body=generate_latest(self.metrics.registry))
        resp.content_type = CONTENT_TYPE_LATEST.split(";")[0]
        return resp

    async def page(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info.get("file", "index.html")
        path = (PAGE_DIR / name).resolve()
        if not PAGE_DIR.is_dir() and "file" not in request.match_info:
            return web.Response(text="<!doctype html><title>Skype</title><p>The live page is not installed "
                                     "(skype/service/page/ is missing). The API is under /v1/.</p>",
                                content_type="text/html")
        if PAGE_DIR.resolve() not in path.parents or not path.is_file():
            raise InputError("E090", method=request.method, path=request.path)
        return web.FileResponse(path)

    # ------------------------------------------------------------------ event streams
    async def follow(self, conn: Connection, subs: list[int], after: int | None) -> None:
        """Write to ``conn`` what ``subs`` start with after ``after`` (None: from now on), then
        follow them live (:mod:`skype.service.fanout`).  The retained events after ``after``
        are replayed when the ring holds every one of them (per subscription: see
        :meth:`Hub.gap`) and they are at most ``--stream-queue``; otherwise each subscription
        starts with a reset (its current result) at the engine's seq, then the events after it.
        Resets are counted by reason."""
        hub, fanout = self.hub, self.fanout
        fanout.start()
        if after is None:
            fanout.attach(conn, subs, [])
            return
        limit = self.limits.stream_queue
        reason = hub.gap(subs, after)
        if reason is None:
            found = hub.backlog(subs, after, limit)
            if found is not None:
                self._attach(conn, subs, fanout.frames(conn, found), found)
                return
            reason = "backlog"
        self.metrics.resets.labels(reason).inc(len(subs))
        while True:
            try:
                seq, position, lines = await self.run("reset", subs)
            except OperationalError as err:  # the engine queue is full (E093)
                if err.code != "E093":
                    raise
                await asyncio.sleep(RESET_RETRY_S)  # the engine queue is full: a stream is never refused for it
                continue
            await hub.reach(seq)  # the engine may be ahead of the ring: its events are on their way
            if conn.done.done():
                return
            if hub.gap(subs, seq) is None:
                found = hub.backlog(subs, seq)
                if found is not None:
                    break
        frames = []
        for sid in subs:
            if lines[sid] is not None:
                data = json.dumps({"sub": sid, "seq": seq, "position": position, "reset": lines[sid]})
                frames.append(conn.frame(seq, data.encode()))
        conn.last_seq = max(conn.last_seq, seq)
        self._attach(conn, subs, frames + fanout.frames(conn, found), found)

    def _attach(self, conn: Connection, subs: list[int], frames: list[bytes], found: list) -> None:
        """Attach with ``frames``; an SSE stream drops the subscriptions removed in its backlog
        (and ends when none is left)."""
        if conn.ends_when_removed:
            gone = {int(block.subs[i]) for block, idx in found for i in idx if block.removed[i]}
            subs = [s for s in subs if s not in gone]
        self.fanout.attach(conn, subs, frames)
        if conn.ends_when_removed and not conn.subs:
            self.fanout.detach(conn)

    def _check_follow(self, subs: list[int], token: str | None) -> None:
        if len(subs) > self.limits.max_streams:
            raise InputError("E099", limit=self.limits.max_streams, n=len(subs))
        for sid in subs:  # E020 only to who may see it (need_owner)
            self.need_owner(token, sid, f"follow subscription {sid}'s events")

    async def sse(self, request: web.Request) -> web.StreamResponse:
        """``GET /v1/subscriptions/{id}/events``: one subscription over SSE."""
        return await self._sse(request, [self.sub_id(request)])

    async def _sse(self, request: web.Request, subs: list[int]) -> web.StreamResponse:
        """An SSE stream of ``subs``: one ``id:`` sequence (the global seq), so one
        ``Last-Event-ID`` resumes all of them.  Answers 200 at once, then the backlog or
        resets; ends when every subscription was removed, or cut as a slow consumer."""
        after = self.after_of(request.headers.get("Last-Event-ID") or request.query.get("after"))
        self._check_follow(subs, self.token(request))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
        chunked = request.version >= (1, 1)
        if chunked:
            resp.enable_chunked_encoding()
        await resp.prepare(request)
        await resp.write(b"retry: 1000\n\n")  # the headers go out now (aiohttp sends them with a body write)
        conn = Connection(request.transport, "sse", chunked=chunked, ends_when_removed=True)
        self.streams.add(resp)
        try:
            await self.follow(conn, subs, after)
            await conn.done
        except InputError as err:  # after the 200: said on the stream (e.g. E094, the server failed)
            payload = {"error": {"code": err.code, "message": err.detail}}
            conn.write(b"event: error\ndata: %s\n\n" % json.dumps(payload).encode())
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.fanout.detach(conn)
            self.streams.discard(resp)
        if conn.cut or not chunked:
            resp.force_close()
        return resp

    async def websocket(self, request: web.Request) -> web.StreamResponse:
        """``GET /v1/events``: a WebSocket; without an upgrade, an SSE stream of ``?sub=ID``
        (repeated)."""
        if request.headers.get("Upgrade", "").lower() != "websocket":
            texts = request.query.getall("sub", [])
            if not texts:
                raise InputError("E023", what="sub", expected="one or more ?sub=ID (an SSE stream) or a WebSocket",
                                 value="")
            subs = []
            for text in texts:
                try:
                    subs.append(validate.check_id(int(text)))
                except ValueError:
                    raise InputError("E025", value=text) from None
            return await self._sse(request, sorted(set(subs)))
        conn_token = self.token(request)
        ws = web.WebSocketResponse(heartbeat=30.0, compress=False)
        await ws.prepare(request)
        conn = Connection(request.transport, "ws")

        def cut(conn: Connection) -> None:
            reason = f"E103 slow consumer; resume after seq {conn.last_seq}"
            asyncio.ensure_future(ws.close(code=1013, message=reason.encode()))

        conn.on_cut = cut
        self.streams.add(ws)
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                try:
                    await self._ws_subscribe(conn, msg.data, conn_token)
                except CodedError as err:  # a bad request, or the queue full (E093) at a reset
                    await ws.send_str(json.dumps({"error": {"code": err.code, "message": err.detail}}))
        finally:
            self.fanout.detach(conn)
            self.streams.discard(ws)
        return ws

    async def _ws_subscribe(self, conn: Connection, text: str, conn_token: str | None) -> None:
        try:
            req = json.loads(text)
        except ValueError as err:
            raise InputError("E104", detail=f"not JSON: {err}") from None
        if not isinstance(req, dict) or not isinstance(req.get("subscribe"), list):
            raise InputError("E104", detail='expected {"subscribe": [ids], "after": SEQ}')
        ids = [validate.check_id(i) for i in req["subscribe"]]
        n = len(set(ids) | conn.subs)
        if n > self.limits.max_streams:
            raise InputError("E099", limit=self.limits.max_streams, n=n)
        after = req.get("after")
        if after is not None and (isinstance(after, bool) or not isinstance(after, int) or after < 0):
            raise InputError("E023", what="after", expected="an event seq, an integer >= 0", value=after)
        token = req.get("token", conn_token)
        for sid in ids:  # E020 only to who may see it (need_owner)
            self.need_owner(token, sid, f"follow subscription {sid}")
        new = sorted(set(ids) - conn.subs)
        if new:
            conn.following += 1
            try:
                await self.follow(conn, new, after)
            finally:
                conn.following -= 1

    async def on_shutdown(self, app: web.Application) -> None:
        self.fanout.stop()
        for resp in list(self.streams):
            if isinstance(resp, web.WebSocketResponse):
                await resp.close(code=1001, message=b"server shutting down")
        for conn in list(self.fanout.connections):
            self.fanout.detach(conn)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.middleware, self.guard.middleware],
                              client_max_size=self.limits.max_body_bytes + 1)
        r = app.router
        r.add_get("/healthz", self.healthz)
        r.add_post("/v1/subscriptions", partial(bulk.post_subscriptions, self))
        r.add_delete("/v1/subscriptions", partial(bulk.delete_subscriptions, self))
        r.add_get("/v1/subscriptions", partial(bulk.list_subscriptions, self))
        r.add_put("/v1/subscriptions/{id}", self.put_subscription)
        r.add_delete("/v1/subscriptions/{id}", self.delete_subscription)
        r.add_get("/v1/subscriptions/{id}", self.get_subscription)
        r.add_get("/v1/subscriptions/{id}/events", self.sse)
        r.add_get("/v1/results", partial(bulk.get_results, self))
        r.add_get("/v1/messages", partial(bulk.get_messages, self))
        r.add_post("/v1/messages", partial(bulk.post_messages, self))
        r.add_post("/v1/query", self.post_query)
        r.add_post("/v1/advance", self.post_advance)
        r.add_get("/v1/events", self.websocket)
        r.add_get("/metrics", self.metrics_route)
        r.add_get("/", self.page)
        r.add_get("/page/{file:.+}", self.page)
        app.on_shutdown.append(self.on_shutdown)
        return app


SERVICE = web.AppKey("skype.service", Service)  # app[SERVICE]: the application's Service (build.create_app)
