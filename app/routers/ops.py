"""Operations: liveness, readiness with the change lag, Prometheus metrics, snapshots.

``/readyz`` and ``/metrics`` answer anyone with the global figures (a load balancer or a
scraper needs no token); with the operator's token they add the per-tenant counts, which
would tell one tenant who the others are and how big."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Annotated

import orjson
from fastapi import APIRouter, Query, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from app.auth import Caller
from app.dependencies import AdminCaller, OptionalCaller, ServicesDep
from app.errors import documented
from app.services import Services
from loader import RoutingTable
from loader.readiness import probe
from store.records import MAX_NAME_BYTES
from topicstore.models import (
    CallerOut,
    Health,
    HistoryOut,
    HistorySample,
    Readiness,
    SnapshotOut,
)

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    """The process is alive (says nothing about the data); ``worker`` is its process id,
    which tells the workers of ``topicstore serve --workers N`` apart."""
    return Health(status="ok", worker=os.getpid())


def _is_operator(caller: Caller | None) -> bool:
    return caller is not None and caller.tenant is None


def tenant_counts(table: RoutingTable) -> dict[str, int]:
    """Subscriptions per tenant, summed from ``RoutingTable.sizes()`` (the matchers' own
    counts: O(tenants x dialects), no catalog scan). Operator-only callers."""
    counts: dict[str, int] = {}
    for (tenant, _), size in table.sizes().items():
        counts[tenant] = counts.get(tenant, 0) + size
    return dict(sorted(counts.items()))


@router.get(
    "/readyz",
    response_model=Readiness,
    response_model_exclude_none=True,
    responses={
        503: {"model": Readiness, "description": "Not built, not listening, or behind."},
        **documented(401),
    },
)
def readyz(services: ServicesDep, caller: OptionalCaller, response: Response) -> Readiness:
    """200 when the routing table is built, its change listener alive, and every committed
    change applied or the oldest one not applied at most ``TOPICSTORE_READY_MAX_LAG_SECONDS``
    old (5 s; six times that while the replica is making progress on a backlog, such as a
    mass removal); 503 (this same JSON, ``reason`` saying why) otherwise, or while the
    store does not answer. The operator's token adds ``tenants``; no token gives global
    figures."""
    loader = services.loader
    verdict = probe(loader, services.settings.ready_max_lag_seconds)
    if not verdict.ready:
        response.status_code = 503
    table = loader.table
    return Readiness(
        ready=verdict.ready,
        seq=verdict.seq,
        lag=verdict.lag,
        lag_seconds=verdict.lag_seconds,
        reason=verdict.reason,
        subscriptions=len(table),
        tenants=tenant_counts(table) if _is_operator(caller) else None,
    )


def _tenant_series(sizes: Mapping[tuple[str, str], int]) -> bytes:
    family = GaugeMetricFamily(
        "topicstore_tenant_subscriptions",
        "Subscriptions per tenant and dialect (one series each in use; operator token only)",
        labels=["tenant", "dialect"],
    )
    for (tenant, dialect), size in sorted(sizes.items()):
        family.add_metric([tenant, dialect], size)

    class _Once(Collector):
        def collect(self) -> Iterable[GaugeMetricFamily]:
            yield family

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Once())
    return generate_latest(registry)


@router.get("/metrics", response_class=Response, responses=documented(401))
def metrics(services: ServicesDep, caller: OptionalCaller) -> Response:
    """Prometheus text format: global series for anyone; with the operator's token also
    ``topicstore_tenant_subscriptions{tenant=..., dialect=...}`` (give the scraper that token, e.g.
    Prometheus ``authorization: {credentials: ...}``, to get them)."""
    text = generate_latest(services.registry)
    if _is_operator(caller):
        text += _tenant_series(services.loader.table.sizes())
    return Response(text, media_type=CONTENT_TYPE_LATEST)


@router.get(
    "/v1/metrics/history",
    response_model=HistoryOut,
    tags=["operations"],
    responses=documented(400, 401, 422, 429),
)
async def metrics_history(caller: AdminCaller, services: ServicesDep) -> HistoryOut:
    """The web console's Health graphs: this process's match rate, latency (mean, p50,
    p99) and change lag per sampling interval (``TOPICSTORE_HISTORY_INTERVAL``, 10 s),
    oldest first: at most the last 360 samples, an hour at the default. Global figures, as
    ``/metrics`` gives anyone; any token."""
    interval = services.settings.history_interval
    samples = [
        HistorySample(
            at=datetime.fromtimestamp(s.at, UTC),
            seconds=s.seconds,
            matches=s.matches,
            rate=s.rate,
            mean_ms=s.mean_ms,
            p50_ms=s.p50_ms,
            p99_ms=s.p99_ms,
            lag=s.lag,
        )
        for s in services.history.samples()
    ]
    return HistoryOut(interval_seconds=interval, points=services.history.points, samples=samples)


@router.get(
    "/v1/whoami",
    response_model=CallerOut,
    tags=["operations"],
    responses=documented(400, 401, 422),  # 400: a query string the edge checks refuse
)
async def whoami(caller: AdminCaller) -> CallerOut:
    """Who the bearer token is: the operator (any tenant) or one tenant's token. The web
    console asks once at login, to know whether to offer a tenant field."""
    if caller.tenant is None:
        return CallerOut(role="operator", tenant=None)
    return CallerOut(role="tenant", tenant=caller.tenant)


@router.get(
    "/v1/snapshot",
    response_model=SnapshotOut,
    tags=["subscriptions"],
    responses=documented(400, 401, 403, 422, 429, 503),
)
def snapshot(
    caller: AdminCaller,
    services: ServicesDep,
    tenant: Annotated[str | None, Query(max_length=MAX_NAME_BYTES)] = None,
) -> Response:
    """Every subscription of the tenant as of one change seq: one consistent listing,
    taken in O(1) from the loader's persistent catalog (later writes do not change it)."""
    tenant = caller.tenant_for(tenant)
    table = services.table()
    view = table.snapshot()
    expired = table.expiry.due(time.time())  # held until swept, but no longer matching
    entries = [
        {"id": sub_id, "subscriber": e.subscriber, "dialect": e.dialect, "pattern": e.pattern}
        for sub_id, e in view.entries.items()
        if e.tenant == tenant and sub_id not in expired
    ]
    entries.sort(key=lambda entry: entry["id"])  # type: ignore[arg-type, return-value]
    return Response(
        orjson.dumps({"seq": view.seq, "subscriptions": entries}), media_type="application/json"
    )


