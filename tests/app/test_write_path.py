"""One write path: the same refusals through HTTP and through the command line's direct
mode (which once skipped the tenant quota and the configured topic limit), and CSV import
read as the csv module documents it (quoted commas and newlines, BOM, CRLF)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from app.cli import app
from app.settings import get_settings
from store import Database, SubscriptionRepository
from tests.app.conftest import ADMIN_HEADERS, ClientFactory

QUOTA = 3
MAX_BYTES = 12


def _cli(args: list[str], store_url: str, monkeypatch: pytest.MonkeyPatch) -> Result:
    monkeypatch.setenv("TOPICSTORE_DATABASE_URL", store_url)
    monkeypatch.setenv("TOPICSTORE_TENANT_QUOTA", str(QUOTA))
    monkeypatch.setenv("TOPICSTORE_MAX_TOPIC_BYTES", str(MAX_BYTES))
    get_settings.cache_clear()
    try:
        return CliRunner().invoke(app, args)
    finally:
        get_settings.cache_clear()


def _stored(store_url: str) -> list[tuple[str, str, str]]:
    db = Database(store_url)
    try:
        with db.read() as session:
            rows = SubscriptionRepository(session).page(limit=1000)
    finally:
        db.dispose()
    return [(r.tenant, r.subscriber, r.pattern) for r in rows]


def _write(path: Path, text: str, encoding: str = "utf-8") -> Path:
    path.write_bytes(text.encode(encoding))
    return path


def test_http_refuses_over_quota_and_over_the_configured_length(
    make_client: ClientFactory,
) -> None:
    client = make_client(tenant_quota=QUOTA, max_topic_bytes=MAX_BYTES)
    long = client.post(
        "/v1/subscriptions", json={"subscriber": "q", "pattern": "a" * 13}, headers=ADMIN_HEADERS
    )
    assert long.status_code == 400
    assert long.json()["error"]["code"] == "pattern_too_long"
    items = [{"subscriber": "q", "pattern": f"p.{i}"} for i in range(QUOTA + 1)]
    over = client.post("/v1/subscriptions/bulk", json={"items": items}, headers=ADMIN_HEADERS)
    assert over.status_code == 403
    assert over.json()["error"]["code"] == "quota_exceeded"


def test_direct_cli_refuses_over_quota_and_over_the_configured_length(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    long = _cli(["sub", "add", "q", "a" * 13, "--json"], store_url, monkeypatch)
    assert long.exit_code == 1, long.output
    assert "error: pattern_too_long: pattern is 13 UTF-8 bytes" in long.output

    lines = "".join(f"q,p.{i}\n" for i in range(QUOTA + 1))
    over = _cli(["sub", "import", str(_write(tmp_path / "s.csv", lines))], store_url, monkeypatch)
    assert over.exit_code == 1, over.output
    assert "error: quota_exceeded: tenant 'default' would hold 4 subscriptions" in over.output
    assert _stored(store_url) == []

    fits = "".join(f"q,p.{i}\n" for i in range(QUOTA))
    ok = _cli(["sub", "import", str(_write(tmp_path / "ok.csv", fits))], store_url, monkeypatch)
    assert ok.exit_code == 0, ok.output
    one_more = _cli(["sub", "add", "q", "p.new"], store_url, monkeypatch)
    assert one_more.exit_code == 1
    assert "error: quota_exceeded" in one_more.output


def test_direct_cli_takes_the_tenant_it_is_given(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _cli(["sub", "add", "q", "a.b", "--tenant", "acme"], store_url, monkeypatch)
    assert result.exit_code == 0, result.output
    assert _stored(store_url) == [("acme", "q", "a.b")]
    listed = _cli(["sub", "ls", "--tenant", "acme", "--json"], store_url, monkeypatch)
    assert '"tenant": "acme"' in listed.output
    assert "(none)" in _cli(["sub", "ls"], store_url, monkeypatch).output


def test_csv_import_follows_the_csv_rules(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (
        "subscriber,pattern\r\n"  # header, CRLF line ends throughout
        '"alice,inc",a.b\r\n'  # line 2: a quoted comma
        '"multi\r\nline",c.d\r\n'  # lines 3-4: a quoted line break inside a field
        "bob,a/#/b,mqtt\r\n"  # line 5: invalid, numbered by its physical line
        "carol,e.f\r\n"  # line 6
    )
    path = _write(tmp_path / "subs.csv", "\ufeff" + text)  # with a byte-order mark
    result = _cli(["sub", "import", str(path)], store_url, monkeypatch)
    assert result.exit_code == 1, result.output
    # A line break read from a quoted field is a control character: refused, on the line
    # its record starts on (it was stored as given; names may not hold one any more).
    assert "created 2, already there 0, failed 2" in result.output
    assert "line 3: control_character" in result.output
    assert "line 5: invalid_wildcard" in result.output
    assert sorted(_stored(store_url)) == [
        ("default", "alice,inc", "a.b"),
        ("default", "carol", "e.f"),
    ]


def test_csv_import_reports_an_unclosed_quote(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path / "open.csv", 'a,x.y\nb,"never closed\n')
    result = _cli(["sub", "import", str(path)], store_url, monkeypatch)
    assert result.exit_code == 1, result.output
    assert "line 2: invalid_csv" in result.output
    assert _stored(store_url) == [("default", "a", "x.y")]
