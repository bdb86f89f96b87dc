"""``topicstore`` commands started by forking a process that has imported them already.

Every server and command line a test starts is a Python process that imports SQLAlchemy,
FastAPI, pyarrow, DuckDB, psycopg, uvicorn and our packages before it does anything: about
two CPU seconds of a server's two and a half to answer ``/healthz`` on a 2-core machine,
paid for each of the suite's hundreds of processes. A zygote (Android's word; Python's
``forkserver`` is the same idea) imports them once per pytest worker and forks a child per
command; the child takes the caller's argv, environment, working directory and standard
streams, and runs the same entry point as ``topicstore_command()``
(``from app.cli import main; main()``) to its normal interpreter exit. What a command does
is the command's own code in a process of its own, so a test of it still tests it; what
the zygote leaves out is only the interpreter's start and the imports, which the tests
that are about them (the README's commands, ``make run``, the import-graph checks) keep
running as fresh processes.

The child is the zygote's, not the caller's: ``Forked`` stands for it with the part of
``subprocess.Popen`` the tests use (``pid``, ``poll``, ``wait``, ``returncode``, signals).
Its exit status comes back over the request's own connection (a ``SOCK_SEQPACKET`` Unix
socket: one message per request and answer), which the zygote keeps open until it has
reaped the child (it waits on each child's pidfd). The standard streams travel as file
descriptors (``SCM_RIGHTS``).

What a fresh interpreter would set up from the environment is set up again in the child:
the environment itself (``os.environ``, which the C library sees too), the time zone, the
standard streams' buffering (``PYTHONUNBUFFERED``), ``sys.argv``, a new session on request,
and ``random``'s seed (a fork shares its parent's state)."""

from __future__ import annotations

import atexit
import contextlib
import gc
import io
import json
import os
import random
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Final, NoReturn

#: What the zygote imports before it forks: what ``serve`` and the store's commands load
#: (Spark and matplotlib load inside ``route`` and the charts, as in a fresh process). Not
#: DuckDB: its import opens a default in-memory database with a scheduler thread, which a
#: forked child would lack yet wait for (it hangs, or aborts at exit); the children import
#: it themselves (``serve`` asserts none of these brought it in).
PRELOAD: Final = (
    "app.cli",
    "app.cli.direct",
    "app.cli.reads",
    "app.cli.subs",
    "app.serving",
    "app.main",
    "migrations.runner",
    "alembic",
    "app.connections",
    "typer._adapters",
    "psycopg",
    "uvicorn",
    "uvicorn.protocols.http.httptools_impl",
    "uvicorn.lifespan.on",
    "uvloop",
)
#: The command line's entry point, as ``python -c`` runs it (``harness.server.topicstore_command``).
ENTRY: Final = "from app.cli import main; main()"
#: A request's largest message (its argv and environment as JSON).
_MESSAGE_BYTES: Final = 1 << 20


