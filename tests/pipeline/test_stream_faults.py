"""Exactly once under faults: ``topicstore route --follow`` run as a user runs it, in its
own process group, killed with SIGKILL (driver and its JVM at once) first in the middle of a
micro-batch's write and then between the batch's write and its commit; restarted on the same
checkpoint each time (the last time by the same command in the test's process, on its Spark
session), it finishes, and its table holds exactly the rows the batch ``route`` writes for
the same messages and subscriptions: none missing, none twice.

The second point is a few milliseconds wide, so the test holds the driver there from
outside rather than through a fault hook in the product: once the executors have started
writing the batch's staged files, the test plants a named pipe as the table log's
``_last_checkpoint``, which delta-rs opens whenever it loads the table. The write finishes,
then the driver's commit opens the table and waits on the pipe; the test sees it waiting (a
pipe with a reader accepts a writer), keeps the pipe open without writing, and kills. The
kill lands there, every time."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import pytest
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from harness.server import service_environment, topicstore_command
from pipeline.cli import app
from pipeline.job import RouteJob
from pipeline.job import run as route
from tests.pipeline.conftest import generate
from tests.pipeline.landing import Store, deliveries, land, routed_rows

WAIT_S: Final = 180.0
FILES: Final = 3


class Driver:
    """One ``topicstore route`` process (and its JVM, in the same new process group)."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                [*topicstore_command(), "route", *args],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def kill(self) -> None:
        """SIGKILL to the whole group: the Python driver, Spark's JVM and its workers."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def wait_for(self, what: str, done: Callable[[], object]) -> None:
        deadline = time.monotonic() + WAIT_S
        while not done():
            if self.process.poll() is not None:
                pytest.fail(f"the stream exited before {what}:\n{self.log.read_text()}")
            if time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"no {what} after {WAIT_S} s:\n{self.log.read_text()}")
            time.sleep(0.005)


def _committed(out: Path, version: int) -> bool:
    return (out / "_delta_log" / f"{version:020d}.json").is_file()


def _staged(out: Path, batch: int) -> Path | None:
    return next(iter(out.glob(f"batch-{batch}-*")), None)


def _writing(out: Path, batch: int) -> bool:
    """Whether the executors have started writing ``batch``'s files."""
    staged = _staged(out, batch)
    return staged is not None and any(staged.rglob("part-*.parquet"))


def _reader_waiting(pipe: Path, opened: list[int]) -> bool:
    """Whether a reader is opening ``pipe``: then a writer can open it too (kept in
    ``opened``, so the reader then waits for data instead)."""
    try:
        opened.append(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))
    except OSError as e:
        if e.errno != errno.ENXIO:  # ENXIO: no reader yet
            raise
        return False
    return True


@contextmanager
def _running(args: list[str], env: dict[str, str], log: Path) -> Iterator[Driver]:
    driver = Driver(args, env, log)
    try:
        yield driver
    finally:
        if driver.process.poll() is None:
            driver.kill()


@pytest.mark.slow
def test_a_stream_killed_mid_batch_and_before_its_commit_delivers_each_message_once(
    spark: SparkSession, tmp_path: Path
) -> None:
    data = generate(subscriptions=30, messages=FILES * 25, seed=34, tenants=("t1", "t2"))
    store = Store(f"duckdb:///{tmp_path / 'store.duckdb'}")
    store.add([(t, s, p) for _, t, s, p in data.subscriptions])
    files = [data.messages[i::FILES] for i in range(FILES)]
    landing, out = tmp_path / "landing", tmp_path / "out"
    landing.mkdir()
    log = tmp_path / "driver.log"
    args = [
        *("--messages", str(landing), "--out", str(out), "--master", "local[2]"),
        *("--database-url", store.url, "--class-archive", "off"),
    ]
    env = service_environment({})

    follow = [*args, "--follow", "--trigger-interval", "0.2"]
    land(landing, "f0.jsonl", files[0])
    with _running(follow, env, log) as first:
        first.wait_for("batch 0's staged files", lambda: _writing(out, 0))
        first.kill()  # mid-batch: the executors are writing batch 0
    assert not _committed(out, 0)

    # Restarted, the stream runs batch 0 again (the same file), then batch 1 with f1.
    land(landing, "f1.jsonl", files[1])
    with _running(follow, env, log) as second:
        second.wait_for("batch 1's staged files", lambda: _staged(out, 1))
        hold = out / "_delta_log" / "_last_checkpoint"
        os.mkfifo(hold)
        opened: list[int] = []
        second.wait_for("batch 1's commit", lambda: _reader_waiting(hold, opened))
        second.kill()  # batch 1 is written; its commit is opening the table's log
    os.close(opened[0])
    hold.unlink()
    assert _committed(out, 0) and not _committed(out, 1)

    # The last restart is the same command in this process, on the shared session: a new
    # driver on the same checkpoint as well, without a third JVM to start.
    land(landing, "f2.jsonl", files[2])
    finish = CliRunner().invoke(app, ["route", *args, "--available-now"])
    assert finish.exit_code == 0, finish.output
    assert "batch 1:" in finish.output and "batch 2:" in finish.output, finish.output
    assert "batch 0:" not in finish.output, finish.output  # committed before the kill

    # The batch route over the same files and the same (unchanged) store.
    batch = tmp_path / "batch"
    route(spark, RouteJob(messages=str(landing), out=batch, database_url=store.url))
    streamed = routed_rows(out)
    assert streamed == routed_rows(batch)
    assert max(streamed.values()) == 1  # message ids are unique: no row twice
    expected = store.expected(data.messages)
    assert expected and deliveries(out) == expected
