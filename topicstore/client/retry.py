"""When the client sends a refused request again: the service says how long to wait
(``Retry-After``) when it is over a tenant's rate (429) or briefly unavailable (503), and
nothing was done by the refused request (the rate is checked before the route runs; a
store that does not answer stored nothing), so waiting that long and sending it again is
safe. The waiting is bounded twice: in requests per call and in seconds per wait."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Final

#: The statuses whose Retry-After the client honours.
RETRIED: Final = frozenset({429, 503})


@dataclass(frozen=True, slots=True)
class Retry:
    """``attempts``: requests sent at most for one call (1: never again); ``max_wait``: the
    longest Retry-After waited out, in seconds; a longer one is not shortened (the request
    would only be refused again) but raised at once, with its ``retry_after``;
    ``statuses``: which refusals are waited out (of 429 and 503). A refusal without
    Retry-After is raised at once."""

    attempts: int = 5
    max_wait: float = 60.0
    statuses: frozenset[int] = RETRIED

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, not {self.attempts}")
        if self.max_wait < 0:
            raise ValueError(f"max_wait must not be negative, not {self.max_wait}")
        if not self.statuses <= RETRIED:
            raise ValueError(f"only {sorted(RETRIED)} are retried, not {sorted(self.statuses)}")

    def wait(self, status: int, retry_after: float | None, attempt: int) -> float | None:
        """Seconds to wait before sending again the request that got ``status`` at its
        ``attempt``-th sending (from 1), or None: raise the refusal."""
        if status not in self.statuses or attempt >= self.attempts or retry_after is None:
            return None
        return retry_after if retry_after <= self.max_wait else None


#: The clients' default: up to 5 requests per call, waits of at most a minute.
DEFAULT_RETRY: Final = Retry()
#: Never send a request twice.
NO_RETRY: Final = Retry(attempts=1)


def retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks for (RFC 9110: whole seconds, or an HTTP date,
    counted from ``now``); None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
