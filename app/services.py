"""What a running service holds: settings, the store and the loader, started and stopped
together. Routes reach them through ``app.dependencies.ServicesDep``."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from prometheus_client import CollectorRegistry

from app import heap
from app.fairness import PYTHON_PLACES, FairSlots
from app.history import History
from app.operations import AdminOperations
from app.ratelimit import RateLimiter
from app.refusals import NotReadyError
from app.settings import Settings
from app.sweep import ExpirySweep
from app.work import Work
from loader import Loader, RoutingTable
from migrations.runner import upgrade
from store import Database

if TYPE_CHECKING:
    from app.tracing import Tracing

log = logging.getLogger(__name__)

#: Seconds a request made while the routing table builds is asked to wait (Retry-After):
#: a build takes about two seconds at a million subscriptions.
BUILDING_RETRY_AFTER_S: Final = 1


@dataclass
class Services:
    settings: Settings
    db: Database
    loader: Loader
    admin: AdminOperations
    limiter: RateLimiter
    #: Places for batch slices matched without the GIL, and for work holding it
    #: (``app.fairness``).
    fair: FairSlots
    fair_python: FairSlots
    work: Work
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    #: The Health page's last hour, sampled from ``registry`` (``app.history``).
    history: History = field(default_factory=History)
    failure: BaseException | None = field(default=None)
    builder: threading.Thread | None = field(default=None)
    #: Set by ``create_app`` when tracing is on (``Settings.tracing_on``), else None: the
    #: match routes put their spans through it only then (``app.tracing``).
    tracing: Tracing | None = field(default=None)
    sweeper: ExpirySweep | None = field(default=None)

    @classmethod
    def open(cls, settings: Settings) -> Services:
        heap.arrow_on_malloc()  # before any Arrow allocation (app.heap)
        db = Database(settings.database_url)
        upgrade(db.url)
        loader = Loader(
            db,
            settings.engines,
            limits=settings.limits(),
            cache_size=settings.cache_size,
            shadow_every=settings.shadow_every,
            poll_interval=settings.poll_interval,
            reconcile_interval=settings.reconcile_interval,
            settle=heap.settle,
        )
        limiter = RateLimiter(settings.rates(), limit_operator=settings.rate_limit_operator)
        fair = FairSlots(settings.batch_concurrency)
        operations = AdminOperations(
            db, settings, room=lambda items: loader.table.check_room(items)
        )
        fair_python = FairSlots(PYTHON_PLACES)
        work = Work(settings, fair_python, limiter)
        sweeper = ExpirySweep(
            operations, loader, settings.expiry_sweep_interval, settings.expiry_sweep_rows
        )
        return cls(
            settings, db, loader, operations, limiter, fair, fair_python, work, sweeper=sweeper
        )

    def start_in_background(self) -> threading.Thread:
        """Build the routing table off the request path: the service answers /healthz at
        once and /readyz turns 200 when the table is complete. Once: a second call returns
        the thread of the first."""
        if self.builder is not None:
            return self.builder

        def build() -> None:
            try:
                self.loader.start()
            except Exception as e:  # entry point of a thread: report it, stay up
                log.exception("building the routing table failed")
                self.failure = e

        self.builder = threading.Thread(target=build, name="topicstore-build", daemon=True)
        self.builder.start()
        if self.sweeper is not None:
            self.sweeper.start()  # it waits for the table
        return self.builder

    def close(self) -> None:
        if self.sweeper is not None:
            self.sweeper.stop()
        self.loader.stop()
        self.db.dispose()
        if self.tracing is not None:
            self.tracing.shutdown()

    def table(self) -> RoutingTable:
        """The routing table, or 503 while it is being built."""
        if not self.loader.ready.is_set():
            raise NotReadyError(
                "the routing table is still being built", retry_after=BUILDING_RETRY_AFTER_S
            )
        return self.loader.table
