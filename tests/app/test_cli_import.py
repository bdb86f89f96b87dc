"""``topicstore sub import`` straight on the store (no server), on both backends: every bad
line is reported with its number and the good ones are stored."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from app.cli import app
from app.settings import get_settings
from harness.fresh import fresh_interpreter
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


def _fresh_interpreter(directory: Path, script: str, *args: str) -> list[str]:
    """``fresh_interpreter`` on a DuckDB store in ``directory``."""
    store = {"database_url": f"duckdb:///{directory / 'store.duckdb'}"}
    return fresh_interpreter(script, *args, cwd=directory, settings=store)


#: Run in a fresh interpreter: the command in process, then what it loaded, then whether
#: the modules it kept out can be imported after it.
_LEAN = """
import sys
from typer.testing import CliRunner
from app.cli import app
result = CliRunner().invoke(app, ["sub", "import", sys.argv[1]])
assert result.exit_code == 0, result.output
print(result.output.strip().splitlines()[-1])
print(sorted(name for name in ("pandas", "pyarrow.dataset") if name in sys.modules))
import pyarrow.dataset
print("pyarrow.dataset" in sys.modules)
"""


def test_an_import_into_duckdb_loads_neither_pandas_nor_pyarrow_dataset(tmp_path: Path) -> None:
    """``app.heap.lean_import``: DuckDB's client imports pyarrow.dataset to scan each staged
    Arrow batch and pandas to bind a parameter, only to ask whether a value is theirs (some
    95 MB of the importing process); the import stores every line without them, and they
    can be imported again once it is done."""
    source = tmp_path / "subscriptions.csv"
    source.write_text("q,lean.one\nq,lean.two\n", encoding="utf-8")
    printed = _fresh_interpreter(tmp_path, _LEAN, str(source))
    assert printed == ["created 2, already there 0, failed 0", "[]", "True"]


#: A fresh interpreter: commands on the store directly, in process, then whether pandas
#: was loaded and whether it can be imported after them.
_DIRECT = """
import sys
from typer.testing import CliRunner
from app.cli import app
for args in (["sub", "add", "q", "lean.*"], ["match", "lean.x"], ["sub", "ls"], ["audit"]):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, (args, result.output)
print("pandas" in sys.modules)
import pandas
print("pandas" in sys.modules)
"""


def test_commands_on_the_store_directly_do_not_load_pandas(tmp_path: Path) -> None:
    """``app.heap.kept_out`` in ``app.cli.connect``: DuckDB's client imports pandas when a
    statement first binds a parameter, only to ask whether the value is a pandas object; a
    command on the store directly (a write, a match, listings) runs without it, and it can
    be imported again after."""
    assert _fresh_interpreter(tmp_path, _DIRECT) == ["False", "True"]


#: A fresh interpreter: commands refused at their options or their settings, in process,
#: then which of the store's and the service's libraries they loaded.
_REFUSED = """
import sys
from typer.testing import CliRunner
from app.cli import app
cases = (
    (["match", "a", "--dialect", "kafka"], {}),
    (["sub", "add", "q", "a", "--label", "k"], {}),
    (["serve", "--port", "1"], {"TOPICSTORE_DEV": "false"}),
    (["serve", "--port", "1"], {"TOPICSTORE_ADMIN_TOKEN": "short"}),
)
for args, env in cases:
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 2, (args, result.output)
    print(result.output.splitlines()[0].split(":")[1].strip())
loaded = ("store.db", "sqlalchemy", "pyarrow", "psycopg", "fastapi", "uvicorn")
print(sorted(name for name in loaded if name in sys.modules))
"""


def test_a_command_refused_at_its_options_loads_no_store(tmp_path: Path) -> None:
    """``app.cli.errors.report_for`` looks an error's type up only in the modules the
    command loaded, ``store`` loads its parts when asked for one, and ``serve`` loads the
    service once its settings pass: a usage or settings error is reported without
    importing the store, its libraries and the web stack (most of a command's start)."""
    printed = _fresh_interpreter(tmp_path, _REFUSED)
    assert printed == [
        "invalid_dialect",
        "invalid_label",
        "insecure_configuration",
        "invalid_setting",
        "[]",
    ]
