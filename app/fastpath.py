"""``POST /v1/match`` without FastAPI's routing and dependency solving.

Under load the match route's own work (match and answer) was 5% of the server's time;
FastAPI's dependency solving was 21-27% and routing through every route of the app another
8-15%. This ASGI app sits where the router sits, inside the whole middleware stack (request
id, edge checks, metrics, query check) and inside the exception handlers, and answers the
one request it recognizes by calling what the FastAPI route calls:

* the body: ``MatchIn.model_validate_json`` on the raw bytes;
* the caller: ``app.dependencies.request_match_caller`` (the same bearer scheme, the same
  ``match_caller``: authentication, then the match rate bucket);
* the answer: ``app.routers.match.match_answer``, which the route's endpoint calls too.

It answers only a request it can answer exactly as the route would: ``Content-Type:
application/json`` (no parameters) and a body ``MatchIn`` accepts. Anything else (another
content type, a body that is not JSON, not UTF-8, or does not fit the schema) goes to the
FastAPI route with the messages already received replayed, so every refusal of a body
comes from the one place that made it before, in the same order as before (the route reads
and decodes the body before it authenticates the caller). A refusal raised here (401, 403,
429, 400 from the matcher, 503) propagates to the app's exception handlers like a route's,
and ``scope["route"]`` is the route's own, so the metrics label it ``/v1/match``."""

from __future__ import annotations

from typing import Final

from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.dependencies import request_match_caller
from app.routers import match
from app.schemas import MatchIn
from app.services import Services

PATH: Final = "/v1/match"
_JSON: Final = b"application/json"


def _json_content(headers: list[tuple[bytes, bytes]]) -> bool:
    """The first Content-Type is exactly ``application/json`` (the one FastAPI reads, too)."""
    for name, value in headers:
        if name == b"content-type":
            return value.lower() == _JSON
    return False


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """``receive`` that gives ``messages`` first, then what ``receive`` gives."""
    pending = iter(messages)

    async def replayed() -> Message:
        return next(pending, None) or await receive()

    return replayed


class MatchFastPath:
    """See the module docstring. ``app`` is the router it stands in front of."""

    def __init__(self, app: ASGIApp, services: Services, route: APIRoute) -> None:
        self.app = app
        self.services = services
        self.route = route
        self.endpoint = route.endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["path"] != PATH
            or scope["method"] != "POST"
            or not _json_content(scope["headers"])
        ):
            await self.app(scope, receive, send)
            return
        # What routing would have put there: the metrics label the request by its route.
        scope["route"] = self.route
        scope["endpoint"] = self.endpoint
        scope["path_params"] = {}
        messages: list[Message] = []
        chunks: list[bytes] = []
        while True:
            message = await receive()  # a body over the limit raises here, as in the route
            messages.append(message)
            if message["type"] != "http.request":  # the client left: the route says how
                await self.app(scope, _replay(messages, receive), send)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        try:
            body = MatchIn.model_validate_json(b"".join(chunks))
        except ValidationError:
            await self.app(scope, _replay(messages, receive), send)
            return
        caller = await request_match_caller(Request(scope, receive, send), self.services)
        response = match.match_answer(self.services, caller, body)
        await response(scope, receive, send)


def install(app: FastAPI, services: Services) -> None:
    """Put the fast path in front of ``app``'s router (inside the middleware stack and the
    exception handlers, which wrap the router)."""
    route = next(
        r
        for r in match.router.routes
        if isinstance(r, APIRoute) and r.endpoint is match.match and r.methods == {"POST"}
    )
    assert route.path == PATH, route.path
    # Starlette's Router calls ``middleware_stack`` (its own app, or the app wrapped by
    # router-level middleware); the app's middleware stack calls the router.
    app.router.middleware_stack = MatchFastPath(app.router.middleware_stack, services, route)
