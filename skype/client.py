"""A Python client of the Skype server (``python -m skype.run serve``; ``docs/service.md``).

:class:`Client` wraps the HTTP API with httpx.  Writes (``subscribe``, ``publish``...) return
once the server has acknowledged them as durable.  ``publish`` sends NDJSON batches and retries
a batch the server refuses with 429 (backpressure), waiting longer each time; any other refusal
raises :class:`ServiceError` with the server's catalogue code, message and line (the line is
counted over the whole ``publish`` call, and ``accepted`` says how many messages went in before
the refused batch: a batch is atomic).

Bulk and pages: ``subscribe_many`` registers many subscriptions with one ``POST
/v1/subscriptions`` per ``batch_size`` records (each request all or nothing, durable when it
returns), ``unsubscribe_many`` deletes many with one request, and ``subscriptions()`` and
``results()`` read the server's lists one page at a time (``?after=ID&limit=N``).

``events(ids, after)`` follows subscriptions: over Server-Sent Events when one token may read
them all (one id: ``/v1/subscriptions/{id}/events``; several: one ``/v1/events?sub=..`` stream),
else over the WebSocket ``/v1/events`` (one subscribe message per token); ``transport`` chooses.
Invariant: it remembers, per subscription, the ``seq`` of the last event it yielded, and the
stream's watermark (the ``id:`` of SSE keepalives, ``{"seq": n}`` on the WebSocket: every event
of the stream's subscriptions up to it was sent).  After any disconnect (server killed,
restarted, slow consumer cut off) it resumes each subscription after the larger of the two: an
SSE stream is in seq order, so one ``Last-Event-ID`` (the newest seq it saw) resumes all of its
subscriptions; a WebSocket sends one subscribe message per distinct resume seq.  A subscription
is never resumed from before its own last event merely because another one is quiet, so the
consumer sees every event once, in ``seq`` order per subscription: no gap (the server resumes
strictly after the seq it is given, per subscription) and no duplicate (an event at or below its
subscription's last seq is dropped).  Across subscriptions the order is the server's: ``seq``
order on SSE; on a WebSocket the replays of several subscribe messages interleave.  A
subscription whose ``removed`` event came is not asked for again; the stream ends when none is
left.  When the server no longer holds a subscription's events that old it sends a ``reset``
object (the subscription's whole result), which is yielded like an event;
:func:`apply_event` folds events, resets included, into a results table.
"""

from __future__ import annotations

import json
import time
from itertools import islice
from typing import Any, Generator, Iterable, Iterator, Mapping

import httpx

from skype.errors import Errors, SkypeError

NDJSON = "application/x-ndjson"
RETRYABLE_STATUS = (429, 503)
SLOW_CONSUMER = "E103"  # the server closed a stream that fell behind: resume after the last seq


class ServiceError(SkypeError):
    """The server refused a request (``code``, ``message``, ``line`` as it sent them, ``status``
    the HTTP status), or the client gave up on it (codes E110-E113, and E023 for a bad argument)."""

    def __init__(self, code: str, message: str, *, status: int | None = None, line: int | None = None,
                 accepted: int = 0) -> None:
        self.code, self.message, self.status, self.line, self.accepted = code, message, status, line, accepted
        where = [f"HTTP {status}"] if status is not None else []
        if line is not None:
            where.append(f"line {line}")
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {message} [{code}]" if prefix else f"{message} [{code}]")


def _client_error(code: str, *, status: int | None = None, **fields: object) -> ServiceError:
    return ServiceError(code, getattr(Errors, code).format(**fields), status=status)


def _refusal(resp: httpx.Response, url: str) -> ServiceError:
    """The server's catalogue error of a refused response (E110 when the body is not one)."""
    try:
        err = json.loads(resp.read())["error"]
        return ServiceError(str(err["code"]), str(err["message"]), status=resp.status_code, line=err.get("line"))
    except (ValueError, KeyError, TypeError):
        text = resp.read()[:200].decode("utf-8", "replace")
        return _client_error("E110", status=resp.status_code, url=url, detail=text or resp.reason_phrase)


