"""The hot routes without FastAPI's routing and dependency solving: ``POST /v1/match``,
``POST /v1/match/batch``, and the single writes ``POST /v1/subscriptions`` and
``DELETE /v1/subscriptions/{id}``.

Under load the match route's own work (match and answer) was 5% of the server's time;
FastAPI's dependency solving was 21-27% and routing through every route of the app another
8-15%; a single write spent more than half of its CPU in that stack. This ASGI app sits
where the router sits, inside the whole middleware stack (request id, edge checks, metrics,
query check) and inside the exception handlers, and answers the requests it recognizes by
calling what the FastAPI routes call:

* the body: for a match, ``model_validate_json`` of the route's body model on the raw
  bytes (pydantic parses the JSON itself); for a write, ``json.loads`` and the model's
  ``model_validate``, as FastAPI reads it (a write's body holds labels of any JSON, where
  the two parsers could differ);
* the path: a subscription id written as the route reads it (decimal digits, no leading
  zero, below 2**32);
* the caller: ``app.dependencies.request_match_caller`` / ``request_batch_caller`` /
  ``request_admin_caller`` (the same bearer scheme, the same ``match_caller`` /
  ``batch_caller`` / ``admin_caller``: authentication, the rate bucket, the origin the
  audit log records);
* the answer: ``app.routers.match.match_answer`` / ``batch_answer`` and
  ``app.routers.subscriptions.create_answer`` / ``delete_answer``, which the routes'
  endpoints call too (a batch also gets the request's ``receive``, to stop when its client
  leaves); a created row is serialized by FastAPI's ``serialize_response`` with the route's
  response model.

It answers only a request it can answer exactly as the route would: a body route needs
``Content-Type: application/json`` (no parameters) and a body the model accepts. Anything
else (another content type, a body that is not JSON, not UTF-8, or does not fit the schema,
an id written otherwise) goes to the FastAPI route with the messages already received
replayed, so every refusal of a body comes from the one place that made it before, in the
same order as before (the route reads and decodes the body before it authenticates the
caller). A refusal raised here (401, 403, 404, 409, 429, 400 from the matcher or the store,
413, 503) propagates to the app's exception handlers like a route's, and ``scope["route"]``
is the route's own, so the metrics label it by its path."""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from fastapi import FastAPI
from fastapi.routing import APIRoute, serialize_response
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.auth import Caller
from app.dependencies import request_admin_caller, request_batch_caller, request_match_caller
from app.routers import match, subscriptions
from app.services import Services
from topicstore.models import BatchIn, MatchIn, SubscriptionIn

_JSON: Final = b"application/json"
#: Ids the route's ``SubId`` accepts are below this.
_ID_LIMIT: Final = 2**32
#: What a body route's body becomes, or ``ValueError`` (a ``ValidationError`` too) or
#: ``RecursionError`` when the route is to say what is wrong with it.
Read = Callable[[bytes], Any]


@dataclass(frozen=True, slots=True)
class FastRoute:
    """What the fast path needs of one route: how it reads its body (``read``, None for a
    route without one: its value is then the path's id), its caller and its answer (the
    same functions the route's endpoint uses)."""

    route: APIRoute
    read: Read | None
    caller: Callable[[Request, Services], Awaitable[Caller]]
    answer: Callable[[Services, Caller, Any, Receive], Response | Awaitable[Response]]


def _json_content(headers: list[tuple[bytes, bytes]]) -> bool:
    """The first Content-Type is exactly ``application/json`` (the one FastAPI reads, too)."""
    for name, value in headers:
        if name == b"content-type":
            return value.lower() == _JSON
    return False


def _id(segment: str) -> int | None:
    """The id a path segment names when it is written as ``str(id)`` (no sign, no leading
    zero, no spaces) within the route's range; else None (the route decides)."""
    if not (segment.isascii() and segment.isdigit()) or (segment[0] == "0" and segment != "0"):
        return None
    value = int(segment)
    return value if value < _ID_LIMIT else None


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """``receive`` that gives ``messages`` first, then what ``receive`` gives."""
    pending = iter(messages)

    async def replayed() -> Message:
        return next(pending, None) or await receive()

    return replayed


