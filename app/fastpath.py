"""``POST /v1/match`` and ``POST /v1/match/batch`` without FastAPI's routing and
dependency solving.

Under load the match route's own work (match and answer) was 5% of the server's time;
FastAPI's dependency solving was 21-27% and routing through every route of the app another
8-15%. A batch's body went through ``json.loads`` and then pydantic in Python mode. This
ASGI app sits where the router sits, inside the whole middleware stack (request id, edge
checks, metrics, query check) and inside the exception handlers, and answers the requests
it recognizes by calling what the FastAPI routes call:

* the body: ``model_validate_json`` of the route's body model on the raw bytes (pydantic
  parses the JSON itself);
* the caller: ``app.dependencies.request_match_caller`` / ``request_batch_caller`` (the
  same bearer scheme, the same ``match_caller`` / ``batch_caller``: authentication, and for
  a single match its rate bucket);
* the answer: ``app.routers.match.match_answer`` / ``batch_answer``, which the routes'
  endpoints call too (a batch also gets the request's ``receive``, to stop when its client
  leaves).

It answers only a request it can answer exactly as the route would: ``Content-Type:
application/json`` (no parameters) and a body the model accepts. Anything else (another
content type, a body that is not JSON, not UTF-8, or does not fit the schema) goes to the
FastAPI route with the messages already received replayed, so every refusal of a body
comes from the one place that made it before, in the same order as before (the route reads
and decodes the body before it authenticates the caller). A refusal raised here (401, 403,
429, 400 from the matcher, 413, 503) propagates to the app's exception handlers like a
route's, and ``scope["route"]`` is the route's own, so the metrics label it by its path."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.requests import HTTPConnection, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.auth import Caller
from app.dependencies import request_batch_caller, request_match_caller
from app.routers import match
from app.services import Services
from topicstore.models import BatchIn, MatchIn

_JSON: Final = b"application/json"


@dataclass(frozen=True, slots=True)
class FastRoute:
    """What the fast path needs of one route: its body model, its caller and its answer
    (the same functions the route's endpoint uses)."""

    route: APIRoute
    model: type[BaseModel]
    caller: Callable[[HTTPConnection, Services], Awaitable[Caller]]
    answer: Callable[[Services, Caller, Any, Receive], Response | Awaitable[Response]]


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
    """See the module docstring. ``app`` is the router it stands in front of; ``routes``
    the POST routes it answers, by path."""

    def __init__(self, app: ASGIApp, services: Services, routes: dict[str, FastRoute]) -> None:
        self.app = app
        self.services = services
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        fast = self.routes.get(scope["path"]) if scope["type"] == "http" else None
        if fast is None or scope["method"] != "POST" or not _json_content(scope["headers"]):
            await self.app(scope, receive, send)
            return
        # What routing would have put there: the metrics label the request by its route.
        scope["route"] = fast.route
        scope["endpoint"] = fast.route.endpoint
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
            body = fast.model.model_validate_json(b"".join(chunks))
        except ValidationError:
            await self.app(scope, _replay(messages, receive), send)
            return
        caller = await fast.caller(Request(scope, receive, send), self.services)
        response = fast.answer(self.services, caller, body, receive)
        if inspect.isawaitable(response):
            response = await response
        await response(scope, receive, send)


def _route(endpoint: Callable[..., Any]) -> APIRoute:
    return next(
        r
        for r in match.router.routes
        if isinstance(r, APIRoute) and r.endpoint is endpoint and r.methods == {"POST"}
    )


def fast_routes() -> dict[str, FastRoute]:
    """The routes the fast path answers, by path."""
    routes = [
        FastRoute(
            _route(match.match),
            MatchIn,
            request_match_caller,
            lambda services, caller, body, _: match.match_answer(services, caller, body),
        ),
        FastRoute(_route(match.match_batch), BatchIn, request_batch_caller, match.batch_answer),
    ]
    return {fast.route.path: fast for fast in routes}


def install(app: FastAPI, services: Services) -> None:
    """Put the fast path in front of ``app``'s router (inside the middleware stack and the
    exception handlers, which wrap the router)."""
    # Starlette's Router calls ``middleware_stack`` (its own app, or the app wrapped by
    # router-level middleware); the app's middleware stack calls the router.
    stack = app.router.middleware_stack
    app.router.middleware_stack = MatchFastPath(stack, services, fast_routes())
