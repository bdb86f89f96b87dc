"""Operations: liveness, readiness with the change lag, Prometheus metrics, snapshots."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

import orjson
from fastapi import APIRouter, Query, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from app.dependencies import AdminCaller, ServicesDep
from app.errors import documented
from app.schemas import Health, Readiness, SnapshotOut
from app.services import Services
from store import UNAVAILABLE_ERRORS

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    """The process is alive (says nothing about the data)."""
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "Not loaded or not caught up."}},
)
def readyz(services: ServicesDep, response: Response) -> Readiness:
    """200 only when the routing table is loaded and has applied every committed change;
    503 (this same JSON) while it is not, or while the store does not answer."""
    loader = services.loader
    ready = loader.ready.is_set()
    try:
        lag = loader.lag() if ready else None
    except UNAVAILABLE_ERRORS:  # cannot say whether it is caught up: not ready
        ready, lag = False, None
    if not ready or lag:
        response.status_code = 503
    return Readiness(
        ready=ready and not lag, seq=loader.table.seq, lag=lag, subscriptions=len(loader.table)
    )


@router.get("/metrics", response_class=Response)
def metrics(services: ServicesDep) -> Response:
    """Prometheus text format."""
    return Response(generate_latest(services.registry), media_type=CONTENT_TYPE_LATEST)


@router.get(
    "/v1/snapshot",
    response_model=SnapshotOut,
    tags=["subscriptions"],
    responses=documented(400, 401, 403, 422, 503),
)
def snapshot(
    caller: AdminCaller,
    services: ServicesDep,
    tenant: Annotated[str | None, Query(max_length=255)] = None,
) -> Response:
    """Every subscription of the tenant as of one change seq: one consistent listing,
    taken in O(1) from the loader's persistent catalog (later writes do not change it)."""
    tenant = caller.tenant_for(tenant)
    view = services.table().snapshot()
    entries = [
        {"id": sub_id, "subscriber": e.subscriber, "dialect": e.dialect, "pattern": e.pattern}
        for sub_id, e in view.entries.items()
        if e.tenant == tenant
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
            "topicstore_shadow_disagreements",
            "Shadow checks where an engine disagreed with the answering one (a bug)",
            value=loader.shadow.disagreements,
        )
        if loader.ready.is_set():
            yield GaugeMetricFamily(
                "topicstore_change_lag", "Committed changes not yet applied", value=loader.lag()
            )
