"""A PostgreSQL server of the test's own (initdb in a temporary directory, its own port),
for tests that stop and restart the database under a running service: the shared server
on 5432 must never be stopped by a test."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.server import free_port
from harness.services import require


def _binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if found:
        return Path(found[-1]).parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).parent if pg_ctl else None


class PrivatePostgres:
    """One server: ``url`` to connect, ``stop()`` and ``start()`` to take it away and back."""

    def __init__(self, directory: Path, binaries: Path) -> None:
        self.directory = directory
        self.data = directory / "data"
        self.binaries = binaries
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        command = [str(self.binaries / args[0]), *args[1:]]
        if os.geteuid() == 0:  # initdb and postgres refuse to run as root
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.directory, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1"
        log = str(self.directory / "server.log")
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", log, "-w", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")


@contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """A fresh server, started; stopped (if running) and removed at the end. Its directory
    is a new one under the system's temporary directory, not pytest's ``tmp_path``: that one
    is private to this user, and the server runs as ``postgres`` when the tests run as root."""
    binaries = _binaries()
    require(binaries is not None, "PostgreSQL's server binaries (initdb, pg_ctl)")
    assert binaries is not None
    directory = Path(tempfile.mkdtemp(prefix="topicstore-pg-"))
    server = PrivatePostgres(directory, binaries)
    try:
        server.init()
        server.start()
        yield server
    finally:
        if (server.data / "postmaster.pid").exists():
            server.stop()
        shutil.rmtree(directory, ignore_errors=True)
