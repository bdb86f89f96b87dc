"""The service's one Settings class: every knob comes from ``TOPICSTORE_*`` environment
variables (or a ``.env`` file); libraries below take explicit parameters instead."""

from __future__ import annotations

from functools import lru_cache

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from loader import DEFAULT_ENGINES

#: The embedded default: one DuckDB file, no server to run.
DEFAULT_DATABASE_URL = "duckdb:///./data/topicstore.duckdb"


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
    poll_interval: float = Field(
        1.0, gt=0, description="Seconds between change-log polls (PostgreSQL safety net)."
    )
    reconcile_interval: float | None = Field(
        300.0, gt=0, description="Seconds between drift checks against the store (None = off)."
    )


@lru_cache
def get_settings() -> Settings:
    return Settings()