class FastPath:
    """See the module docstring. ``app`` is the router it stands in front of; ``routes``
    the routes it answers by (method, path), ``by_id`` those by (method, path prefix) whose
    rest of the path is an id."""

    def __init__(
        self,
        app: ASGIApp,
        services: Services,
        routes: dict[tuple[str, str], FastRoute],
        by_id: dict[tuple[str, str], FastRoute],
    ) -> None:
        self.app = app
        self.services = services
        self.routes = routes
        self.by_id = by_id

    def _find(self, scope: Scope) -> tuple[FastRoute, Any] | None:
        """The route of this request and, for an id route, its id."""
        method, path = scope["method"], scope["path"]
        fast = self.routes.get((method, path))
        if fast is not None:
            return fast, None
        head, slash, segment = path.rpartition("/")
        fast = self.by_id.get((method, head + slash)) if segment else None
        if fast is None:
            return None
        value = _id(segment)
        return None if value is None else (fast, value)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = self._find(scope) if scope["type"] == "http" else None
        if found is None:
            await self.app(scope, receive, send)
            return
        fast, value = found
        if fast.read is not None and not _json_content(scope["headers"]):
            await self.app(scope, receive, send)
            return
        # What routing would have put there: the metrics label the request by its route.
        scope["route"] = fast.route
        scope["endpoint"] = fast.route.endpoint
        scope["path_params"] = (
            {} if fast.read is not None else dict.fromkeys(fast.route.param_convertors, str(value))
        )
        if fast.read is not None:
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
                value = fast.read(b"".join(chunks))
            except (ValueError, RecursionError):
                await self.app(scope, _replay(messages, receive), send)
                return
        caller = await fast.caller(Request(scope, receive, send), self.services)
        response = fast.answer(self.services, caller, value, receive)
        if inspect.isawaitable(response):
            response = await response
        await response(scope, receive, send)


def _route(router: Any, endpoint: Callable[..., Any], method: str) -> APIRoute:
    return next(
        r
        for r in router.routes
        if isinstance(r, APIRoute) and r.endpoint is endpoint and r.methods == {method}
    )


def _read_write(raw: bytes) -> SubscriptionIn:
    """A write's body as FastAPI reads it: ``json.loads`` of the bytes, then the model."""
    return SubscriptionIn.model_validate(json.loads(raw))


def _create(route: APIRoute) -> Callable[[Services, Caller, Any, Receive], Awaitable[Response]]:
    """``POST /v1/subscriptions``'s answer: ``create_answer``, its row serialized as the
    route serializes it."""

    async def answer(services: Services, caller: Caller, item: Any, _: Receive) -> Response:
        row, status = await subscriptions.create_answer(services, caller, item)
        content = await serialize_response(
            field=route.response_field,
            response_content=row,
            include=route.response_model_include,
            exclude=route.response_model_exclude,
            by_alias=route.response_model_by_alias,
            exclude_unset=route.response_model_exclude_unset,
            exclude_defaults=route.response_model_exclude_defaults,
            exclude_none=route.response_model_exclude_none,
            dump_json=True,
        )
        return Response(content, status_code=status, media_type="application/json")

    return answer


def _delete(services: Services, caller: Caller, sub_id: Any, _: Receive) -> Awaitable[Response]:
    """``DELETE /v1/subscriptions/{id}``'s answer."""
    return subscriptions.delete_answer(services, caller, sub_id)


def fast_routes() -> tuple[dict[tuple[str, str], FastRoute], dict[tuple[str, str], FastRoute]]:
    """The routes the fast path answers: by (method, path), and by (method, path prefix)
    of an id route."""
    create = _route(subscriptions.router, subscriptions.create_subscription, "POST")
    delete = _route(subscriptions.router, subscriptions.delete_subscription, "DELETE")
    exact = [
        FastRoute(
            _route(match.router, match.match, "POST"),
            MatchIn.model_validate_json,
            request_match_caller,
            lambda services, caller, body, _: match.match_answer(services, caller, body),
        ),
        FastRoute(
            _route(match.router, match.match_batch, "POST"),
            BatchIn.model_validate_json,
            request_batch_caller,
            match.batch_answer,
        ),
        FastRoute(create, _read_write, request_admin_caller, _create(create)),
    ]
    prefix = delete.path[: delete.path.rindex("/") + 1]
    return (
        {("POST", fast.route.path): fast for fast in exact},
        {("DELETE", prefix): FastRoute(delete, None, request_admin_caller, _delete)},
    )


def install(app: FastAPI, services: Services) -> None:
    """Put the fast path in front of ``app``'s router (inside the middleware stack and the
    exception handlers, which wrap the router)."""
    # Starlette's Router calls ``middleware_stack`` (its own app, or the app wrapped by
    # router-level middleware); the app's middleware stack calls the router.
    stack = app.router.middleware_stack
    app.router.middleware_stack = FastPath(stack, services, *fast_routes())