def _backoff(attempt: int, retry_after: str | None, cap: float) -> float:
    if retry_after:
        try:
            return min(cap, max(0.0, float(retry_after)))
        except ValueError:
            pass
    return min(cap, 0.05 * 2 ** attempt)


class Client:
    """``Client("http://127.0.0.1:8750", token=None)``.  ``token`` is sent as ``Authorization:
    Bearer`` on every request (a publisher or admin token); the owner token the server issues
    when a subscription is created is kept and used for that subscription's reads, deletion and
    events (a WebSocket sends one subscribe message per token, with its ``token`` field)."""

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 30.0,
                 retry_for: float = 60.0, transport: httpx.BaseTransport | None = None) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.retry_for = retry_for  # seconds a request keeps retrying 429/503 and lost connections
        self.owner_tokens: dict[int, str] = {}
        self._http = httpx.Client(base_url=self.url, timeout=timeout, transport=transport)

    # ------------------------------------------------------------------ plumbing
    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _headers(self, sub_id: int | None = None, *, owner_first: bool = True) -> dict[str, str]:
        token = self.token
        if sub_id is not None and (owner_first or token is None):
            token = self.owner_tokens.get(sub_id, token)
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _request(self, method: str, path: str, *, headers: dict[str, str] | None = None,
                 **kwargs: Any) -> httpx.Response:
        """One request, retried for ``retry_for`` seconds on 429/503 (the server changed
        nothing) and on a refused connection; a connection lost after sending is retried only
        for GET and PUT (a PUT again replaces the subscription with itself)."""
        deadline = time.monotonic() + self.retry_for
        attempt = 0
        while True:
            try:
                resp = self._http.request(method, path, headers=headers, **kwargs)
            except httpx.TransportError as err:
                # a request that may have reached the server is not sent again unless repeating it
                # changes nothing (GET, PUT): a POSTed batch might be in the log already
                sent = not isinstance(err, httpx.ConnectError)
                if time.monotonic() >= deadline or (sent and method not in ("GET", "PUT")):
                    raise _client_error("E111", url=self.url, detail=f"{type(err).__name__}: {err}") from None
                time.sleep(_backoff(attempt, None, 1.0))
                attempt += 1
                continue
            if resp.status_code in RETRYABLE_STATUS and time.monotonic() < deadline:
                time.sleep(_backoff(attempt, resp.headers.get("Retry-After"), 1.0))
                attempt += 1
                continue
            if resp.status_code >= 400:
                if resp.status_code in RETRYABLE_STATUS:
                    raise _client_error("E112", status=resp.status_code, url=self.url, seconds=self.retry_for,
                                        detail=_refusal(resp, self.url).message)
                raise _refusal(resp, self.url)
            return resp

    # ------------------------------------------------------------------ API
    def health(self) -> dict:
        return self._request("GET", "/healthz").json()

    def subscribe(self, record: Mapping[str, Any]) -> dict:
        """PUT the subscription ``record`` (its ``id`` names it); returns ``{"id", "position"}``
        and, when it created the subscription, ``token`` (its owner token, shown only then)."""
        sid = _sub_id(record)
        answer = self._request("PUT", f"/v1/subscriptions/{sid}", json=dict(record),
                               headers=self._headers()).json()
        if answer.get("token"):
            self.owner_tokens[sid] = answer["token"]
        return answer

    def unsubscribe(self, sub_id: int) -> dict:
        answer = self._request("DELETE", f"/v1/subscriptions/{int(sub_id)}",
                               headers=self._headers(int(sub_id))).json()
        self.owner_tokens.pop(int(sub_id), None)
        return answer

    def _post_ndjson(self, path: str, records: Iterable[Mapping[str, Any]], batch_size: int,
                     what: str) -> Iterator[dict]:
        """POST ``records`` to ``path`` as NDJSON, ``batch_size`` records a request, yielding each
        answer.  A refusal raises :class:`ServiceError` with ``line`` counted over the whole call
        and ``accepted`` the records of the batches before it (each batch is all or nothing)."""
        if batch_size < 1:
            raise _client_error("E023", what="batch_size", expected="an integer >= 1", value=batch_size)
        lines = (json.dumps(dict(record), allow_nan=False) for record in records)
        sent = 0
        while batch := list(islice(lines, batch_size)):
            body = ("\n".join(batch) + "\n").encode("utf-8")
            try:
                answer = self._request("POST", path, content=body,
                                       headers={**self._headers(), "Content-Type": NDJSON}).json()
            except ServiceError as err:
                if err.line is not None:
                    err.line += sent
                err.accepted = sent
                err.args = (f"{err} (the {sent} {what} before this batch were accepted)",)
                raise
            sent += len(batch)
            yield answer

    def subscribe_many(self, records: Iterable[Mapping[str, Any]], batch_size: int = 100_000) -> dict:
        """Create many subscriptions (each record with its ``id``; none may exist yet): one NDJSON
        ``POST /v1/subscriptions`` per ``batch_size`` records, each all or nothing; keeps the owner
        tokens.  Returns ``{"created", "position"}`` over every batch.  A refusal raises
        :class:`ServiceError` with ``line`` counted over the whole call and ``accepted`` the records
        created by the batches before it."""
        def checked() -> Iterator[Mapping[str, Any]]:
            for record in records:
                _sub_id(record)  # a record without an integer id is refused here, as the batch's first
                yield record

        created, position = 0, -1
        for answer in self._post_ndjson("/v1/subscriptions", checked(), batch_size, "subscriptions"):
            for sid, token in zip(answer["ids"], answer.get("tokens", [])):
                if token:
                    self.owner_tokens[int(sid)] = token
            created += int(answer["created"])
            position = int(answer["position"])
        if position < 0:
            position = int(self.health()["position"])
        return {"created": created, "position": position}

    def unsubscribe_many(self, sub_ids: Iterable[int]) -> dict:
        """Delete many subscriptions with one request (all or nothing: an unknown id deletes
        none); returns ``{"deleted", "position"}``."""
        ids = [int(i) for i in sub_ids]
        answer = self._request("DELETE", "/v1/subscriptions", json={"ids": ids}, headers=self._headers()).json()
        for sid in ids:
            self.owner_tokens.pop(sid, None)
        return answer

    def subscriptions(self, after: int | None = None, page_size: int = 1000) -> Iterator[dict]:
        """Every subscription record (as PUT), ascending id, above ``after``; one request per page."""
        while True:
            params: dict[str, Any] = {"limit": page_size}
            if after is not None:
                params["after"] = after
            page = self._request("GET", "/v1/subscriptions", params=params, headers=self._headers()).json()
            yield from page["subscriptions"]
            if page["next_after"] is None:
                return
            after = int(page["next_after"])

    def messages(self, last: int | None = None, ids: Iterable[int] | None = None) -> list[dict]:
        """The window's newest ``last`` message records, or those with the given ``ids``."""
        params: dict[str, Any] = {}
        if ids is not None:
            params["ids"] = ",".join(str(int(i)) for i in ids)
        elif last is not None:
            params["last"] = int(last)
        text = self._request("GET", "/v1/messages", params=params, headers=self._headers()).text
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def result(self, sub_id: int) -> dict:
        """``{"subscription": record, "result": results-file line}`` of one subscription."""
        return self._request("GET", f"/v1/subscriptions/{int(sub_id)}", headers=self._headers(int(sub_id))).json()

    def results(self, page_size: int = 10_000) -> Iterator[dict]:
        """Every subscription's results-file line, ascending id, one request per page of
        ``page_size`` (a page is read as the server stood then: pages taken while writes go on
        are each exact, not one snapshot)."""
        after: str | None = None
        while True:
            params: dict[str, Any] = {"limit": page_size}
            if after is not None:
                params["after"] = after
            resp = self._request("GET", "/v1/results", params=params, headers=self._headers())
            for line in resp.text.splitlines():
                if line.strip():
                    yield json.loads(line)
            after = resp.headers.get("X-Skype-Next-After")
            if not after:
                return

    def query(self, record: Mapping[str, Any]) -> Any:
        """A snapshot query (a ``{"op": "query"}`` record, ``op`` optional); its answer, as the
        ``answer`` of an answers-file line."""
        return self._request("POST", "/v1/query", json=dict(record), headers=self._headers()).json()

    def advance(self, t: float) -> dict:
        """Advance a time window's clock to ``t`` without a message."""
        return self._request("POST", "/v1/advance", json={"t": t}, headers=self._headers()).json()

    def publish(self, messages: Mapping[str, Any] | Iterable[Mapping[str, Any]], batch_size: int = 1000) -> int:
        """Publish message records in NDJSON batches of ``batch_size``; returns the position (the
        number of messages the server has accepted) after the last batch."""
        if isinstance(messages, Mapping):
            messages = [messages]
        position = -1
        for answer in self._post_ndjson("/v1/messages", messages, batch_size, "messages"):
            position = int(answer["position"])
        if position < 0:
            position = int(self.health()["position"])
        return position

    # ------------------------------------------------------------------ events
    def events(self, ids: int | Iterable[int], after: int | None = None, *, idle_timeout: float | None = None,
               reconnect_for: float = 60.0, transport: str = "auto") -> Iterator[dict]:
        """Event objects of the subscriptions ``ids``, from ``seq`` > ``after`` (``None``: from
        now on: after the seq that ``GET /v1/subscriptions/{first id}`` reports), resuming by
        itself after a disconnect (see the module docstring).  ``transport``: ``"sse"``,
        ``"websocket"``, or ``"auto"`` (SSE when one token may read every id).  Ends when no
        event came for ``idle_timeout`` seconds since the last event or (re)connection
        (``None``: never); raises E111 when the server cannot be reached again within
        ``reconnect_for`` seconds."""
        sub_ids = [int(ids)] if isinstance(ids, int) else [int(i) for i in ids]
        if not sub_ids:
            raise _client_error("E023", what="events ids", expected="at least one subscription id", value=ids)
        if transport not in ("auto", "sse", "websocket"):
            raise _client_error("E023", what="transport", expected='"auto", "sse" or "websocket"', value=transport)
        if transport == "auto":
            tokens = {self.owner_tokens.get(sid, self.token) for sid in sub_ids}
            transport = "sse" if len(tokens) == 1 else "websocket"
        seen: dict[int, int] = {}  # subscription id -> seq of the last event of it yielded
        watermark: int | None = None  # every event of the stream's subscriptions up to it was sent

        def resume_after(sid: int) -> int | None:
            marks = [m for m in (seen.get(sid, after), watermark) if m is not None]
            return max(marks) if marks else None

        if after is None:
            # "from now" as a seq (the server's last, which GET of a subscription tells), so that
            # a disconnect before the first event resumes from there and loses nothing
            now = self.result(sub_ids[0]).get("seq")
            after = int(now) if isinstance(now, int) else None
        last_event = time.monotonic()
        lost_since: float | None = None
        attempt = 0
        while True:
            starts = {sid: resume_after(sid) for sid in sub_ids}
            stream: Generator[dict | int | None, None, None]
            if transport == "sse":
                known = [m for m in starts.values() if m is not None]
                # one SSE stream is in seq order: every start is the same seq, or the first one's
                stream = self._sse(sub_ids, max(known) if known else None, idle_timeout)
            else:
                stream = self._websocket(sub_ids, starts, idle_timeout)
            try:
                for event in stream:
                    lost_since, attempt = None, 0
                    if event is None:  # (re)connected: the idle time counts from here
                        last_event = time.monotonic()
                        continue
                    if isinstance(event, int):  # a watermark
                        watermark = event if watermark is None else max(watermark, event)
                        continue
                    seq, sid = int(event["seq"]), int(event["sub"])
                    if transport == "sse":
                        watermark = seq if watermark is None else max(watermark, seq)
                    mark = seen.get(sid, after)
                    if mark is not None and seq <= mark:
                        continue  # already yielded before a reconnect
                    seen[sid] = seq
                    last_event = time.monotonic()
                    if event.get("removed") and event["sub"] in sub_ids:
                        sub_ids.remove(event["sub"])  # gone: a reconnect would be refused
                    yield event
                    if not sub_ids:
                        return
                # the server closed the stream (shutdown, slow consumer): resume
            except _Idle:
                if idle_timeout is not None and time.monotonic() - last_event >= idle_timeout:
                    return
            except _Lost as lost:
                now = time.monotonic()
                lost_since = lost_since if lost_since is not None else now
                if now - lost_since >= reconnect_for:
                    raise _client_error("E111", url=self.url, detail=lost.detail) from None
                time.sleep(_backoff(attempt, None, 1.0))
                attempt += 1
            finally:
                stream.close()

    def _sse(self, sub_ids: list[int], after: int | None,
             idle_timeout: float | None) -> Generator[dict | int | None, None, None]:
        """One SSE stream of ``sub_ids``: events, and the ``id:`` of keepalives as ints."""
        from httpx_sse import connect_sse

        params: list[tuple[str, str]] = [("after", str(after))] if after is not None else []
        if len(sub_ids) == 1:
            path = f"/v1/subscriptions/{sub_ids[0]}/events"
        else:
            path = "/v1/events"
            params += [("sub", str(sid)) for sid in sub_ids]
        headers = self._headers(sub_ids[0])
        if after is not None:
            headers["Last-Event-ID"] = str(after)
        timeout = httpx.Timeout(10.0, read=idle_timeout)
        try:
            with connect_sse(self._http, "GET", path, params=params, headers=headers, timeout=timeout) as source:
                resp = source.response
                if resp.status_code in RETRYABLE_STATUS:
                    raise _Lost(f"HTTP {resp.status_code}")
                if resp.status_code >= 400:
                    raise _refusal(resp, self.url)
                yield None
                for sse in source.iter_sse():
                    if sse.data:
                        yield _event(sse.data, self.url)
                    elif sse.id and sse.id.isdigit():
                        yield int(sse.id)
        except httpx.ReadTimeout:
            raise _Idle() from None
        except (httpx.TransportError, httpx_sse_error()) as err:
            raise _Lost(f"{type(err).__name__}: {err}") from None

    def _websocket(self, sub_ids: list[int], starts: Mapping[int, int | None],
                   idle_timeout: float | None) -> Generator[dict | int | None, None, None]:
        """One WebSocket following ``sub_ids``, each after its own start: one subscribe
        message per (token, start); events, and watermarks ``{"seq": n}`` as ints."""
        from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
        from websockets.sync.client import connect

        ws_url = "ws" + self.url[len("http"):] + "/v1/events"
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
        groups: dict[tuple[str | None, int | None], list[int]] = {}
        for sid in sub_ids:
            groups.setdefault((self.owner_tokens.get(sid, self.token), starts.get(sid)), []).append(sid)
        try:
            with connect(ws_url, additional_headers=headers, open_timeout=10, proxy=None, max_size=None) as ws:
                for (token, after), ids in groups.items():
                    hello: dict[str, Any] = {"subscribe": ids}
                    if after is not None:
                        hello["after"] = after
                    if token is not None and token != self.token:
                        hello["token"] = token
                    ws.send(json.dumps(hello))
                yield None
                while True:
                    try:
                        raw = ws.recv(timeout=idle_timeout)
                    except TimeoutError:
                        raise _Idle() from None
                    yield _event(raw, self.url)
        except InvalidStatus as err:
            status = err.response.status_code
            if status in RETRYABLE_STATUS:
                raise _Lost(f"HTTP {status}") from None
            body = bytes(err.response.body or b"")
            raise _refusal(httpx.Response(status, content=body), self.url) from None
        except (ConnectionClosed, InvalidHandshake, OSError) as err:
            raise _Lost(f"{type(err).__name__}: {err}") from None


