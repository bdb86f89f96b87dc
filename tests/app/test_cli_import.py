"""``topicstore sub import`` straight on the store (no server), on both backends: every bad
line is reported with its number and the good ones are stored."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from app.cli import app
from app.settings import get_settings
from store import Database, SubscriptionRepository


def _import(
    lines: list[str], store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Result:
    path = tmp_path / "subscriptions.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.setenv("TOPICSTORE_DATABASE_URL", store_url)
    get_settings.cache_clear()
    try:
        return CliRunner().invoke(app, ["sub", "import", str(path)])
    finally:
        get_settings.cache_clear()


def _stored(store_url: str) -> list[str]:
    db = Database(store_url)
    try:
        with db.read() as session:
            return [row.pattern for row in SubscriptionRepository(session).page()]
    finally:
        db.dispose()


def test_import_reports_bad_lines_and_stores_the_rest(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = [
        '{"subscriber": "q", "pattern": "good.one"}',
        '{"subscriber": "q", "pattern": "nan", "labels": {"k": NaN}}',
        '{"subscriber": "q", "pattern": "a/#/b", "dialect": "mqtt"}',
        "[1, 2]",
        '{"subscriber": "", "pattern": "x"}',
        '{"subscriber": "q", "pattern": "good.two", "labels": {"k": -Infinity}}',
        '{"subscriber": "q", "pattern": "good.three"}',
    ]
    result = _import(lines, store_url, tmp_path, monkeypatch)
    assert result.exit_code == 1, result.output
    assert "created 2, already there 0, failed 5" in result.output
    for expected in (
        "line 2: invalid_json: NaN is not JSON",
        "line 3: invalid_wildcard",
        "line 4: not_an_object",
        "line 5: empty_subscriber",
        "line 6: invalid_json: -Infinity is not JSON",
    ):
        assert expected in result.output, result.output
    assert _stored(store_url) == ["good.one", "good.three"]


def test_import_reports_an_overflowing_number_in_labels(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = [
        '{"subscriber": "q", "pattern": "good.one"}',
        '{"subscriber": "q", "pattern": "huge", "labels": {"k": 1e400}}',
    ]
    result = _import(lines, store_url, tmp_path, monkeypatch)
    assert result.exit_code == 1, result.output
    assert "line 2: invalid_number" in result.output, result.output
    assert _stored(store_url) == ["good.one"]


def test_json_lines_are_numbered_by_physical_line(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A JSON string may hold U+2028 or U+0085 raw; str.splitlines() broke lines there."""
    lines = [
        '{"subscriber": "q", "pattern": "sep.\u2028.x"}',
        '{"subscriber": "q", "pattern": "nel.\u0085.x"}',
        '{"subscriber": "q", "pattern": "a/#/b", "dialect": "mqtt"}',
        '{"subscriber": "q\\nr", "pattern": "escaped.newline"}',
        '{"subscriber": "q", "pattern": "last"}',
    ]
    result = _import(lines, store_url, tmp_path, monkeypatch)
    assert result.exit_code == 1, result.output
    assert "created 3, already there 0, failed 2" in result.output
    assert "line 3: invalid_wildcard" in result.output
    assert "line 4: control_character" in result.output
    assert _stored(store_url) == ["sep.\u2028.x", "nel.\u0085.x", "last"]
