"""A command forked from the test harness's zygote (``harness.zygote``) behaves as the same
command run as a fresh process: same output, same exit status, the caller's environment,
directory and streams; a server it forks stops with the signal it is sent."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from harness.server import run_command, service_environment, start_server
from harness.zygote import SWITCH, run, zygote

TIMEOUT_S = 120


def _fresh(
    args: list[str], env: dict[str, str], cwd: Path, monkeypatch: pytest.MonkeyPatch
) -> subprocess.CompletedProcess[str]:
    """``args`` as a process of its own (``run_command`` with the zygote switched off)."""
    with monkeypatch.context() as switched:
        switched.setenv(SWITCH, "0")
        return run_command(args, env, cwd, TIMEOUT_S)


def test_a_forked_command_answers_as_a_fresh_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert os.environ.get(SWITCH) == "1"  # the suite forks (conftest.py)
    store = tmp_path / "here" / "store.duckdb"
    env = service_environment({"database_url": f"duckdb:///{store}"})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    added = run(["sub", "add", "q", "a.*"], env, tmp_path, TIMEOUT_S)
    assert (added.returncode, added.stdout) == (0, "created subscription 1\n"), added.stderr
    assert store.is_file()  # the caller's environment chose the store
    cases = [
        ["sub", "ls"],
        ["match", "a.b.c"],  # no subscriber: its own status
        ["sub", "add", "q", "a.#.#", "--dialect", "kafka"],  # a usage error
        ["sub", "import", "missing.csv"],  # the caller's directory
        ["--help"],
    ]
    for args in cases:
        fresh = _fresh(args, env, elsewhere, monkeypatch)
        forked = run(args, env, elsewhere, TIMEOUT_S)
        assert (forked.returncode, forked.stdout, forked.stderr) == (
            fresh.returncode,
            fresh.stdout,
            fresh.stderr,
        ), args
    moved = {**env, "TOPICSTORE_DATABASE_URL": f"duckdb:///{tmp_path / 'other.duckdb'}"}
    other = run(["sub", "add", "r", "b.*"], moved, tmp_path, TIMEOUT_S)
    assert (other.returncode, other.stdout) == (0, "created subscription 1\n"), other.stderr
    assert (tmp_path / "other.duckdb").is_file()


@pytest.mark.parametrize(("kill", "status"), [(False, -signal.SIGTERM), (True, -signal.SIGKILL)])
def test_a_forked_server_ends_with_the_signal_it_is_sent(
    tmp_path: Path, kill: bool, status: int
) -> None:
    server = start_server(
        tmp_path, {"database_url": f"duckdb:///{tmp_path / 's.duckdb'}"}, args=["--dev"]
    )
    assert server.process.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        server.process.wait(timeout=0.1)
    assert Path(f"/proc/{server.process.pid}/cwd").resolve() == tmp_path.resolve()
    assert server.stop(kill=kill) == status
    assert server.process.poll() == status
    assert zygote().process.poll() is None  # the zygote serves on