class _Lost(Exception):
    def __init__(self, detail: str) -> None:
        self.detail = detail


class _Idle(Exception):
    pass


def httpx_sse_error() -> type[Exception]:
    from httpx_sse import SSEError

    return SSEError


def _event(raw: str | bytes, url: str) -> dict | int:
    """An event object, or a watermark (``{"seq": n}``) as the int n."""
    obj = json.loads(raw)
    if isinstance(obj, dict) and obj.keys() == {"seq"} and isinstance(obj["seq"], int):
        return obj["seq"]
    if isinstance(obj, dict) and "error" in obj and "seq" not in obj:
        err = obj["error"]
        if isinstance(err, dict) and err.get("code") == SLOW_CONSUMER:
            raise _Lost(str(err.get("message", "slow consumer")))
        if isinstance(err, dict) and err.get("code") is not None:
            raise ServiceError(str(err["code"]), str(err.get("message", "")), line=err.get("line"))
        raise _client_error("E113", url=url, detail=f"unexpected object {obj!r}")
    if not isinstance(obj, dict) or "seq" not in obj or "sub" not in obj:
        raise _client_error("E113", url=url, detail=f"not an event object: {str(raw)[:200]!r}")
    return obj


def _sub_id(record: Mapping[str, Any]) -> int:
    sid = record.get("id") if isinstance(record, Mapping) else None
    if isinstance(sid, bool) or not isinstance(sid, int):
        raise _client_error("E023", what="the subscription record's id", expected="an integer", value=sid)
    return sid


