"""The command line and the settings it reads."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from app.cli import app
from app.settings import Settings
from store import DEFAULT_DATABASE_URL


def test_migrate_creates_the_schema(tmp_path: Path) -> None:
    url = f"duckdb:///{tmp_path / 'nested' / 'cli.duckdb'}"
    result = CliRunner().invoke(app, ["migrate", "--database-url", url])
    assert result.exit_code == 0, result.output
    assert "migrated duckdb database to head" in result.output
    engine = sa.create_engine(url)
    assert {"subscription", "change_log"} <= set(sa.inspect(engine).get_table_names())
    engine.dispose()


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().database_url == DEFAULT_DATABASE_URL
    monkeypatch.setenv("TOPICSTORE_DATABASE_URL", "postgresql+psycopg://u@h/db")
    monkeypatch.setenv("TOPICSTORE_ENGINES", '["cs_trie"]')
    monkeypatch.setenv("TOPICSTORE_CACHE_SIZE", "1024")
    settings = Settings()
    assert settings.database_url == "postgresql+psycopg://u@h/db"
    assert settings.engines == ["cs_trie"] and settings.cache_size == 1024
    monkeypatch.setenv("TOPICSTORE_CACHE_SIZE", "-1")
    with pytest.raises(ValueError, match="cache_size"):
        Settings()
