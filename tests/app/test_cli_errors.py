"""What a newcomer meets on the command line: every known error is one line
``error: <code>: <message>`` (and maybe a ``hint:``) on stderr with its documented exit
status (1 refused, 2 usage or configuration, 3 unavailable), never a traceback. Each case
runs the real ``topicstore`` process; the last ones while a real server holds the store."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from harness.server import Server, run_command, running_server, service_environment
from pipeline.cli import app as route_app
from tests.app.conftest import ADMIN

TIMEOUT_S = 300
LONG_TOPIC = "t" * 300


def run_cli(directory: Path, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    """``topicstore ARGS`` of this checkout in ``directory``, with only ``settings`` as
    ``TOPICSTORE_*`` variables."""
    return run_command(args, service_environment(settings), directory, TIMEOUT_S)


def assert_one_error(
    result: subprocess.CompletedProcess[str], code: str, status: int, hint: str | None = None
) -> None:
    """Exactly one ``error:`` line naming ``code``, the exit status, no traceback. (Spark
    writes its own log lines to stderr around ours.)"""
    context = f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert "Traceback" not in result.stderr, context
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {code}: "), context
    assert result.returncode == status, context
    if hint is not None:
        assert f"hint: {hint}" in result.stderr, context


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]
    code: str
    status: int
    settings: dict[str, str] = field(default_factory=dict)
    prepare: bool = False  # migrate and export first (in the case's own directory)
    writes: bool = False  # a write: may create the store before it refuses


#: A failing route keeps no class archive anyway: these leave the user's cache alone.
NO_CLASS_ARCHIVE = {"spark_class_archive": "off"}

CASES = {
    "unknown dialect to match": Case(("match", "a", "--dialect", "kafka"), "invalid_dialect", 2),
    "unknown dialect to sub ls": Case(("sub", "ls", "--dialect", "kafka"), "invalid_dialect", 2),
    "unknown dialect to sub add": Case(
        ("sub", "add", "q", "a", "--dialect", "kafka"), "invalid_dialect", 2
    ),
    "a label without =": Case(("sub", "add", "q", "a", "--label", "k"), "invalid_label", 2),
    "a selection's label without =": Case(("sub", "rm", "--label", "k"), "invalid_label", 2),
    "removing neither an id nor a selection": Case(("sub", "rm"), "selection_required", 2),
    "removing an id and a selection": Case(
        ("sub", "rm", "7", "--tenant", "t"), "conflicting_filters", 2
    ),
    "a 300-byte topic": Case(("match", LONG_TOPIC), "topic_too_long", 1, prepare=True),
    "removing an id that is not there": Case(("sub", "rm", "7"), "not_found", 1, prepare=True),
    "an invalid pattern": Case(
        ("sub", "add", "q", "a/#/b", "--dialect", "mqtt"), "invalid_wildcard", 1, writes=True
    ),
    "a short admin token": Case(("sub", "ls"), "invalid_setting", 2, {"admin_token": "short"}),
    "a short admin token to serve": Case(
        ("serve", "--port", "1"), "invalid_setting", 2, {"admin_token": "short"}
    ),
    "no admin token to serve": Case(("serve", "--port", "1"), "insecure_configuration", 2),
    "not a database URL": Case(
        ("sub", "ls"), "unsupported_database", 2, {"database_url": "sqlite:///x.db"}
    ),
    "PostgreSQL not answering": Case(
        ("sub", "ls"),
        "store_unavailable",
        3,
        {"database_url": "postgresql+psycopg://postgres@127.0.0.1:1/none"},
    ),
    "export from a store never migrated": Case(("export", "out.parquet"), "no_schema", 2),
    "match on a store never migrated": Case(("match", "a"), "no_schema", 2),
    "sub ls on a store never migrated": Case(("sub", "ls"), "no_schema", 2),
    "sub rm on a store never migrated": Case(("sub", "rm", "1"), "no_schema", 2),
    "route from a store never migrated": Case(
        ("route", "--messages", "messages.jsonl", "--out", "routed"),
        "no_schema",
        2,
        NO_CLASS_ARCHIVE,
    ),
    "route with messages that are not there": Case(
        ("route", "--messages", "gone.parquet", "--out", "routed", "--subscriptions", "s.parquet"),
        "path_not_found",
        2,
        NO_CLASS_ARCHIVE,
        prepare=True,
    ),
}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory where ``migrate`` made the default store and ``export`` wrote it to
    ``s.parquet``, which the cases that ``prepare`` copy."""
    directory = tmp_path_factory.mktemp("prepared")
    migrated = run_cli(directory, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    exported = run_cli(directory, "export", "s.parquet")
    assert exported.returncode == 0, exported.stderr
    return directory


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_known_error_is_one_line_and_an_exit_status(
    case: Case, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if case.prepare:
        shutil.copytree(request.getfixturevalue("prepared"), tmp_path, dirs_exist_ok=True)
    (tmp_path / "messages.jsonl").write_text('{"message_id": "m", "topic": "a", "ts": 1}\n')
    result = run_cli(tmp_path, *case.args, **case.settings)
    assert_one_error(result, case.code, case.status)
    assert "API:" not in result.stdout  # serve announced nothing
    if not (case.prepare or case.writes):
        assert not (tmp_path / "data").exists()  # no store was created to read from
        assert not (tmp_path / "out.parquet").exists()


def test_a_command_that_creates_the_store_says_which(tmp_path: Path) -> None:
    added = run_cli(tmp_path, "sub", "add", "q", "a.b")
    created = tmp_path / "data" / "topicstore.duckdb"
    assert added.returncode == 0, added.stderr
    assert added.stderr.splitlines() == [f"creating a new store: {created.resolve()}"]
    again = run_cli(tmp_path, "sub", "add", "q", "a.c")
    assert again.returncode == 0 and again.stderr == ""


def test_match_prints_one_subscriber_a_line(tmp_path: Path) -> None:
    for name, pattern in (("alice", "a.*"), ("grace,inc", "a.#"), ("bob", "b.#")):
        added = run_cli(tmp_path, "sub", "add", name, pattern, "--label", "team=x")
        assert added.returncode == 0, added.stderr
    matched = run_cli(tmp_path, "match", "a.b")
    assert matched.returncode == 0, matched.stderr
    assert matched.stdout.splitlines() == ["alice", "grace,inc"]
    assert "matched: 2 subscriptions, 2 subscribers" in matched.stderr
    as_json = run_cli(tmp_path, "match", "a.b", "--json")
    assert json.loads(as_json.stdout) == {
        "subscriptions": [1, 2],
        "subscribers": ["alice", "grace,inc"],
        "groups": [],
    }
    listed = run_cli(tmp_path, "sub", "ls")
    assert listed.stdout.splitlines() == [
        "ID  SUBSCRIBER  DIALECT  PATTERN  GROUP  EXPIRES  LABELS  MATCHES  LAST",
        "1   alice       amqp     a.*      -      -        team=x  0        -",
        "2   grace,inc   amqp     a.#      -      -        team=x  0        -",
        "3   bob         amqp     b.#      -      -        team=x  0        -",
    ]


# -- while a server holds the store -------------------------------------------------------


@pytest.fixture(scope="module")
def held(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    """A real server on a DuckDB file (which it holds) with two subscriptions."""
    directory = tmp_path_factory.mktemp("held")
    settings = {"database_url": "duckdb:///data/held.duckdb", "admin_token": ADMIN}
    for pattern in ("held.*", "held.#"):
        added = run_cli(directory, "sub", "add", "q", pattern, "--label", "k=v", **settings)
        assert added.returncode == 0, added.stderr
    listed = run_cli(directory, "sub", "ls", "--json", **settings)
    (directory / "direct.json").write_text(listed.stdout)
    with running_server(directory, settings) as server:
        server.wait_until("/readyz", 200)
        yield server, directory


def _through(server: Server, **more: str) -> dict[str, str]:
    """Settings for a command on the held store: it goes through ``server``."""
    return {
        "database_url": "duckdb:///data/held.duckdb",
        "admin_token": ADMIN,
        "port": str(server.port),
        **more,
    }


SERVER_CASES = {
    "a second serve": (("serve", "--port", "1"), "database_locked", 3),
    "migrate": (("migrate",), "database_locked", 3),
    "a 300-byte topic": (("match", LONG_TOPIC), "topic_too_long", 1),
    "unknown dialect": (("match", "a", "--dialect", "kafka"), "invalid_dialect", 2),
}


@pytest.mark.parametrize(("args", "code", "status"), SERVER_CASES.values(), ids=SERVER_CASES)
def test_a_known_error_while_the_server_runs(
    held: tuple[Server, Path], args: tuple[str, ...], code: str, status: int
) -> None:
    server, directory = held
    result = run_cli(directory, *args, **_through(server))
    hint = "stop that process" if code == "database_locked" else None
    assert_one_error(result, code, status, hint)
    assert "API:" not in result.stdout and "DEVELOPMENT MODE" not in result.stdout


def test_route_while_the_server_holds_the_store(held: tuple[Server, Path]) -> None:
    """Refused before Spark starts, pointing to the two ways that work (the next test
    takes the first)."""
    server, directory = held
    (directory / "route.jsonl").write_text('{"message_id": "m", "topic": "held.a", "ts": 1}\n')
    args = ("route", "--messages", "route.jsonl", "--out", "routed")
    result = run_cli(directory, *args, **_through(server, **NO_CLASS_ARCHIVE))
    assert_one_error(result, "database_locked", 3, "read the subscriptions through that service")
    assert "route --api URL" in result.stderr and "--subscriptions subs.parquet" in result.stderr
    assert not (directory / "routed").exists()


def test_route_reads_the_subscriptions_through_the_api(
    held: tuple[Server, Path], spark: SparkSession, tmp_path: Path
) -> None:
    server, directory = held
    # The held store's two, and whatever the module's other tests added meanwhile.
    stored = run_cli(directory, "sub", "ls", "--json", **_through(server))
    count = len(json.loads(stored.stdout))
    messages = tmp_path / "messages.jsonl"
    lines = [
        {"message_id": "m1", "topic": "held.a", "ts": 1},
        {"message_id": "m2", "topic": "other", "ts": 2},
    ]
    messages.write_text("".join(json.dumps(line) + "\n" for line in lines))
    args = ["route", "--messages", str(messages), "--out", str(tmp_path / "routed")]
    routed = CliRunner().invoke(route_app, [*args, "--api", server.url, "--token", ADMIN])
    assert routed.exit_code == 0, routed.output
    summary = json.loads((tmp_path / "routed" / "_summary.json").read_text())
    assert summary["subscriptions_source"] == server.url
    assert (summary["subscriptions"], summary["deliveries"], summary["unmatched"]) == (count, 2, 1)
    wrong = CliRunner().invoke(route_app, [*args, "--api", server.url, "--token", "x" * 20])
    assert wrong.exit_code == 1 and wrong.output.startswith("error: unauthorized: ")
    assert "hint: give the service's token in TOPICSTORE_ADMIN_TOKEN" in wrong.output


def test_a_wrong_token_while_the_server_runs(held: tuple[Server, Path]) -> None:
    server, directory = held
    wrong = run_cli(directory, "sub", "ls", **_through(server, admin_token="x" * 20))
    assert_one_error(wrong, "unauthorized", 1, "the service takes TOPICSTORE_ADMIN_TOKEN")


def test_the_server_not_answering(tmp_path: Path) -> None:
    result = run_cli(tmp_path, "sub", "ls", "--api", "http://127.0.0.1:1", admin_token=ADMIN)
    assert_one_error(result, "service_unavailable", 3)


def test_listing_through_the_api_prints_what_the_store_does(held: tuple[Server, Path]) -> None:
    server, directory = held
    through = run_cli(directory, "sub", "ls", "--json", **_through(server))
    assert through.returncode == 0, through.stderr
    direct = json.loads((directory / "direct.json").read_text())
    assert len(direct) == 2
    assert json.loads(through.stdout) == direct


def test_import_through_the_api_stores_the_good_lines(held: tuple[Server, Path]) -> None:
    server, directory = held
    path = directory / "import.jsonl"
    lines = [
        {"subscriber": "i", "pattern": "imp.one"},
        {"subscriber": "i", "pattern": "imp.two", "dialect": "kafka"},
        {"subscriber": "i\n", "pattern": "imp.three"},
        {"subscriber": "i", "pattern": "imp.four"},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    result = run_cli(directory, "sub", "import", str(path), "--json", **_through(server))
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert (report["created"], report["failed"]) == (2, 2)
    assert [(e["line"], e["code"]) for e in report["errors"]] == [
        (2, "invalid_request"),
        (3, "control_character"),
    ]
    matched = run_cli(directory, "match", "imp.four", "--json", **_through(server))
    assert json.loads(matched.stdout)["subscribers"] == ["i"]


def test_export_refuses_a_store_never_migrated_and_writes_nothing(tmp_path: Path) -> None:
    result = run_cli(tmp_path, "export", "out.parquet")
    assert_one_error(result, "no_schema", 2)
    # Run outside the service's directory, the default store is another, new one: the
    # error says which store and which setting chose it, the hint how to reach the service.
    store = tmp_path / "data" / "topicstore.duckdb"
    assert result.stderr.startswith(
        f"error: no_schema: no topicstore tables in {store} (the default store, "
        "duckdb:///./data/topicstore.duckdb, relative to the current directory)\n"
    )
    hint = result.stderr.splitlines()[1]
    assert hint.startswith("hint: ") and "--api URL" in hint, result.stderr
    assert "TOPICSTORE_ADMIN_TOKEN" in hint and "TOPICSTORE_DATABASE_URL" in hint
    assert "`topicstore migrate` makes a new, empty store here" in hint
    named = run_cli(tmp_path, "sub", "ls", database_url="duckdb:///elsewhere.duckdb")
    assert_one_error(named, "no_schema", 2)
    assert "elsewhere.duckdb (named by TOPICSTORE_DATABASE_URL)" in named.stderr
    (tmp_path / ".env").write_text("TOPICSTORE_DATABASE_URL=duckdb:///dotenv.duckdb\n")
    from_file = run_cli(tmp_path, "match", "a")
    assert_one_error(from_file, "no_schema", 2)
    assert "dotenv.duckdb (named by TOPICSTORE_DATABASE_URL in ./.env)" in from_file.stderr
    (tmp_path / ".env").unlink()
    migrated = run_cli(tmp_path, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert "creating a new store: " in migrated.stderr
    exported = run_cli(tmp_path, "export", "out.parquet")
    assert exported.returncode == 0, exported.stderr
    assert pq.read_table(tmp_path / "out.parquet").num_rows == 0


@pytest.mark.parametrize("target", ["missing.csv", "."])
def test_import_of_no_file_is_a_usage_error_and_creates_no_store(
    target: str, tmp_path: Path
) -> None:
    done = run_cli(tmp_path, "sub", "import", target)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert ("does not exist" if target != "." else "is a directory") in done.stderr
    assert not (tmp_path / "data").exists()


def test_redundant_of_a_subscriber_without_patterns_says_so(tmp_path: Path) -> None:
    assert run_cli(tmp_path, "sub", "add", "someone", "a.b").returncode == 0
    done = run_cli(tmp_path, "sub", "redundant", "nobody")
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "error: not_found: 'nobody' has no amqp subscriptions (tenant default)"
    )
    found = run_cli(tmp_path, "sub", "redundant", "someone")
    assert (found.returncode, found.stdout.strip()) == (0, "(none of 1 redundant)")


def test_a_single_add_is_audited_as_a_create(tmp_path: Path) -> None:
    """As ``POST /v1/subscriptions`` is; an import is the bulk create."""
    assert run_cli(tmp_path, "sub", "add", "someone", "a.b").returncode == 0
    again = run_cli(tmp_path, "sub", "add", "someone", "a.b")
    assert (again.returncode, again.stdout.strip()) == (0, "exists subscription 1")
    refused = run_cli(tmp_path, "sub", "add", "someone", "a/#/b", "--dialect", "mqtt")
    assert_one_error(refused, "invalid_wildcard", 1)
    audit = run_cli(tmp_path, "audit", "--json")
    assert [entry["action"] for entry in json.loads(audit.stdout)] == ["create"]


def test_analytics_reports_its_errors_as_every_command_does(tmp_path: Path) -> None:
    done = run_cli(tmp_path, "analytics", "subscribers", "--deliveries", "nowhere")
    assert_one_error(done, "no_deliveries", 2)
    assert done.stderr.startswith("error: no_deliveries: ")