# --------------------------------------------------------------------------- folding events

_ENTRY_KEY = {"topk": "id", "knn": "id", "terms": "term"}
_ORDER = {"topk": ("score", True), "knn": ("distance", False), "terms": ("count", True)}
RESULT_FIELDS = ("topk", "matches", "terms")


def result_field(line: Mapping[str, Any]) -> str:
    """The field of a results-file line that holds its result (``topk``, ``matches``, ``terms``)."""
    return next(f for f in RESULT_FIELDS if f in line)


def apply_event(results: dict[int, list], event: Mapping[str, Any], kinds: Mapping[int, str] | None = None) -> None:
    """Fold one event object into ``results`` ({sub id: result entries, in ranking order}).

    A ``reset`` replaces the entries; ``removed`` drops the subscription; otherwise ``left``
    (ids, or terms) go, then ``entered`` come, and the entries are ranked again: topk by score
    descending (among equal scores the entry that entered last first: the newer message),
    knn by distance ascending, terms by count descending, range in entering order.  ``kinds``
    names the kind of a subscription that is not topk (a reset line carries no kind).
    """
    sid = int(event["sub"])
    kind = (kinds or {}).get(sid, "topk")
    if "reset" in event:
        line = event["reset"]
        results[sid] = list(line[result_field(line)])
        return
    if event.get("removed"):
        results.pop(sid, None)
        return
    key = _ENTRY_KEY.get(kind)
    gone = set(event.get("left", ()))
    entries = [e for e in results.get(sid, []) if (e[key] if key else e) not in gone]
    fresh = list(event.get("entered", ()))
    if kind in _ORDER:
        field, descending = _ORDER[kind]
        merged = list(reversed(fresh)) + entries  # sort is stable: the last to enter wins a tie
        merged.sort(key=lambda e: e[field], reverse=descending)
        results[sid] = merged
    else:
        results[sid] = entries + fresh
