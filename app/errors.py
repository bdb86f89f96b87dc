"""HTTP errors: one envelope, ``{"error": {"code", "message", ...}}``, for every refusal.

Only this module maps package errors (each with a machine-readable ``code``) to HTTP status
codes. Nothing a client sends should produce a 500: handlers below turn every known failure
into a 4xx naming the rule, and the service keeps serving.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from app.refusals import ServiceError
from matcher import CapacityError, MatcherError, SubscriptionConflictError
from matcher.budget import CLIENT_GONE, BudgetExceededError, StoppedError
from store import UNAVAILABLE_ERRORS, DatabaseLockedError, StoreError
from store.groups import GroupConflictError
from topicstore.models import ErrorOut

log = logging.getLogger(__name__)

_MEANINGS = {
    400: "Invalid input: the code names the broken rule (URL, body, topic or pattern).",
    401: "No bearer token, or an unknown one.",
    403: "The token may not act on that tenant, or the tenant's quota is full.",
    404: "No such subscription (for this tenant).",
    409: "The write would split a group: another policy than the group's "
    "(``group_policy_conflict``), or the pattern held in another group "
    "(``subscription_in_other_group``).",
    413: "The body or the batch is over its limit.",
    422: "The request does not fit the schema, or its work is over its budget "
    "(``explain_budget_exceeded``, ``overlap_budget_exceeded``, ``redundancy_budget_exceeded``: "
    "the message says how to ask for less).",
    429: "Over the tenant's rate (``rate_limited``): wait ``Retry-After`` seconds, then retry.",
    503: "The routing table is still being built, or the store is not answering "
    "(``store_unavailable``, with Retry-After): retry later. Also a search or batch that "
    "worked past ``TOPICSTORE_WORK_DEADLINE`` (``deadline_exceeded``), or one the stopping "
    "server stopped (``shutting_down``).",
}


def _is_json(content_type: str | None) -> bool:
    """Whether a Content-Type names JSON (``application/json``, or a ``+json`` type)."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


#: What a 429 looks like, for the documentation.
_RATE_LIMITED: Final[dict[str, Any]] = {
    "headers": {
        "Retry-After": {
            "description": "Whole seconds until the request would fit the rate.",
            "schema": {"type": "integer", "minimum": 1},
        }
    },
    "content": {
        "application/json": {
            "example": {
                "error": {
                    "code": "rate_limited",
                    "message": "over the admin rate of 50/s (burst 100); retry in 1 s",
                    "retry_after": 1,
                }
            }
        }
    },
}


def documented(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for the refusals a route can give, all in the one envelope."""
    return {
        status: {
            "model": ErrorOut,
            "description": _MEANINGS[status],
            **(_RATE_LIMITED if status == 429 else {}),
        }
        for status in statuses
    }


#: Seconds a client should wait before retrying a write while the store is unavailable.
RETRY_AFTER_S: Final = 5


def envelope(
    status: int,
    code: str,
    message: str,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    headers = dict(headers or {})
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    if "retry_after" in extra:
        headers["Retry-After"] = str(extra["retry_after"])
    return JSONResponse(
        {"error": {"code": code, "message": message, **extra}}, status, headers=headers or None
    )


#: A request whose client left: nobody reads the answer (nginx's code for it).
CLIENT_CLOSED: Final = 499


def _status_for(error: MatcherError | StoreError) -> int:
    if isinstance(error, DatabaseLockedError):
        return 503
    if isinstance(error, BudgetExceededError):
        return 422
    if isinstance(error, StoppedError):
        return CLIENT_CLOSED if error.code == CLIENT_GONE else 503
    if isinstance(error, SubscriptionConflictError | GroupConflictError):
        return 409
    if isinstance(error, CapacityError):
        return 403
    return 400


_METHODS: Final = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def _allow(request: Request) -> dict[str, str]:
    """``Allow`` naming every method the path serves, asked of the router method by method
    (Starlette names only the first route's: ``PUT /v1/match`` said ``POST``, not ``GET``)."""
    routes = request.app.router.routes
    allowed = [
        method
        for method in _METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] is Match.FULL for route in routes
        )
    ]
    return {"Allow": ", ".join(allowed)}


def install(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def _refusal(_: Request, e: ServiceError) -> JSONResponse:
        return envelope(e.status, e.code, e.message, **e.extra)

    @app.exception_handler(MatcherError)
    async def _matcher(_: Request, e: MatcherError) -> JSONResponse:
        if isinstance(e, BudgetExceededError):
            return envelope(422, e.code, e.message, budget=e.budget, limit=e.limit)
        return envelope(_status_for(e), e.code, e.message)

    @app.exception_handler(StoreError)
    async def _store(_: Request, e: StoreError) -> JSONResponse:
        return envelope(_status_for(e), e.code, e.message)

    async def _unavailable(_: Request, e: Exception) -> JSONResponse:
        log.warning("the store is not answering: %s", str(e).splitlines()[0] if str(e) else e)
        return envelope(
            503,
            "store_unavailable",
            "the store is not answering (matches are still served from memory); retry later",
            retry_after=RETRY_AFTER_S,
        )

    for kind in UNAVAILABLE_ERRORS:
        app.add_exception_handler(kind, _unavailable)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, e: RequestValidationError) -> JSONResponse:
        problems = [
            {"loc": [str(part) for part in err.get("loc", ())], "msg": err.get("msg", "")}
            for err in e.errors()
        ]
        first = problems[0] if problems else {"loc": [], "msg": "invalid request"}
        where = ".".join(first["loc"])
        message = f"{where}: {first['msg']}" if where else str(first["msg"])
        if first["loc"][:1] == ["body"] and not _is_json(request.headers.get("content-type")):
            # Without the header the body is not read as JSON at all, and pydantic's own
            # words ("a valid dictionary or object") do not say what to change.
            given = request.headers.get("content-type") or "none"
            message = (
                "send the body as JSON with the header Content-Type: application/json "
                f"(this request's content type: {given})"
            )
        return envelope(422, "invalid_request", message, details=problems)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, e: StarletteHTTPException) -> JSONResponse:
        # FastAPI reports a body json.loads could not read as a generic 400 "error parsing
        # the body", raised from the parser's error: name the rule instead.
        cause = e.__cause__
        if isinstance(cause, UnicodeDecodeError):
            return envelope(400, "invalid_utf8", "the request body is not valid UTF-8")
        if isinstance(cause, RecursionError):
            return envelope(400, "json_too_deep", "the JSON body nests too deeply")
        if isinstance(cause, ValueError):  # e.g. an integer of more than 4300 digits
            return envelope(400, "invalid_json", f"the JSON body cannot be read: {cause}")
        codes = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}
        # The exception's headers go out too: a 405 says which methods are (``Allow``).
        return envelope(
            e.status_code,
            codes.get(e.status_code, "http_error"),
            str(e.detail),
            headers=_allow(request) if e.status_code == 405 else dict(e.headers or {}),
        )

    @app.exception_handler(Exception)
    async def _bug(_: Request, e: Exception) -> JSONResponse:
        # A bug: Starlette logs the traceback after this answer; the client gets the
        # envelope rather than a plain-text "Internal Server Error".
        return envelope(500, "internal_error", "the service failed on this request (a bug)")