class ServiceCollector(Collector):
    """Gauges read from the service at scrape time."""

    def __init__(self, services: Services) -> None:
        self.services = services

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        loader = self.services.loader
        table = loader.table
        yield GaugeMetricFamily(
            "topicstore_subscriptions", "Subscriptions in the routing table", value=len(table)
        )
        yield GaugeMetricFamily("topicstore_applied_seq", "Newest change applied", value=table.seq)
        yield GaugeMetricFamily(
            "topicstore_ready", "1 when the table is loaded", value=float(loader.ready.is_set())
        )
        yield GaugeMetricFamily(
            "topicstore_rebuild_seconds",
            "Duration of the last full build",
            value=loader.rebuild_seconds,
        )
        yield CounterMetricFamily(
            "topicstore_shadow_checks",
            "Matches answered by every engine and compared (TOPICSTORE_SHADOW_EVERY)",
            value=loader.shadow.checks,
        )
        yield CounterMetricFamily(
            "topicstore_capacity_refusals",
            "Stored subscriptions an engine refused for a fixed capacity, each time: not "
            "served until removals make room (the reconciler offers them again)",
            value=table.refused,
        )
        yield CounterMetricFamily(
            "topicstore_reconcile_passes",
            "Completed reconciliation passes: every id range and group compared with the "
            "store at one change-log position (TOPICSTORE_RECONCILE_INTERVAL)",
            value=loader.reconcile_passes,
        )
        yield CounterMetricFamily(
            "topicstore_reconcile_repairs",
            "Subscriptions and (tenant, dialect) engines reconciliation found drifted from "
            "the store and repaired",
            value=loader.reconcile_repairs,
        )
        yield GaugeMetricFamily(
            "topicstore_expiring_subscriptions",
            "Subscriptions in the routing table that have an expiry",
            value=len(table.expiry),
        )
        sweeper = self.services.sweeper
        if sweeper is not None:
            yield CounterMetricFamily(
                "topicstore_expiry_swept",
                "Expired subscriptions this replica's sweeps deleted from the store",
                value=sweeper.swept,
            )
        writes = self.services.db.writes
        yield CounterMetricFamily(
            "topicstore_write_transactions",
            "Admin write transactions committed (concurrent writes share one: group commit)",
            value=writes.groups,
        )
        yield CounterMetricFamily(
            "topicstore_write_jobs",
            "Admin writes committed (jobs / transactions = the mean group size)",
            value=writes.jobs,
        )
        yield CounterMetricFamily(
            "topicstore_shadow_disagreements",
            "Shadow checks where an engine disagreed with the answering one (a bug)",
            value=loader.shadow.disagreements,
        )
        if loader.ready.is_set():
            yield GaugeMetricFamily(
                "topicstore_change_lag", "Committed changes not yet applied", value=loader.lag()
            )
        fill = GaugeMetricFamily(
            "topicstore_engine_capacity_fill",
            "The fullest matcher's share of each fixed capacity of the answering engine "
            "(at 1 its writes are refused)",
            labels=["capacity"],
        )
        for name, share in sorted(table.capacity_fill().items()):
            fill.add_metric([name], share)
        yield fill
