"""The Python client of the topicstore service: ``Client`` (blocking) and ``AsyncClient``
(asyncio or trio), both on httpx, answering with the API's own models
(``topicstore.models``). A refusal raises the ``ApiError`` subclass of its status, with
the envelope's ``code``; a 429 or 503 with ``Retry-After`` is waited out first, as the
client's ``Retry`` allows. Loads httpx and pydantic only: neither FastAPI, Spark nor the
engines."""

from topicstore.client.aio import AsyncClient
from topicstore.client.calls import AuditFilters, Call, SelectionFilters, SubscriptionFilters
from topicstore.client.errors import (
    ApiError,
    BadRequestError,
    ConflictError,
    ForbiddenError,
    InvalidRequestError,
    NotFoundError,
    RateLimitedError,
    ServerError,
    TooLargeError,
    UnauthorizedError,
    UnavailableError,
)
from topicstore.client.retry import DEFAULT_RETRY, NO_RETRY, Retry
from topicstore.client.sync import Client

__all__ = [
    "DEFAULT_RETRY",
    "NO_RETRY",
    "ApiError",
    "AsyncClient",
    "AuditFilters",
    "BadRequestError",
    "Call",
    "Client",
    "ConflictError",
    "ForbiddenError",
    "InvalidRequestError",
    "NotFoundError",
    "RateLimitedError",
    "Retry",
    "SelectionFilters",
    "ServerError",
    "SubscriptionFilters",
    "TooLargeError",
    "UnauthorizedError",
    "UnavailableError",
]
