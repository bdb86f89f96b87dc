"""Every request that can buy long work gets a ``matcher.budget.Budget``, and its work stops
when the client leaves or the server stops.

* Steps: explain, overlap and redundancy searches count their steps against a limit set per
  kind (``BUDGETS``: the setting holding it, and how a client narrows a refused request);
  batches and exports have no step count (their work is bounded by ``max_batch`` and
  ``max_batch_matches``, and by the tenant's quota), only a stop.
* A deadline: ``work_deadline`` seconds after the work starts it stops (exports excepted:
  they scale with the tenant's rows, not with what the request asks for), a backstop behind
  the step budgets.
* The client: ``Work.watched`` starts a task that waits on the request's ``receive`` until
  the server reports ``http.disconnect`` (uvicorn does the moment the connection drops) and
  then stops the budget; the worker thread doing the work sees that at its next step.
* The server: ``Work.stop_all`` stops every budget in flight; the app's lifespan calls it
  when the server stops, after uvicorn's grace period (``shutdown_grace``) let the requests
  that still have a client finish, so no worker thread outlives it by more than a step.
* Fairness: ``Work.run`` runs the work in a worker thread in the fair place for work that
  holds the GIL (``app.fairness``: granted to the tenants in turns), and
  can bill the steps it spent to a rate bucket (``STEPS_PER_MATCH`` steps cost as much as
  one match request), so an expensive request counts as the many matches it costs.

Used on the event loop (one ``Work`` per process); budgets are spent in worker threads.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.types import Receive

from app.fairness import FairSlots
from app.ratelimit import RateLimiter
from app.settings import Settings
from matcher.budget import CLIENT_GONE, SHUTTING_DOWN, Budget

T = TypeVar("T")

#: Budget steps billed as one match request: a step is about 0.1 µs of explaining or of
#: answering one id of a large match, so a thousand are about what a small match costs the
#: server end to end.
STEPS_PER_MATCH: Final = 1_000


@dataclass(frozen=True, slots=True)
class Rule:
    """A kind of work: the setting that holds its step limit (None: steps are not counted),
    whether the deadline applies, and how a client asks for less."""

    setting: str | None
    deadline: bool
    hint: str


BUDGETS: Final = {
    "explain_budget": Rule(
        "explain_budget",
        True,
        "name fewer subscribers, or explain a shorter topic",
    ),
    "overlap_budget": Rule(
        "overlap_budget", True, "ask with a pattern of fewer wildcards or a lower limit"
    ),
    "redundancy_budget": Rule(
        "redundancy_budget",
        True,
        "the subscriber's patterns overlap too much to compare pairwise: remove or split "
        "some of them (e.g. by dialect) first",
    ),
    "batch": Rule(None, True, "send fewer topics per batch"),
    "export": Rule(None, False, ""),
}


def budget_for(settings: Settings, kind: str) -> Budget:
    """A new budget for work of ``kind`` (a key of ``BUDGETS``), its deadline from now."""
    rule = BUDGETS[kind]
    limit = None if rule.setting is None else int(getattr(settings, rule.setting))
    deadline = time.monotonic() + settings.work_deadline if rule.deadline else None
    return Budget(kind, limit, rule.hint, deadline=deadline)


async def _watch(receive: Receive, budget: Budget) -> None:
    """Stop ``budget`` when the client disconnects. Called once the request's body has been
    read: what ``receive`` gives then is the disconnect (or, once the response is complete,
    uvicorn's end of the request, when the work is over anyway)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    budget.stop(CLIENT_GONE)


class Work:
    """The budgets of the work in flight in this process (see the module docstring)."""

    def __init__(self, settings: Settings, fair: FairSlots, limiter: RateLimiter) -> None:
        """``fair``: the places the work waits for (``Services.fair_python``)."""
        self.settings = settings
        self.fair = fair
        self.limiter = limiter
        self._live: set[Budget] = set()

    @asynccontextmanager
    async def watched(self, receive: Receive, kind: str) -> AsyncIterator[Budget]:
        """A budget for ``kind`` that stops when the client of ``receive`` leaves or the
        server stops; enter it only once the request's body has been read."""
        budget = budget_for(self.settings, kind)
        self._live.add(budget)
        watcher = asyncio.create_task(_watch(receive, budget))
        try:
            yield budget
        finally:
            watcher.cancel()
            self._live.discard(budget)

    async def run(
        self,
        receive: Receive,
        kind: str,
        tenant: str,
        work: Callable[[Budget], T],
        *,
        bill: tuple[str, str | None] | None = None,
    ) -> T:
        """``work(budget)`` in a worker thread, once the fair place is ``tenant``'s,
        with a watched budget of ``kind``; ``bill``: the rate bucket (kind, tenant) debited
        the steps it spent, refused or not."""
        async with self.watched(receive, kind) as budget:
            try:
                async with self.fair.slot(tenant):
                    budget.check()  # the client may have left while it waited
                    return await run_in_threadpool(work, budget)
            finally:
                if bill is not None:
                    self.limiter.debit(*bill, budget.spent / STEPS_PER_MATCH)

    def stop_all(self) -> None:
        """Stop every budget in flight (the server is stopping)."""
        for budget in list(self._live):
            budget.stop(SHUTTING_DOWN)
