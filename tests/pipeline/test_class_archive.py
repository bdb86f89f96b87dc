"""The local JVM's class-data archive (``pipeline.session``): where it is kept, recorded by
a run that completes and only then, mapped by the next run's JVM. Each run is a fresh
Python process (a JVM starts once per process), as ``topicstore route`` is."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.server import service_environment, topicstore_command
from pipeline.cli import class_archive_file
from pipeline.session import _archive_options

#: A process that starts a local JVM with the archive, runs a query, reports the JVM's
#: options, and says the run was complete when asked to.
SCRIPT = textwrap.dedent(
    """
    import logging, sys
    from pathlib import Path
    from pipeline.session import class_archive_complete, spark_session
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    spark = spark_session("local[1]", class_archive=Path(sys.argv[1]))
    assert spark.range(100).selectExpr("sum(id)").collect()[0][0] == 4950
    jvm = spark.sparkContext._jvm
    print("\\n".join(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
          .getInputArguments()))
    spark.stop()
    if sys.argv[2] == "complete":
        class_archive_complete()
    """
)


def _run(archive: Path, complete: bool) -> tuple[list[str], list[str]]:
    """The JVM's options, and what the run said about its class archive."""
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(archive), "complete" if complete else "failed"],
        env=service_environment({}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[warning][cds]" not in result.stderr, result.stderr
    said = [line for line in result.stderr.splitlines() if "class archive" in line]
    return result.stdout.splitlines(), said


def test_the_archive_is_kept_per_user_and_keyed_by_the_install(tmp_path: Path) -> None:
    assert class_archive_file("off", {}) is None
    archive = class_archive_file(str(tmp_path), {})
    assert archive is not None and archive.parent == tmp_path
    assert archive.name.startswith("spark-") and archive.suffix == ".jsa"
    cache = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    assert class_archive_file("", cache) == tmp_path / "cache" / "topicstore" / archive.name
    assert class_archive_file("", {}) == Path.home() / ".cache" / "topicstore" / archive.name
    java_home = {"JAVA_HOME": str(tmp_path / "no-java-here")}
    other = class_archive_file(str(tmp_path), java_home)
    assert other is not None and other != archive  # another Java, another archive


def test_a_recording_left_by_a_killed_run_goes_when_the_next_records(tmp_path: Path) -> None:
    archive = tmp_path / "spark-4-0123456789abcdef.jsa"
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = tmp_path / f".{archive.name}.{gone.pid}"
    running = tmp_path / f".spark-3-fedcba9876543210.jsa.{os.getppid()}"
    for left in (stale, running):
        left.write_bytes(b"part of an archive")
    _, recording = _archive_options(archive)
    assert recording == tmp_path / f".{archive.name}.{os.getpid()}"
    assert not stale.exists()
    assert running.exists()  # its run is alive: still recording


def test_route_takes_its_archive_directory_from_the_settings(tmp_path: Path) -> None:
    """``topicstore route`` reads TOPICSTORE_SPARK_CLASS_ARCHIVE through the one Settings (a
    ``.env`` file too): its JVM records into that directory (made for it), saying so, and a
    run that fails keeps nothing there."""
    directory = tmp_path / "archives"
    (tmp_path / ".env").write_text(f"TOPICSTORE_SPARK_CLASS_ARCHIVE={directory}\n")
    (tmp_path / "messages.jsonl").write_text('{"message_id": "m", "topic": "a", "ts": 1}\n')
    # Subscriptions without a pattern column: found by the job, once Spark runs.
    pq.write_table(pa.table({"id": [1], "subscriber": ["q"]}), tmp_path / "subs.parquet")
    args = ["route", "--messages", "messages.jsonl", "--out", "routed"]
    args += ["--subscriptions", "subs.parquet"]
    result = subprocess.run(
        [*topicstore_command(), *args],
        env=service_environment({}),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "error: missing_column:" in result.stderr
    assert directory.is_dir()
    assert list(directory.iterdir()) == []
    said = [line for line in result.stderr.splitlines() if "class archive" in line]
    assert len(said) == 1 and said[0].startswith("recording Spark's class archive"), said
    assert str(directory) in said[0]


# That a run which does not complete keeps nothing is the route test's above (the same
# exit path, one JVM fewer: each recording run writes its archive for seconds as it exits).
@pytest.mark.slow
def test_a_complete_run_records_the_archive_and_the_next_maps_it(tmp_path: Path) -> None:
    archive = tmp_path / "archive" / "spark.jsa"
    options, said = _run(archive, complete=True)
    assert any(o.startswith("-XX:ArchiveClassesAtExit=") for o in options)
    assert [p.name for p in archive.parent.iterdir()] == [archive.name]
    assert archive.stat().st_size > 1_000_000
    assert said[0].startswith("recording ") and said[1].startswith("recorded Spark's class")
    assert len(said) == 2 and said[1].endswith(str(archive))
    options, said = _run(archive, complete=True)
    assert said == []  # mapping it is said nowhere
    assert f"-XX:SharedArchiveFile={archive}" in options
    assert not any(o.startswith("-XX:ArchiveClassesAtExit=") for o in options)
    assert os.listdir(archive.parent) == [archive.name]  # mapping it writes nothing
