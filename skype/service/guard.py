"""Requests are who they say: the Host, Origin, Content-Type and query-token checks (a middleware).

A browser lets any page it shows send "simple" requests to any server, the loopback one included:
a ``text/plain`` POST needs no preflight, a WebSocket or an EventSource may be opened to any
host, and a DNS name the attacker controls can be rebound to 127.0.0.1.  Tokens stop the first
three when they are required, but without ``--token-file`` the server trusts loopback.  So every
request passes these checks, in this order, before its route runs (each refusal is a catalogue
error, and nothing has changed):

1. **Host** (tokenless only): the ``Host`` header must name the listening address, ``localhost``
   or a loopback IP, with the listening port (a request without ``Host``, which no browser sends,
   passes).  A rebound name (``Host: evil.example:8750``) gets 421 E145.
2. **Origin**: a write (POST, PUT, PATCH, DELETE) or an event stream (the WebSocket upgrade, the
   SSE route) carrying an ``Origin`` header must come from the server's own origin
   (``http://`` + its ``Host``) or one given with ``--allow-origin``; else 403 E146.  ``Origin:
   null`` (sandboxed frames, files) is refused; no ``Origin`` (a non-browser client) passes.
3. **Content-Type**: a POST, PUT or PATCH, and a DELETE with a body, must say
   ``application/json`` or ``application/x-ndjson`` (parameters aside); else 415 E147.  This is
   what makes a cross-site form or ``text/plain`` post fail even without a matching Origin.
4. **Query tokens**: ``?token=`` only on the event-stream routes (EventSource and WebSocket cannot
   set headers); elsewhere 400 E148, so tokens stay out of the URLs that proxies and histories keep.
"""

from __future__ import annotations

from typing import Iterable

from aiohttp import web

from skype.errors import InputError

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
WITH_BODY = frozenset({"POST", "PUT", "PATCH"})
BODY_TYPES = frozenset({"application/json", "application/x-ndjson"})
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
STREAM_ROUTES = frozenset({"/v1/events", "/v1/subscriptions/{id}/events"})  # where ?token= is accepted


def split_host(value: str) -> tuple[str, int | None]:
    """``Host`` header value -> (lower-case name without IPv6 brackets, port or None)."""
    value = value.strip().lower()
    if value.startswith("["):  # [v6]:port
        end = value.find("]")
        name, rest = value[1:end] if end > 0 else value[1:], value[end + 1:] if end > 0 else ""
        port_text = rest[1:] if rest.startswith(":") else ""
    else:
        name, _, port_text = value.partition(":")
    try:
        port = int(port_text) if port_text else None
    except ValueError:
        port = -1  # not a port: matches nothing
    return name, port


def normal_origin(origin: str) -> str:
    return origin.strip().rstrip("/").lower()


def stream_route(request: web.Request) -> bool:
    resource = request.match_info.route.resource
    return resource is not None and resource.canonical in STREAM_ROUTES


class Guard:
    """The checks of the module docstring for a server listening on ``host:port`` (``port`` None:
    any port, for test servers on a port chosen later).  ``tokenless``: the Host check applies."""

    def __init__(self, host: str, port: int | None, *, tokenless: bool, allow_origins: Iterable[str] = ()) -> None:
        self.names = frozenset({host.strip().strip("[]").lower(), *LOOPBACK_NAMES})  # the address, not a Host value
        self.port = port
        self.tokenless = tokenless
        self.allow_origins = frozenset(normal_origin(o) for o in allow_origins)

    def check_host(self, request: web.Request) -> None:
        value = request.headers.get("Host")
        if value is None:
            return
        name, port = split_host(value)
        if name in self.names and (self.port is None or port == self.port or (port is None and self.port == 80)):
            return
        names = [f"[{n}]" if ":" in n else n for n in sorted(self.names)]
        shown = names if self.port is None else [f"{n}:{self.port}" for n in names]
        raise InputError("E145", host=value, allowed=", ".join(shown))

    def check_origin(self, request: web.Request, action: str) -> None:
        origin = request.headers.get("Origin")
        if origin is None:
            return
        own = f"{request.scheme}://{request.headers.get('Host', request.host)}".lower()
        got = normal_origin(origin)
        if got != "null" and (got == own or got in self.allow_origins):
            return
        raise InputError("E146", origin=origin, action=action, own=own)

    @web.middleware
    async def middleware(self, request: web.Request, handler) -> web.StreamResponse:
        if self.tokenless:
            self.check_host(request)
        if request.match_info.http_exception is not None:  # no such route (404 or 405): nothing runs
            return await handler(request)
        method = request.method
        streaming = stream_route(request)
        upgrade = request.headers.get("Upgrade", "").lower() == "websocket"
        if method in WRITES or streaming or upgrade:
            self.check_origin(request, "open an event stream" if method not in WRITES else f"send {method}")
        if method in WITH_BODY or (method == "DELETE" and request.body_exists):
            if request.content_type not in BODY_TYPES:
                raise InputError("E147", method=method, path=request.path,
                                 got=request.headers.get("Content-Type", ""))
        if "token" in request.query and not streaming:
            raise InputError("E148")
        return await handler(request)
