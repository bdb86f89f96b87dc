"""Expiry's rules: when a subscription stops matching, given as an instant or a TTL.

A subscription may carry ``expires_at``, the instant (UTC, microseconds) at which it stops
matching on every replica (the routing table filters it from that instant:
``loader.expiry``). The store keeps the instant, never the TTL: a TTL is turned into one
at the write, so every replica, a restart and the sweep (``SubscriptionRepository.
remove_expired``) read the same instant. An expired row stays stored until a sweep
deletes it, but it neither matches nor is loaded at startup.

Bounds: an instant after the write's own clock (an instant already past is refused with
``expiry_in_past``: it would be created expired) and at most ``MAX_EXPIRY`` (ten years)
after it (``expiry_too_far``); a TTL of 1 to ``MAX_TTL_SECONDS`` seconds; not both
(``expiry_conflict``). The application checks these with its clock (``expiry_at``); the
store takes what it is given.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

from store.errors import InvalidSubscriptionError

#: The furthest an expiry may lie after its write: ten years (3,653 days).
MAX_EXPIRY: Final = timedelta(days=3653)
MAX_TTL_SECONDS: Final = int(MAX_EXPIRY.total_seconds())


def expiry_at(expires_at: datetime | None, ttl: int | None, now: datetime) -> datetime | None:
    """The instant to store for a write at ``now`` (aware) that gave ``expires_at`` (aware)
    or ``ttl`` seconds (or neither: None, never expires); ``InvalidSubscriptionError``
    naming the broken bound otherwise."""
    if expires_at is not None and ttl is not None:
        raise InvalidSubscriptionError(
            "expiry_conflict", "give expires_at or ttl, not both (ttl is turned into expires_at)"
        )
    if ttl is not None:
        if type(ttl) is not int or not 1 <= ttl <= MAX_TTL_SECONDS:
            raise InvalidSubscriptionError(
                "invalid_ttl", f"ttl is whole seconds from 1 to {MAX_TTL_SECONDS:,} (10 years)"
            )
        return now.astimezone(UTC) + timedelta(seconds=ttl)
    if expires_at is None:
        return None
    if expires_at.tzinfo is None:
        raise InvalidSubscriptionError(
            "expiry_without_offset", "expires_at needs an offset (e.g. 2026-11-24T00:00:00Z)"
        )
    instant = expires_at.astimezone(UTC)
    if instant <= now:
        raise InvalidSubscriptionError(
            "expiry_in_past",
            f"expires_at {instant.isoformat()} is not after now "
            f"({now.astimezone(UTC).isoformat()})",
        )
    if instant - now > MAX_EXPIRY:
        raise InvalidSubscriptionError(
            "expiry_too_far", f"expires_at may lie at most {MAX_EXPIRY.days} days (10 years) ahead"
        )
    return instant


def expired(expires_at: datetime | None, now: datetime) -> bool:
    """Whether a subscription with ``expires_at`` no longer matches at ``now``: the
    instant itself is already past (a match at exactly ``expires_at`` excludes it)."""
    return expires_at is not None and expires_at <= now
