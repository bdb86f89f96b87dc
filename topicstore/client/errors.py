"""The service's refusals as exceptions: one class per HTTP status, each carrying the
envelope's ``code`` (the rule: ``nul_byte``, ``quota_exceeded``, ``rate_limited``, ...) and
``message``, so a caller catches the kind it handles and reads the rule from ``code``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from pydantic import ValidationError

from topicstore.models import ErrorOut, Problem

#: The longest part of a body that is not the envelope (a proxy's page) kept as a message.
_MESSAGE_CHARS: Final = 200


class ApiError(Exception):
    """A request the service refused. ``status``: the HTTP status; ``code``: the rule, as
    the service names it (``http_error`` when the answer held no envelope, as from a
    proxy); ``retry_after``: the seconds the service asked to wait (429, 503), else None;
    ``details``: every problem of a 422; ``request_id``: the answer's ``X-Request-ID``,
    which the service's log and audit log record."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        retry_after: float | None = None,
        details: list[Problem] | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after
        self.details = details
        self.request_id = request_id


class BadRequestError(ApiError):
    """400: the input breaks a rule (a topic, pattern, name, URL or body)."""


class UnauthorizedError(ApiError):
    """401: no token, or one the service does not know."""


class ForbiddenError(ApiError):
    """403: the token may not act on that tenant, the tenant's quota is full, or the
    engine has no room."""


class NotFoundError(ApiError):
    """404: no such subscription (for this tenant), route or configured directory."""


class ConflictError(ApiError):
    """409: the write conflicts with a stored subscription or would split a group."""


class TooLargeError(ApiError):
    """413: the body, the batch or the batch's answer is over its limit."""


class InvalidRequestError(ApiError):
    """422: the request does not fit the schema (``details`` lists every problem)."""


class RateLimitedError(ApiError):
    """429: over the tenant's rate (raised once the client's retry policy gives up)."""


class UnavailableError(ApiError):
    """503: the routing table is being built, the store is not answering, or the
    connection cap is reached (raised once the client's retry policy gives up)."""


class ServerError(ApiError):
    """500 and the other 5xx but 503: a bug in the service, or a proxy's failure."""


_BY_STATUS: Final[dict[int, type[ApiError]]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    413: TooLargeError,
    422: InvalidRequestError,
    429: RateLimitedError,
    503: UnavailableError,
}


def error_for(
    status: int, body: bytes, headers: Mapping[str, str], retry_after: float | None
) -> ApiError:
    """The exception for a refusal: ``body`` read as the error envelope (``ErrorOut``), or,
    when it is not one, its text as the message under the code ``http_error``."""
    kind = _BY_STATUS.get(status, ServerError if status >= 500 else ApiError)
    request_id = headers.get("x-request-id")
    try:
        error = ErrorOut.model_validate_json(body).error
    except ValidationError:
        text = body.decode("utf-8", "replace").strip()[:_MESSAGE_CHARS]
        message = text or f"HTTP {status}"
        return kind(status, "http_error", message, retry_after=retry_after, request_id=request_id)
    if error.retry_after is not None and retry_after is None:
        retry_after = float(error.retry_after)
    return kind(
        status,
        error.code,
        error.message,
        retry_after=retry_after,
        details=error.details,
        request_id=request_id,
    )
