"""The FastAPI application: wiring only (routers, error envelope, documentation pages, the
web console, edge checks, metrics and their history, the fast path of the hot routes, and
the services' lifecycle)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import ModuleType

from fastapi import FastAPI

from app import console, contract, docs, errors, fastpath
from app.auth import ConfigurationError, secure
from app.history import sample_every
from app.middleware import EdgeChecks, Metrics, RequestId, StrictQuery
from app.ratelimit import RateLimitCollector
from app.routers import analytics, audit, match, ops, subscriptions
from app.services import Services
from app.settings import Settings


def create_app(
    settings: Settings,
    *,
    wait_until_ready: bool = False,
    services: Services | None = None,
    fast_path: bool = True,
) -> FastAPI:
    """The service for ``settings``. The routing table builds in the background after
    startup (``/readyz`` says when it is done) unless ``wait_until_ready``. ``services``:
    already opened for ``settings``, perhaps already building (``topicstore serve``
    starts the build before importing this module); the app closes them when it stops.
    ``fast_path=False`` leaves the matches and the single writes to their FastAPI routes
    alone: the reference the tests hold the fast path to (``app.fastpath``)."""
    settings = secure(settings)
    if services is None:
        services = Services.open(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # The OpenAPI document (``StrictQuery`` checks every query string against it) is
        # built now, before any request: built at the first request with a query string,
        # it held the GIL, and every match, for a tenth of a second.
        app.openapi()
        services.stats.start()
        if wait_until_ready:
            services.loader.start()
            if services.sweeper is not None:
                services.sweeper.start()
        else:
            services.start_in_background()
        sampler = asyncio.create_task(
            sample_every(services.history, services.registry, settings.history_interval)
        )
        try:
            yield
        finally:
            sampler.cancel()
            # The server has waited its grace period for the requests in flight: what
            # work is left stops at its next step, so no worker thread holds up the exit.
            services.work.stop_all()
            services.close()

    app = FastAPI(
        title="topicstore",
        version="0.1.0",
        summary="Topic-matching subscription store: admin and match API.",
        description=(
            "Every response carries `X-Request-ID`: the request's own (1 to 128 visible ASCII "
            "characters; anything else is refused with 400 `invalid_request_id`) or one made "
            "for it; the audit log (`GET /v1/audit`) records it with every admin change. "
            "Requests over a tenant's rate get 429 `rate_limited` with `Retry-After`."
        ),
        lifespan=lifespan,
        # FastAPI's own OpenTelemetry bridge looks up three global providers on every
        # request to learn it has nothing to do; traces come from ``app.tracing`` alone.
        telemetry={"tracing": False, "metrics": False, "logs": False},
        # Served by app.docs instead: offline assets, and routes the metrics can label.
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    app.state.services = services
    errors.install(app)
    docs.install(app)
    console.install(app)
    app.include_router(subscriptions.router)
    app.include_router(match.router)
    app.include_router(ops.router)
    app.include_router(analytics.router)
    app.include_router(audit.router)
    contract.install(app, settings)
    if fast_path:
        fastpath.install(app, services)
    services.registry.register(ops.ServiceCollector(services))
    services.registry.register(RateLimitCollector(services.limiter))
    app.add_middleware(StrictQuery, document=app.openapi)
    app.add_middleware(Metrics, registry=services.registry)
    app.add_middleware(EdgeChecks, max_body_bytes=settings.max_body_bytes)
    app.add_middleware(RequestId)  # outermost: even an edge refusal carries the id
    if settings.tracing_on():
        services.tracing = _tracing().install(app, services.db.engine, settings)
    return app


class TracingUnavailableError(ConfigurationError):
    """Tracing is on, but the ``tracing`` extra is not installed."""

    code = "tracing_unavailable"


def _tracing() -> ModuleType:
    """``app.tracing``, imported only now: with tracing off, none of OpenTelemetry's SDK is
    loaded and nothing of it is in the stack."""
    try:
        from app import tracing
    except ImportError as e:
        raise TracingUnavailableError(
            f"TOPICSTORE_TRACING needs the OpenTelemetry packages ({e.name} is missing): "
            "pip install 'topicstore[tracing]'"
        ) from e
    return tracing
