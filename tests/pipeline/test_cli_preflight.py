"""What ``topicstore route`` refuses before it starts Spark's JVM: an input that is not
there, an output it cannot make, no Java or a broken one, a store never migrated or held by
another process. Each runs the real command in a process of its own (Java is looked for in
that process's environment); none starts a JVM, which the class archive directory (made
only for a JVM) shows."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from harness.server import run_command, service_environment
from pipeline.cli import app

TIMEOUT_S = 120


def route(
    directory: Path, *args: str, env: Mapping[str, str | None] = {}
) -> subprocess.CompletedProcess[str]:
    """``topicstore route ARGS`` in ``directory`` without TOPICSTORE_* variables but its
    class archive's (in ``directory/archive``), and ``env`` over the rest (None: unset)."""
    environ = service_environment({"spark_class_archive": str(directory / "archive")})
    for name, value in env.items():
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = value
    return run_command(["route", *args], environ, directory, TIMEOUT_S)


def assert_refused(
    result: subprocess.CompletedProcess[str], directory: Path, code: str, status: int
) -> list[str]:
    """One ``error: CODE:`` line, the exit status, no traceback, no JVM started, nothing
    written; returns the lines of stderr."""
    context = f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    lines = result.stderr.splitlines()
    assert "Traceback" not in result.stderr and "JAVA_GATEWAY" not in result.stderr, context
    assert [line for line in lines if line.startswith("error: ")] == [
        line for line in lines if line.startswith(f"error: {code}: ")
    ], context
    assert any(line.startswith(f"error: {code}: ") for line in lines), context
    assert result.returncode == status, context
    assert not (directory / "archive").exists(), context  # the JVM never started
    assert not (directory / "routed").exists(), context
    return lines


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    """A directory with one message (messages.jsonl) and one subscription (subs.parquet)."""
    (tmp_path / "messages.jsonl").write_text('{"message_id": "m", "topic": "a.b", "ts": 1}\n')
    pq.write_table(
        pa.table({"id": [1], "subscriber": ["q"], "pattern": ["a.*"]}), tmp_path / "subs.parquet"
    )
    return tmp_path


GIVEN = ("--messages", "messages.jsonl", "--out", "routed", "--subscriptions", "subs.parquet")


def test_a_missing_messages_path_is_one_line_before_spark_starts(inputs: Path) -> None:
    result = route(inputs, "--messages", "gone.jsonl", "--out", "routed")
    lines = assert_refused(result, inputs, "path_not_found", 2)
    assert lines == [
        f"error: path_not_found: --messages: no such file or directory: {inputs}/gone.jsonl"
    ]
    assert not (inputs / "data").exists()  # no store was opened, none created


@pytest.mark.parametrize(
    ("args", "code", "named"),
    [
        (("--messages", "parts/*.parquet", "--out", "routed"), "path_not_found", "parts/*"),
        (
            ("--messages", "messages.jsonl", "--out", "routed", "--subscriptions", "gone"),
            "path_not_found",
            "--subscriptions",
        ),
        (("--messages", "messages.jsonl", "--out", "subs.parquet"), "invalid_output", "--out"),
        (
            ("--messages", "messages.jsonl", "--out", "subs.parquet/routed"),
            "invalid_output",
            "not writable",
        ),
    ],
    ids=["a glob", "subscriptions", "out a file", "out under a file"],
)
def test_every_path_is_checked_before_spark_starts(
    inputs: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], code: str, named: str
) -> None:
    """The other paths, in this process (no JVM is started either way)."""
    monkeypatch.chdir(inputs)
    result = CliRunner().invoke(app, ["route", *args])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: {code}: ") and named in result.output
    assert not (inputs / "routed").exists() and not (inputs / "data").exists()


def test_no_java_is_one_line_before_spark_starts(inputs: Path) -> None:
    nothing = route(inputs, *GIVEN, env={"JAVA_HOME": None, "PATH": str(inputs / "no-bin")})
    lines = assert_refused(nothing, inputs, "java_not_found", 2)
    assert "no java on the PATH and JAVA_HOME is not set" in lines[0] and "Java 17" in lines[0]

    nowhere = route(inputs, *GIVEN, env={"JAVA_HOME": str(inputs / "no-jdk")})
    lines = assert_refused(nowhere, inputs, "java_not_found", 2)
    assert f"JAVA_HOME is {inputs / 'no-jdk'}, which has no bin/java" in lines[0]

    broken = inputs / "broken-jdk"
    (broken / "bin").mkdir(parents=True)
    (broken / "bin" / "java").write_text("")  # a partial install: not even executable
    result = route(inputs, *GIVEN, env={"JAVA_HOME": str(broken)})
    lines = assert_refused(result, inputs, "java_unusable", 2)
    assert str(broken / "bin" / "java") in lines[0]


def test_a_store_never_migrated_points_to_the_other_ways(inputs: Path) -> None:
    result = route(inputs, "--messages", "messages.jsonl", "--out", "routed")
    lines = assert_refused(result, inputs, "no_schema", 2)
    assert str(inputs / "data" / "topicstore.duckdb") in lines[0]
    assert "hint: " in result.stderr and "route --api URL" in result.stderr
    assert "--subscriptions FILE" in result.stderr
    assert not (inputs / "data").exists()


def test_a_store_another_process_holds_points_to_the_api(inputs: Path) -> None:
    """DuckDB lets one process open its file: a running service holds it (here this test
    process does). Refused at once with exit status 3, pointing to --api and an export."""
    (inputs / "data").mkdir()
    held = duckdb.connect(str(inputs / "data" / "topicstore.duckdb"))
    try:
        result = route(inputs, "--messages", "messages.jsonl", "--out", "routed")
    finally:
        held.close()
    assert_refused(result, inputs, "database_locked", 3)
    hint = [line for line in result.stderr.splitlines() if line.startswith("hint: ")]
    assert len(hint) == 1 and "route --api URL" in hint[0], result.stderr
    assert "topicstore export subs.parquet" in hint[0] and "--subscriptions" in hint[0]
