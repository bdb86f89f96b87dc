"""A real ``topicstore serve`` (uvicorn) in its own process on a free port of 127.0.0.1:
started with given settings, waited for, talked to, stopped, its output read. The one
harness of the API tests and ``bench.api_load``.

While the test suite runs, the process is forked from a zygote that has imported the
command line already (``harness.zygote``): the same entry point, arguments, environment and
directory, without the seconds of imports.

The child runs this checkout's ``app`` package (``PYTHONPATH`` points at it), not whatever
``topicstore`` script happens to be installed, and it starts in a directory of the caller's
choosing so that no stray ``.env`` file is read.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import httpx

from harness.zygote import ENTRY, Forked, forking, zygote
from harness.zygote import run as run_forked

#: How long a server may take to answer, and to stop once asked.
STARTUP_TIMEOUT_S: Final = 120.0
STOP_TIMEOUT_S: Final = 15.0
#: Lines of the server's output quoted when it fails.
TAIL_LINES: Final = 60

#: The directory holding the ``app`` package this process imports.
_SOURCE_ROOT: Final = Path(__file__).resolve().parent.parent


class ServerError(RuntimeError):
    """The server exited, or did not answer as expected in time; the message quotes its
    output."""


def free_port() -> int:
    """A port on 127.0.0.1 nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def topicstore_command() -> list[str]:
    """argv that runs the ``topicstore`` command line of this checkout (with the environment
    of ``service_environment``)."""
    return [sys.executable, "-c", ENTRY]


def run_command(
    args: Sequence[str], env: Mapping[str, str], cwd: Path, timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """``topicstore ARGS`` of this checkout run to its end in ``cwd`` with ``env``, its output
    captured as text: forked from the zygote while the suite runs (``harness.zygote``), else
    a process of its own; ``subprocess.TimeoutExpired`` after ``timeout_s``."""
    if forking():
        return run_forked(args, env, cwd, timeout_s)
    return subprocess.run(
        [*topicstore_command(), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def service_environment(settings: Mapping[str, str]) -> dict[str, str]:
    """This process's environment without any ``TOPICSTORE_*``, plus ``settings`` (named
    without the prefix: ``database_url``); output unbuffered so it can be read while the
    server runs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOPICSTORE_")}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_SOURCE_ROOT), env.get("PYTHONPATH")]))
    env.update({f"TOPICSTORE_{name.upper()}": value for name, value in settings.items()})
    return env


@dataclass
class Server:
    """A ``topicstore serve`` process; its stdout and stderr go to ``log``."""

    process: subprocess.Popen[bytes] | Forked
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, headers: Mapping[str, str], timeout_s: float = 30.0) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=dict(headers), timeout=timeout_s)

    def cpu_seconds(self) -> float:
        """User + system CPU seconds the server process has spent, all its threads
        (``/proc/<pid>/stat``: a measure of its work that the machine's load does not
        inflate)."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def tail(self) -> str:
        return "\n".join(self.output().splitlines()[-TAIL_LINES:])

    def stop(self, *, kill: bool = False) -> int:
        """Terminate (SIGTERM: uvicorn's graceful shutdown) or kill the process and wait for
        it; kill it if it lingers. Returns the exit status (uvicorn re-raises SIGTERM after
        its graceful shutdown: -15)."""
        if self.process.poll() is None:
            if kill:
                self.process.kill()
            else:
                self.process.terminate()
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=STOP_TIMEOUT_S)
        return self.process.wait()  # ended: its status

    def wait_until(
        self, path: str, status: int = 200, timeout_s: float = STARTUP_TIMEOUT_S
    ) -> httpx.Response:
        """Poll ``path`` until it answers ``status``; ``ServerError`` if the process exits
        or ``timeout_s`` passes."""
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        while True:
            if self.process.poll() is not None:
                raise ServerError(f"server exited ({self.process.returncode}):\n{self.tail()}")
            try:
                response = httpx.get(self.url + path, timeout=5)
            except httpx.TransportError as e:
                last = repr(e)
            else:
                if response.status_code == status:
                    return response
                last = f"{response.status_code} {response.text}"
            if time.monotonic() > deadline:
                raise ServerError(f"{path} never answered {status} (last: {last}):\n{self.tail()}")
            time.sleep(0.05)


def start_server(
    directory: Path,
    settings: Mapping[str, str],
    startup_timeout_s: float = STARTUP_TIMEOUT_S,
    args: Sequence[str] = (),
) -> Server:
    """Start ``topicstore serve`` in ``directory`` with ``settings`` (``TOPICSTORE_*``
    without the prefix) and ``args`` on a free port, and wait until it answers /healthz."""
    port = free_port()
    log = directory / f"server-{port}.log"
    command = ["serve", "--host", "127.0.0.1", "--port", str(port), *args]
    env = service_environment(settings)
    process: subprocess.Popen[bytes] | Forked
    with log.open("wb") as out:
        if forking():
            process = zygote().spawn(command, env, directory, subprocess.DEVNULL, out, out)
        else:
            process = subprocess.Popen(
                [*topicstore_command(), *command],
                env=env,
                cwd=directory,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
    server = Server(process, port, log)
    try:
        server.wait_until("/healthz", 200, startup_timeout_s)
    except BaseException:
        server.stop()
        raise
    return server


@contextmanager
def running_server(
    directory: Path,
    settings: Mapping[str, str],
    startup_timeout_s: float = STARTUP_TIMEOUT_S,
    args: Sequence[str] = (),
) -> Iterator[Server]:
    """``start_server``, stopped on exit whatever happened."""
    server = start_server(directory, settings, startup_timeout_s, args)
    try:
        yield server
    finally:
        server.stop()
