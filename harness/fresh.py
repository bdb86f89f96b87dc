"""A script run by a new interpreter: what a process imports, or tries to, is only known
in one that has loaded nothing yet (a test's own interpreter has loaded everything)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from harness.server import service_environment


def fresh_interpreter(
    script: str, *args: str, cwd: Path, settings: Mapping[str, str] | None = None
) -> list[str]:
    """The lines ``script`` prints, run as ``python -c script args`` in ``cwd`` with the
    service's environment plus ``settings`` (``TOPICSTORE_*``, named without the prefix);
    a failure fails the caller with the script's stderr."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        env=service_environment(settings or {}),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()
