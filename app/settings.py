"""The service's one Settings class: every knob comes from ``TOPICSTORE_*`` environment
variables (or a ``.env`` file); libraries below take explicit parameters instead."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from loader import DEFAULT_ENGINES
from matcher import Limits
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
    reconcile_interval: float | None = Field(
        300.0, gt=0, description="Seconds between drift checks against the store (None = off)."
    )

    host: str = Field("127.0.0.1", description="Address `topicstore serve` binds.")
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
    access_log: bool = Field(
        False, description="Log every request (the metrics count them either way)."
    )
    analytics_dir: Path | None = Field(
        None, description="A `topicstore route` output directory for /v1/analytics."
    )
    analytics_subscriptions: Path | None = Field(
        None, description="A subscriptions export, for the never-matched analytics query."
    )
    match_auth: bool = Field(True, description="Whether match endpoints need a token too.")
    max_body_bytes: int = Field(1_048_576, ge=1024, description="Largest request body.")
    max_batch: int = Field(10_000, ge=1, description="Most topics or items in one batch.")
    tenant_quota: int = Field(1_000_000, ge=1, description="Most subscriptions per tenant.")
    max_topic_bytes: int = Field(255, ge=1, description="Topic and pattern limit (bytes).")

    def limits(self) -> Limits:
        """The matchers' input bounds, as configured: the one place settings become
        ``Limits`` (the API, the loader and the command line's direct mode all use it)."""
        return Limits(max_topic_bytes=self.max_topic_bytes, max_pattern_bytes=self.max_topic_bytes)


@lru_cache
def get_settings() -> Settings:
    return Settings()
