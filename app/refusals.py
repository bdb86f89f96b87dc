"""The service's own refusals: one class per kind, each with its HTTP status and a
machine-readable ``code``. Plain exceptions (no FastAPI), so the command line's direct mode
raises and reports the very same ones; ``app.errors`` turns them into the JSON envelope."""

from __future__ import annotations

from typing import Any, ClassVar


class ServiceError(Exception):
    """A request the service refuses; ``status`` and ``code`` name the rule."""

    status: ClassVar[int] = 400
    code: str = "refused"

    def __init__(self, message: str, *, code: str | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.extra = extra


class NotApplicableError(ServiceError):
    """A field that the subscription's kind does not use (``pattern`` of a headers
    subscription, ``criteria`` of a topic one): refused rather than dropped silently. The
    code names the field: ``pattern_not_applicable``, ``criteria_not_applicable``, ..."""

    code = "not_applicable"


class InvalidRequestError(ServiceError):
    """Input that does not fit the request schema (a bulk item, checked one by one)."""

    status = 422
    code = "invalid_request"


class UnauthorizedError(ServiceError):
    status = 401
    code = "unauthorized"


class WrongTenantError(ServiceError):
    status = 403
    code = "wrong_tenant"


class OperatorOnlyError(ServiceError):
    status = 403
    code = "operator_only"


class QuotaExceededError(ServiceError):
    status = 403
    code = "quota_exceeded"


class NotFoundError(ServiceError):
    status = 404
    code = "not_found"


class ExpiredError(ServiceError):
    """A change to a subscription whose expiry has passed: it no longer matches, and waits
    for the sweep (``store.expiry``)."""

    status = 409
    code = "subscription_expired"


class NotConfiguredError(ServiceError):
    status = 404
    code = "not_configured"


class BatchTooLargeError(ServiceError):
    status = 413
    code = "batch_too_large"


class BatchAnswerTooLargeError(ServiceError):
    """A batch that would take more matches than ``max_batch_matches`` (the ids answered
    plus the candidates the groups' choices examined)."""

    status = 413
    code = "batch_answer_too_large"


class NotReadyError(ServiceError):
    status = 503
    code = "not_ready"


class RateLimitedError(ServiceError):
    """Over a tenant's rate; ``retry_after`` (seconds) becomes the Retry-After header."""

    status = 429
    code = "rate_limited"


class InvalidDialectError(ServiceError):
    code = "invalid_dialect"


class TooManyPatternsError(ServiceError):
    """A redundancy check over more patterns than its documented bound."""

    code = "too_many_patterns"
