"""A piece of work's budget: the steps it may take, counted inside its loops, and a stop
another thread may pull (the service pulls it when the client leaves, when the server
stops, or past a wall-clock deadline).

The searches that a single request can make expensive (``explain``, ``overlap.search``,
``overlap.redundant``) take a ``Budget`` and call ``spend`` as they go, so they end at a
count fixed before they start: the same request on the same data stops at the same step
however loaded the machine is, and its refusal names the budget. A stop is seen at the next
``spend`` or ``check``: a few microseconds of work later.

One budget belongs to one piece of work (one thread spends it); ``stop`` may come from any
thread (a plain attribute write, read at the next step).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

from matcher.errors import MatcherError

#: Steps between two readings of the clock when a deadline is set (a step is well under a
#: microsecond to a few microseconds, so the deadline is seen within a few milliseconds).
CLOCK_EVERY: Final = 1_024

#: Why a budget was stopped from outside (the ``StoppedError``'s code).
CLIENT_GONE: Final = "client_gone"
DEADLINE: Final = "deadline_exceeded"
SHUTTING_DOWN: Final = "shutting_down"


class BudgetExceededError(MatcherError):
    """The work needed more steps than its budget allows; ``code`` is
    ``<budget>_exceeded`` and the message says how to narrow the request."""

    def __init__(self, budget: Budget, hint: str | None = None) -> None:
        hint = hint or budget.hint
        hint = f"; {hint}" if hint else ""
        super().__init__(
            f"{budget.name}_exceeded",
            f"this needs more than {budget.limit:,} steps (the {budget.name}){hint}",
        )
        self.budget = budget.name
        self.limit = budget.limit


class StoppedError(MatcherError):
    """The work was stopped from outside; ``code`` says why (``client_gone``,
    ``deadline_exceeded``, ``shutting_down``)."""


_REASONS: Final = {
    CLIENT_GONE: "the client went away",
    DEADLINE: "the work ran past its deadline",
    SHUTTING_DOWN: "the service is stopping",
}


class Budget:
    """At most ``limit`` steps (None: no count) for the work called ``name`` (``hint``: how
    to ask for less), until ``stop`` is called or the monotonic ``deadline`` passes."""

    __slots__ = ("_clock", "_deadline", "_next_clock", "hint", "limit", "name", "spent", "stopped")

    def __init__(
        self,
        name: str = "budget",
        limit: int | None = None,
        hint: str = "",
        *,
        deadline: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.limit = limit
        self.hint = hint
        self.spent = 0
        self.stopped: str | None = None
        self._deadline = deadline
        self._clock = clock
        self._next_clock = 0

    def spend(self, steps: int = 1) -> None:
        """Count ``steps``; raise ``BudgetExceededError`` past the limit, ``StoppedError``
        once stopped or past the deadline (the clock read every ``CLOCK_EVERY`` steps)."""
        spent = self.spent + steps
        self.spent = spent
        if self.stopped is not None:
            self._raise_stopped()
        if self.limit is not None and spent > self.limit:
            raise BudgetExceededError(self)
        if self._deadline is not None and spent >= self._next_clock:
            self._next_clock = spent + CLOCK_EVERY
            self._check_clock()

    def check(self) -> None:
        """Raise ``StoppedError`` if stopped or past the deadline; spends nothing."""
        if self.stopped is not None:
            self._raise_stopped()
        if self._deadline is not None:
            self._check_clock()

    def stop(self, reason: str = CLIENT_GONE) -> None:
        """Stop the work at its next step (from any thread); the first reason stays."""
        if self.stopped is None:
            self.stopped = reason

    def _check_clock(self) -> None:
        assert self._deadline is not None
        if self._clock() > self._deadline:
            self.stop(DEADLINE)
            self._raise_stopped()

    def _raise_stopped(self) -> None:
        reason = self.stopped or CLIENT_GONE
        hint = f"; {self.hint}" if reason == DEADLINE and self.hint else ""
        raise StoppedError(reason, f"{self.name}: stopped, {_REASONS.get(reason, reason)}{hint}")
