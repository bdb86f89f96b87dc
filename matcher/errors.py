"""Exceptions of the matcher package.

Every error carries a machine-readable ``code`` and the ``rule`` it enforces, so that the
API layer can map it to a 4xx answer without parsing messages.
"""

from __future__ import annotations


class MatcherError(Exception):
    """Base class: ``code`` names the rule for machines, the message explains it to people."""

    code: str = "matcher_error"

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class InvalidTopicError(MatcherError, ValueError):
    """A topic (routing key) breaks the dialect's grammar or a configured limit."""


class InvalidPatternError(MatcherError, ValueError):
    """A subscription pattern breaks the dialect's grammar or a configured limit."""


class InvalidSubscriptionIdError(MatcherError, ValueError):
    """A subscription id outside ``0 <= id < 2**32``."""


class SubscriptionConflictError(MatcherError):
    """The id is already subscribed with a different pattern."""


class CapacityError(MatcherError):
    """A configured capacity (subscription count) would be exceeded."""
