"""The service's one Settings class: every knob comes from ``TOPICSTORE_*`` environment
variables (or a ``.env`` file); libraries below take explicit parameters instead."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.ratelimit import ADMIN, BATCH_TOPICS, MATCH, Rate
from matcher import Limits
from matcher.registry import DEFAULT_ENGINES
from store import DEFAULT_DATABASE_URL


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TOPICSTORE_", env_file=".env", extra="ignore")

    database_url: str = Field(
        DEFAULT_DATABASE_URL,
        description="postgresql+psycopg://user@host/db or duckdb:///path/to/file.duckdb",
    )
    engines: list[str] = Field(
        list(DEFAULT_ENGINES), description="Matching engines to build; the first answers."
    )
    cache_size: int = Field(0, ge=0, description="Result cache per matcher (0 = off).")
    shadow_every: int = Field(
        1_000,
        ge=0,
        description="Answer one match in N with the other engines too and count "
        "disagreements in /metrics (0 = off; needs two or more engines).",
    )
    poll_interval: float = Field(
        1.0, gt=0, description="Seconds between change-log polls (PostgreSQL safety net)."
    )
    ready_max_lag_seconds: float = Field(
        5.0,
        gt=0,
        description="/readyz stays 200 while the oldest change not yet applied is at most "
        "this old (six times this while changes are being applied) and the change listener "
        "beat, or an applier made progress, this recently; more than twice POLL_INTERVAL.",
    )
    reconcile_interval: float | None = Field(
        300.0, gt=0, description="Seconds between drift checks against the store (None = off)."
    )

    host: str = Field("127.0.0.1", description="Address `topicstore serve` binds.")
    workers: int = Field(
        1, ge=1, le=64, description="Processes serving (PostgreSQL only when more than 1)."
    )
    request_timeout: float = Field(
        10.0,
        gt=0,
        le=300,
        description="Seconds a request's headers and body may take to arrive (408 after).",
    )
    max_connections: int = Field(
        10_000,
        ge=16,
        description="Open connections per worker (at most the file-descriptor limit - 256); "
        "over it the one that waited longest for its request is closed.",
    )
    port: int = Field(8080, ge=1, le=65535)
    admin_token: str | None = Field(
        None, min_length=16, description="Bearer token of the operator: any tenant."
    )
    tenant_tokens: dict[str, str] = Field(
        default_factory=dict,
        description='Bearer tokens bound to one tenant each: {"token": "tenant"}.',
    )
    dev: bool = Field(
        False, description="Development mode: without an admin token, make one and say so."
    )
    dev_token_file: Path = Field(
        Path("data/dev-admin-token"),
        description="Development mode keeps its made-up token here, so the CLI can use it.",
    )
    history_interval: float = Field(
        10.0,
        ge=0.05,
        le=3600,
        description="Seconds between the samples of the metrics kept for the console's "
        "Health graphs (GET /v1/metrics/history: the last 360 samples, an hour at 10 s).",
    )
    access_log: bool = Field(
        False, description="Log every request (the metrics count them either way)."
    )
    analytics_dir: Path | None = Field(
        Path("data/routed"),
        description="A routed table (`topicstore route --out`) for /v1/analytics (None = off).",
    )
    analytics_subscriptions: Path | None = Field(
        Path("data/subscriptions.parquet"),
        description="A subscriptions export (`topicstore export`), for the never-matched "
        "analytics query.",
    )
    spark_class_archive: str = Field(
        "",
        description="Where a local `topicstore route` keeps Spark's class-data archive: `off`, "
        "or a directory (default: $XDG_CACHE_HOME/topicstore, else ~/.cache/topicstore). "
        "The default of `route --class-archive`.",
    )
    match_auth: bool = Field(True, description="Whether match endpoints need a token too.")
    max_body_bytes: int = Field(1_048_576, ge=1024, description="Largest request body.")
    max_batch: int = Field(10_000, ge=1, description="Most topics or items in one batch.")
    max_delete: int = Field(
        100_000,
        ge=1,
        description="Most subscriptions one DELETE /v1/subscriptions removes (the lowest ids "
        "of the selection; the answer's `more` says whether it holds others): one write, "
        "so the writes behind it wait about a second, not the time of a whole tenant.",
    )
    max_batch_matches: int = Field(
        1_000_000,
        ge=1,
        description="Most matches one /v1/match/batch may take: the ids it answers (about "
        "10-20 MB of JSON) plus the candidates its groups' choices examine; a batch past it "
        "is refused with 413 batch_answer_too_large.",
    )
    batch_concurrency: int = Field(
        2,
        ge=1,
        le=64,
        description="Batch-match slices run at once (in worker threads), granted to the "
        "waiting tenants in turns (about the cores to spare).",
    )
    explain_budget: int = Field(
        2_000_000,
        ge=1_000,
        description="Steps one explain may take (a step: one cell of a pattern's table against "
        "the topic, about 0.1 µs); past it 422 explain_budget_exceeded.",
    )
    overlap_budget: int = Field(
        300_000,
        ge=1_000,
        description="Steps one page of an overlaps/covered_by listing may take (a step: one "
        "state of a decision, about 1 µs); the page ends early there, with next_after.",
    )
    redundancy_budget: int = Field(
        300_000,
        ge=1_000,
        description="Steps one redundancy check may take (a step: one state of a containment "
        "decision, about 1 µs); past it 422 redundancy_budget_exceeded.",
    )
    work_deadline: float = Field(
        10.0,
        gt=0,
        description="Seconds an explain, overlap or redundancy search or a batch match may "
        "work before it is stopped (503 deadline_exceeded): a backstop behind the budgets.",
    )
    shutdown_grace: int = Field(
        10,
        ge=0,
        description="Seconds a stopping server (SIGTERM) lets requests in flight finish "
        "before it stops their work and exits.",
    )
    tenant_quota: int = Field(1_000_000, ge=1, description="Most subscriptions per tenant.")
    max_topic_bytes: int = Field(255, ge=1, description="Topic and pattern limit (bytes).")
    max_hash_wildcards: int | None = Field(
        None,
        ge=1,
        description="Most '#' words a new AMQP pattern may hold (None = any number; 2 = "
        "RabbitMQ 4.3.5's rule for topic bindings). Rows stored before still match and can "
        "be removed.",
    )

    rate_admin: float = Field(
        50.0, ge=0, description="Admin requests per second per tenant (0 = unlimited)."
    )
    rate_admin_burst: int = Field(100, ge=1, description="Admin requests at once per tenant.")
    rate_match: float = Field(
        10_000.0, ge=0, description="Match requests per second per tenant (0 = unlimited)."
    )
    rate_match_burst: int = Field(20_000, ge=1, description="Match requests at once per tenant.")
    rate_batch_topics: float = Field(
        200_000.0, ge=0, description="Topics of batch matches per second per tenant (0 = off)."
    )
    rate_batch_topics_burst: int = Field(
        400_000, ge=1, description="Topics of batch matches at once per tenant."
    )
    rate_limit_operator: bool = Field(
        False, description="Apply the rates to the admin token too (unlimited otherwise)."
    )
    stats_flush_interval: float = Field(
        10.0,
        ge=0.05,
        le=240,
        description="Seconds between flushes of this process's match counts to the store "
        "(subscription_stats); a process killed without its SIGTERM flush loses at most this "
        "many seconds of counts.",
    )
    stats_top: int = Field(
        10,
        ge=0,
        le=100,
        description="The most matched subscriptions /metrics shows to the operator, one series "
        "each (topicstore_subscription_matches; 0 = none).",
    )
    audit_retention_days: int = Field(
        90, ge=0, le=36_500, description="Days the audit log keeps a row (0 = forever)."
    )
    tracing: bool = Field(
        False,
        description="OpenTelemetry traces of requests and their store statements, exported "
        "as the OTEL_* variables say (OTEL_SDK_DISABLED=true turns them off again).",
    )
    trace_topics: bool = Field(
        False, description="Put the topic text on match spans (never there otherwise)."
    )
    expiry_sweep_interval: float = Field(
        10.0,
        ge=0,
        le=86_400,
        description="Seconds between sweeps deleting expired subscriptions (0 = off); a "
        "sweep also runs as soon as a subscription this replica holds expires.",
    )
    expiry_sweep_rows: int = Field(
        1_000, ge=1, le=100_000, description="Most expired subscriptions one sweep deletes."
    )

    @model_validator(mode="after")
    def _bound_above_the_poll(self) -> Settings:
        # The listener beats at least every poll interval: a tighter bound would flap.
        if self.ready_max_lag_seconds <= 2 * self.poll_interval:
            raise ValueError("ready_max_lag_seconds must be more than twice poll_interval")
        return self

    def limits(self) -> Limits:
        """The matchers' input bounds, as configured: the one place settings become
        ``Limits`` (the API, the loader and the command line's direct mode all use it)."""
        return Limits(
            max_topic_bytes=self.max_topic_bytes,
            max_pattern_bytes=self.max_topic_bytes,
            max_hash_wildcards=self.max_hash_wildcards,
        )

    def tracing_on(self) -> bool:
        """``tracing``, unless ``OTEL_SDK_DISABLED`` is true (OpenTelemetry's own switch,
        which operators set to silence every instrumented service at once)."""
        disabled = os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
        return self.tracing and not disabled

    def rates(self) -> dict[str, Rate | None]:
        """The rate limiter's buckets per kind, as configured (a rate of 0 is no limit)."""
        pairs = {
            ADMIN: (self.rate_admin, self.rate_admin_burst),
            MATCH: (self.rate_match, self.rate_match_burst),
            BATCH_TOPICS: (self.rate_batch_topics, self.rate_batch_topics_burst),
        }
        return {kind: Rate(rate, burst) if rate else None for kind, (rate, burst) in pairs.items()}


@lru_cache
def get_settings() -> Settings:
    return Settings()
