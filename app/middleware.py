"""Edge checks every request passes before any route sees it, as plain ASGI middleware:

* the query string must be valid UTF-8 once percent-decoded, without NUL: a naive app
  decodes ``%FF`` to U+FFFD and silently matches another topic;
* the body may not exceed ``max_body_bytes``, whether announced by Content-Length or not.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import unquote_to_bytes

import orjson
from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send


async def _refuse(send: Send, status: int, code: str, message: str) -> None:
    body = orjson.dumps({"error": {"code": code, "message": message}})
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
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
            self.requests.labels(method, template, str(status)).inc()
            self.latency.labels(method, template).observe(time.perf_counter() - started)
