"""Edge checks every request passes before any route sees it, as plain ASGI middleware:

* the query string must be valid UTF-8 once percent-decoded, without NUL: a naive app
  decodes ``%FF`` to U+FFFD and silently matches another topic;
* the body may not exceed ``max_body_bytes``, whether announced by Content-Length or not.

``RequestId`` gives every request an id (the client's ``X-Request-ID`` or a new one),
echoed in the response and recorded by the audit log.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Final
from urllib.parse import parse_qsl, unquote_to_bytes

import orjson
from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send


async def _refuse(
    send: Send, status: int, code: str, message: str, headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    body = orjson.dumps({"error": {"code": code, "message": message}})
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _query_problem(raw: bytes) -> tuple[str, str] | None:
    if not raw:
        return None
    for part in raw.split(b"&"):
        decoded = unquote_to_bytes(part.replace(b"+", b" "))
        try:
            decoded.decode("utf-8", errors="strict")
        except UnicodeDecodeError:
            return "invalid_utf8", "the URL is not valid UTF-8 once percent-decoded"
        if b"\x00" in decoded:
            return "nul_byte", "the URL contains a NUL character"
    return None


class _BodyTooLargeError(HTTPException):
    """Raised from ``receive`` while a route reads its body. An HTTPException, because
    FastAPI turns any other error raised while reading the body into a 400 "error parsing
    the body" (it re-raises HTTPExceptions); the app's handler maps 413 to ``body_too_large``."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the body limit is {limit} bytes")


class EdgeChecks:
    """Query-string and body-size checks (see the module docstring)."""

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        problem = _query_problem(scope.get("query_string", b"")) or _query_problem(
            scope.get("raw_path", b"")
        )
        if problem is not None:
            await _refuse(send, 400, *problem)
            return
        limit = self.max_body_bytes
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    too_large = int(value) > limit
                except ValueError:
                    too_large = False
                if too_large:
                    await _refuse(send, 413, "body_too_large", f"the body limit is {limit} bytes")
                    return
        received = 0
        started = False

        async def counted_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _BodyTooLargeError(limit)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, tracking_send)
        except _BodyTooLargeError:
            if not started:
                await _refuse(send, 413, "body_too_large", f"the body limit is {limit} bytes")


#: (method, path regex) -> the query parameters the operation declares.
#: (method, path regex, query parameters, those declared as lists) per operation.
_Declared = list[tuple[str, re.Pattern[str], frozenset[str], frozenset[str]]]


def _is_list(schema: dict[str, Any]) -> bool:
    """A parameter declared as an array (``?subscriber=a&subscriber=b``), also when
    optional (``anyOf`` with null)."""
    return schema.get("type") == "array" or any(
        option.get("type") == "array" for option in schema.get("anyOf", [])
    )


def _declared(document: dict[str, Any]) -> _Declared:
    """The operations that document a 400 (the API's own; not /healthz, /readyz,
    /metrics), each with the query parameters it declares."""
    declared: _Declared = []
    for path, operations in document["paths"].items():
        # A path parameter may hold '/' (a subscriber name): match it greedily.
        regex = re.compile("^" + re.sub(r"\\\{[^}]+\\\}", ".+", re.escape(path)) + "$")
        for method, operation in operations.items():
            if "400" in operation.get("responses", {}):
                query = [p for p in operation.get("parameters", []) if p["in"] == "query"]
                names = frozenset(p["name"] for p in query)
                lists = frozenset(p["name"] for p in query if _is_list(p.get("schema", {})))
                declared.append((method.upper(), regex, names, lists))
    return declared


class StrictQuery:
    """Refuse a query parameter the operation does not declare (``unknown_parameter``), or
    one given twice that is not declared as a list (``repeated_parameter``), instead of
    FastAPI's ignoring it or keeping the last: the OpenAPI document is the contract. Only
    requests with a query string pay (a path match against the document's templates); the
    match hot path has none."""

    def __init__(self, app: ASGIApp, document: Callable[[], dict[str, Any]]) -> None:
        self.app = app
        self.document = document
        self._declared: _Declared | None = None

    def _problem(self, scope: Scope) -> tuple[str, str] | None:
        if self._declared is None:
            self._declared = _declared(self.document())
        method, path = scope.get("method", ""), scope.get("path", "")
        found = next(
            (
                (names, lists)
                for m, regex, names, lists in self._declared
                if m == method and regex.match(path)
            ),
            None,
        )
        if found is None:
            return None
        allowed, lists = found
        seen: set[str] = set()
        query = scope["query_string"].decode("latin-1")
        for name, _ in parse_qsl(query, keep_blank_values=True):
            if name not in allowed:
                takes = ", ".join(sorted(allowed)) or "none"
                return "unknown_parameter", f"unknown query parameter {name!r}; it takes {takes}"
            if name in seen and name not in lists:
                return "repeated_parameter", f"query parameter {name!r} is given more than once"
            seen.add(name)
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("query_string"):
            problem = self._problem(scope)
            if problem is not None:
                await _refuse(send, 400, *problem)
                return
        await self.app(scope, receive, send)


class Metrics:
    """Request counts and latency per route template and status, in ``registry``."""

    def __init__(self, app: ASGIApp, registry: CollectorRegistry) -> None:
        self.app = app
        self.requests = Counter(
            "topicstore_http_requests",
            "HTTP requests",
            ["method", "route", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "topicstore_http_request_seconds",
            "HTTP request latency",
            ["method", "route"],
            registry=registry,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0),
        )
        # The labelled children per (method, route, status): ``labels()`` checks and locks
        # on every call (two calls were 2-3% of a match request's time under load). The
        # same children the registry holds, so the cache adds no series.
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def tracking_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        finally:
            route: Any = scope.get("route")
            template = getattr(route, "path", "unmatched")
            method = scope.get("method", "")
            key = (method, template, status)
            children = self._children.get(key)
            if children is None:
                children = self._children[key] = (
                    self.requests.labels(method, template, str(status)),
                    self.latency.labels(method, template),
                )
            children[0].inc()
            children[1].observe(time.perf_counter() - started)


#: An incoming X-Request-ID: 1 to 128 visible ASCII characters (a UUID, a W3C traceparent,
#: an AWS trace id all fit); anything else is refused rather than logged as given.
MAX_REQUEST_ID: Final = 128
_REQUEST_ID: Final = re.compile(rb"[\x21-\x7e]{1,%d}" % MAX_REQUEST_ID)
REQUEST_ID_HEADER: Final = b"x-request-id"


class RequestId:
    """Names every request: the client's ``X-Request-ID`` when it is within the bound, a
    new one (32 hex digits) when there is none. The id goes into ``scope["state"]``
    (``request.state.request_id``) and back in the response's ``X-Request-ID``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = [value for name, value in scope["headers"] if name == REQUEST_ID_HEADER]
        request_id = uuid.uuid4().hex.encode()
        echo = [(REQUEST_ID_HEADER, request_id)]
        if len(given) > 1 or (given and not _REQUEST_ID.fullmatch(given[0])):
            message = (
                f"X-Request-ID takes one value of 1 to {MAX_REQUEST_ID} visible ASCII characters"
            )
            await _refuse(send, 400, "invalid_request_id", message, echo)
            return
        if given:
            request_id = given[0]
            echo = [(REQUEST_ID_HEADER, request_id)]
        # A new dict: the server may share the one it put there between requests.
        scope["state"] = {**scope.get("state", {}), "request_id": request_id.decode("ascii")}

        async def echoing_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *echo]}
            await send(message)

        await self.app(scope, receive, echoing_send)