class Forked:
    """A command the zygote forked: the part of ``subprocess.Popen`` the tests use."""

    def __init__(self, connection: socket.socket, pid: int, args: Sequence[str]) -> None:
        self._connection = connection
        self.pid = pid
        self.args = list(args)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit status if the command has ended (negative: the signal that ended it)."""
        if self.returncode is None:
            self._receive(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the command's end; ``subprocess.TimeoutExpired`` after ``timeout`` s."""
        if self.returncode is None:
            self._receive(timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # ended meanwhile
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _receive(self, timeout: float | None) -> None:
        self._connection.settimeout(timeout)
        try:
            message = self._connection.recv(_MESSAGE_BYTES)
        except (TimeoutError, BlockingIOError):
            return
        finally:
            self._connection.settimeout(None)
        if not message:
            raise RuntimeError(f"the zygote went away before command {self.pid} ended")
        self.returncode = int(json.loads(message)["returncode"])
        self._connection.close()


class Zygote:
    """One zygote process and how to ask it for a command (``spawn``)."""

    def __init__(self) -> None:
        self._directory = Path(tempfile.mkdtemp(prefix="topicstore-zygote-"))
        self._path = str(self._directory / "socket")
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}  # no BLAS threads to fork past
        source_root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [source_root, env.get("PYTHONPATH")]))
        self.process = subprocess.Popen(
            [sys.executable, "-c", f"from harness.zygote import serve; serve({self._path!r})"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
        )
        assert self.process.stdout is not None
        ready = self.process.stdout.readline()
        if ready != b"ready\n":
            self.process.kill()
            raise RuntimeError(f"the zygote did not start: {ready!r}")

    def spawn(
        self,
        args: Sequence[str],
        env: Mapping[str, str],
        cwd: Path | str,
        stdin: IO[Any] | int,
        stdout: IO[Any] | int,
        stderr: IO[Any] | int,
        start_new_session: bool = False,
    ) -> Forked:
        """``topicstore ARGS`` in a child with ``env``, ``cwd`` and the three streams (files
        or descriptors; ``subprocess.STDOUT`` as ``stderr`` shares stdout's)."""
        if stderr == subprocess.STDOUT:
            stderr = stdout
        with contextlib.ExitStack() as opened:
            fds = []
            for stream in (stdin, stdout, stderr):
                if stream == subprocess.DEVNULL:
                    stream = opened.enter_context(open(os.devnull, "r+b"))
                fds.append(stream if isinstance(stream, int) else stream.fileno())
            return self._request(args, env, cwd, fds, start_new_session)

    def _request(
        self,
        args: Sequence[str],
        env: Mapping[str, str],
        cwd: Path | str,
        fds: list[int],
        start_new_session: bool,
    ) -> Forked:
        request = {
            "args": list(args),
            "env": dict(env),
            "cwd": str(cwd),
            "session": start_new_session,
        }
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        connection.connect(self._path)
        socket.send_fds(connection, [json.dumps(request).encode()], fds)
        answer = connection.recv(_MESSAGE_BYTES)
        if not answer:
            raise RuntimeError(f"the zygote did not start {list(args)}")
        return Forked(connection, int(json.loads(answer)["pid"]), args)

    def close(self) -> None:
        self.process.kill()
        self.process.wait()
        with contextlib.suppress(OSError):
            os.unlink(self._path)
            self._directory.rmdir()


#: The environment variable that has ``harness.server`` and ``run`` fork from a zygote
#: (the test suite sets it: ``conftest.py``); without it they start fresh processes, as a
#: benchmark run from the command line does, like a user.
SWITCH: Final = "HARNESS_ZYGOTE"

_zygote: Zygote | None = None
_lock = threading.Lock()


def forking() -> bool:
    """Whether commands are forked from the zygote (``SWITCH``)."""
    return os.environ.get(SWITCH) == "1"


def zygote() -> Zygote:
    """This process's zygote, started at its first use and stopped at exit."""
    global _zygote
    with _lock:
        if _zygote is None or _zygote.process.poll() is not None:
            _zygote = Zygote()
            atexit.register(_zygote.close)
        return _zygote


def run(
    args: Sequence[str], env: Mapping[str, str], cwd: Path | str, timeout: float
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(topicstore_command() + ARGS, capture_output=True, text=True)``
    through the zygote (standard input: ``/dev/null``): its output, its exit status; killed
    and ``subprocess.TimeoutExpired`` after ``timeout`` seconds."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        forked = zygote().spawn(args, env, cwd, subprocess.DEVNULL, out, err)
        try:
            forked.wait(timeout)
        except subprocess.TimeoutExpired:
            forked.kill()
            forked.wait()
            raise
        out.seek(0)
        err.seek(0)
        stdout, stderr = (f.read().decode(errors="replace") for f in (out, err))
    return subprocess.CompletedProcess(list(args), forked.wait(), stdout, stderr)


def serve(path: str) -> None:
    """The zygote: import ``PRELOAD``, then fork a child per request on ``path`` until
    killed. Each request's connection gets the child's pid, then its exit status."""
    import ctypes
    import importlib

    # Killed with the pytest worker that started it, however that worker ends (PR_SET_PDEATHSIG;
    # the children it forks do not inherit it).
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    for name in PRELOAD:
        importlib.import_module(name)
    assert "duckdb" not in sys.modules, "a preloaded module imports DuckDB (see PRELOAD)"
    gc.freeze()  # the children's collections leave the zygote's objects (and pages) alone
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    #: pidfd -> (pid, the request's connection)
    children: dict[int, tuple[int, socket.socket]] = {}
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        for key, _ in selector.select():
            if key.fileobj is listener:
                connection, _ = listener.accept()
                message, fds, _, _ = socket.recv_fds(connection, _MESSAGE_BYTES, 3)
                request = json.loads(message)
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    listener.close()
                    for _, other in children.values():
                        other.close()
                    for pidfd in children:
                        os.close(pidfd)
                    connection.close()
                    _become(request, fds)
                for fd in fds:
                    os.close(fd)
                connection.send(json.dumps({"pid": pid}).encode())
                pidfd = os.pidfd_open(pid)
                children[pidfd] = (pid, connection)
                selector.register(pidfd, selectors.EVENT_READ)
            else:
                pidfd = int(key.fd)
                pid, connection = children.pop(pidfd)
                selector.unregister(pidfd)
                os.close(pidfd)
                _, status = os.waitpid(pid, 0)
                with contextlib.suppress(OSError):  # its caller gave up on it
                    connection.send(
                        json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode()
                    )
                connection.close()


def _become(request: dict[str, Any], fds: list[int]) -> NoReturn:
    """In the forked child: take the request's process state, run the command line, and
    exit as its interpreter would: its exit status, threads joined, atexit handlers run,
    the standard streams flushed."""
    if request["session"]:
        os.setsid()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    time.tzset()
    random.seed()
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.stdout, sys.stderr = (
        io.TextIOWrapper(
            io.BufferedWriter(io.FileIO(fd, "w", closefd=False)),
            line_buffering=fd == 2,  # as Python's own stderr
            write_through=unbuffered,
            errors="backslashreplace" if fd == 2 else "strict",
        )
        for fd in (1, 2)
    )
    sys.argv = ["-c", *request["args"]]
    try:
        exec(compile(ENTRY, "<string>", "exec"), sys.modules["__main__"].__dict__)
        status = 0
    except SystemExit as e:
        status = _exit_status(e.code)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        status = 1
    # What the interpreter's exit does that a command can see, in its order; not the
    # teardown of every module's objects, which in a forked child copies each page of the
    # zygote's heap it touches (a third of a second).
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(status)


def _exit_status(code: object) -> int:
    """The exit status of ``SystemExit(code)``, as the interpreter makes it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1
