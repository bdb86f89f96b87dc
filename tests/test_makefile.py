"""``make tools`` (run by ``make test``) while another process holds the package lock, as an
unattended upgrade or a second install does: it waits for the lock instead of failing at
once, and a tool it cannot install is named. The real apt-get and the real dpkg locks, so
only as root on a Debian-like machine (as CI runs); the lock is held for seconds at most."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: dpkg's lock that apt-get takes first, and the one of the package lists (apt-get update).
DPKG_LOCK = Path("/var/lib/dpkg/lock-frontend")
LISTS_LOCK = Path("/var/lib/apt/lists/lock")
#: A package every machine that runs ``make`` has, at its newest version: installing it
#: again takes the lock and changes nothing.
INSTALLED = "make"
#: A command no machine has, so ``make tools`` installs its package.
ABSENT = "topicstore-absent-tool"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("apt-get") is None or not DPKG_LOCK.exists(),
    reason="make tools installs with apt-get as root only",
)


@contextmanager
def held(*locks: Path, seconds: float | None = None) -> Iterator[None]:
    """Hold ``locks`` as apt and dpkg do (fcntl write locks): for ``seconds`` from now,
    released by a timer, or else until the block ends."""
    with ExitStack() as stack:
        files = [stack.enter_context(lock.open("a")) for lock in locks]
        for file in files:
            fcntl.lockf(file, fcntl.LOCK_EX | fcntl.LOCK_NB)

        def release() -> None:
            for file in files:
                fcntl.lockf(file, fcntl.LOCK_UN)

        timer = threading.Timer(seconds, release) if seconds is not None else None
        if timer is not None:
            timer.start()
        try:
            yield
        finally:
            if timer is not None:
                timer.join()
            else:
                release()


def make_tools(package: str, *settings: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", "tools", f"TOOLS={ABSENT}:{package}", *settings],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _newest(package: str) -> bool:
    policy = subprocess.run(
        ["apt-cache", "policy", package], capture_output=True, text=True, check=False
    ).stdout
    fields = dict(
        line.strip().split(": ", 1) for line in policy.splitlines() if ": " in line.strip()
    )
    return fields.get("Installed") not in (None, "(none)") and (
        fields.get("Installed") == fields.get("Candidate")
    )


def test_it_waits_for_the_lock_another_process_holds() -> None:
    if not _newest(INSTALLED):
        pytest.skip(f"{INSTALLED} is not installed at its candidate version")
    with held(DPKG_LOCK, seconds=3):
        done = make_tools(INSTALLED)
    assert done.returncode == 0, done.stderr
    assert "Could not get lock" not in done.stderr


def test_a_tool_it_cannot_install_is_named() -> None:
    with held(DPKG_LOCK, LISTS_LOCK):
        done = make_tools(INSTALLED, "APT_LOCK_TIMEOUT=1")
    assert done.returncode != 0
    assert (
        f"make tools: could not install {ABSENT} (apt-get install {INSTALLED} failed;"
        in done.stderr
    ), done.stderr
