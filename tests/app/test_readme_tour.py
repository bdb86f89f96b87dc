"""The README's tour runs as printed: its command-line and HTTP blocks, in a shell, against
``topicstore serve --dev`` started as ``make run`` starts it (only the port differs: the
tests pick a free one), and the match it shows answers what the README says it answers."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from harness.server import running_server, service_environment, topicstore_command
from tests.test_doc_samples import ROOT, Block, blocks

README = ROOT / "README.md"


def _tour_block(heading: str) -> Block:
    """The first shell block under the README's heading ``heading``."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"### {heading}")
    line = text.count("\n", 0, start) + 1
    found = [b for b in blocks(README) if b.lang == "sh" and b.line > line]
    assert found, heading
    return found[0]


def _run(script: str, directory: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"{script}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    return done.stdout


@pytest.mark.skipif(
    subprocess.run(["which", "curl"], capture_output=True).returncode != 0,
    reason="curl is not installed",
)
def test_the_readme_tour_runs_as_printed(tmp_path: Path) -> None:
    with running_server(tmp_path, {}, args=["--dev"]) as server:
        env = service_environment({"port": str(server.port)})
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        wrapper = bin_dir / "topicstore"
        wrapper.write_text(
            "#!/bin/sh\nexec " + " ".join(map(shlex.quote, topicstore_command())) + ' "$@"\n',
            encoding="utf-8",
        )
        wrapper.chmod(0o755)
        env["PATH"] = f"{bin_dir}:{env['PATH']}"

        cli = _tour_block("1. The command line")
        _run(cli.code, tmp_path, env)

        http = _tour_block("2. The HTTP API")
        code = http.code.replace("http://127.0.0.1:8080", server.url)
        assert code != http.code, "the tour's URL line moved"
        # every curl line's answer, one per line (curl prints no newline of its own)
        code = re.sub(r"^curl ", "curl -sS -w '\\n' --fail-with-body ", code, flags=re.M)
        answers = [json.loads(line) for line in _run(code, tmp_path, env).splitlines() if line]
        assert len(answers) == code.count("\ncurl ")
        shown = re.search(r"^# (\{.*\})$", http.code, flags=re.M)
        assert shown, "the tour shows a match's answer"
        assert json.loads(shown.group(1)) in answers
