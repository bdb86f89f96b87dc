"""The FastAPI application: wiring only (routers, error envelope, edge checks, metrics, and
the services' lifecycle)."""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from app import errors
from app.middleware import EdgeChecks, Metrics
from app.routers import analytics, match, ops, subscriptions
from app.services import Services
from app.settings import Settings

log = logging.getLogger(__name__)


class ConfigurationError(Exception):
    """The service must not start as configured."""


def secure(settings: Settings) -> Settings:
    """Refuse to run without an admin token, unless in development mode, where one is made
    (and announced loudly) for this run."""
    if settings.admin_token:
        return settings
    if not settings.dev:
        raise ConfigurationError(
            "TOPICSTORE_ADMIN_TOKEN is not set. Set it (16+ characters), or start in "
            "development mode with TOPICSTORE_DEV=true (never in production)."
        )
    token = dev_token(settings)
    if token is None:
        token = secrets.token_urlsafe(24)
        path = settings.dev_token_file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(token + "\n", encoding="utf-8")
    log.warning("DEVELOPMENT MODE: no admin token configured; using %s", settings.dev_token_file)
    return settings.model_copy(update={"admin_token": token})


def dev_token(settings: Settings) -> str | None:
    """The token development mode made earlier (kept so restarts and the CLI reuse it)."""
    try:
        token = settings.dev_token_file.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return token if len(token) >= 16 else None


def create_app(settings: Settings, *, wait_until_ready: bool = False) -> FastAPI:
    """The service for ``settings``. The routing table builds in the background after
    startup (``/readyz`` says when it is done) unless ``wait_until_ready``."""
    settings = secure(settings)
    services = Services.open(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if wait_until_ready:
            services.loader.start()
        else:
            services.start_in_background()
        try:
            yield
        finally:
            services.close()

    app = FastAPI(
        title="topicstore",
        version="0.1.0",
        summary="Topic-matching subscription store: admin and match API.",
        lifespan=lifespan,
    )
    app.state.services = services
    errors.install(app)
    app.include_router(subscriptions.router)
    app.include_router(match.router)
    app.include_router(ops.router)
    app.include_router(analytics.router)
    services.registry.register(ops.ServiceCollector(services))
    app.add_middleware(Metrics, registry=services.registry)
    app.add_middleware(EdgeChecks, max_body_bytes=settings.max_body_bytes)
    return app
