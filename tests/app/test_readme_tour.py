"""The README's tour runs as printed: its command-line and HTTP blocks, in a shell, against
``topicstore serve --dev`` started as ``make run`` starts it (only the port differs: the
tests pick a free one), then its Spark blocks in the same directory, on the subscriptions
the earlier sections made; and what they print is what the README says they print.

The sections share one service and one directory (a module fixture), as a reader's two
terminals do; the tour's Spark runs map the user's own class archive, as the reader's
``topicstore route`` does (the first run anywhere records it, and says so)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.server import Server, running_server, service_environment, topicstore_command
from harness.services import require
from pipeline.cli import class_archive_file
from pipeline.preflight import PreflightError, check_java
from tests.test_doc_samples import ROOT, Block, blocks

README = ROOT / "README.md"


def _section_blocks(heading: str) -> list[Block]:
    """The shell blocks under the README's heading ``heading``, up to the next heading."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"### {heading}")
    following = re.compile(r"^#{1,3} ", flags=re.M).search(text, start + 1)
    end = len(text) if following is None else following.start()
    first, last = (text.count("\n", 0, at) + 1 for at in (start, end))
    found = [b for b in blocks(README) if b.lang == "sh" and first < b.line < last]
    assert found, heading
    return found


def _run(script: str, directory: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
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
    return done


def _tables(output: str) -> dict[str, list[tuple[str, ...]]]:
    """The tables ``topicstore analytics`` printed in ``output``, by their first column's
    name: each row's words (a header, then a line of dashes, then rows up to a blank line
    or other output)."""
    lines = output.splitlines()
    found: dict[str, list[tuple[str, ...]]] = {}
    for i, line in enumerate(lines[:-1]):
        header = tuple(line.split())
        if (
            header
            and re.fullmatch(r"[- ]+", lines[i + 1])
            and len(lines[i + 1].split()) == len(header)
        ):
            rows = found[header[0]] = []
            for row in lines[i + 2 :]:
                words = tuple(row.split())
                if len(words) != len(header):
                    break
                rows.append(words)
    return found


@dataclass
class Tour:
    """The directory and environment of the tour's second terminal, with the service."""

    server: Server
    directory: Path
    env: dict[str, str]
    #: Section 2's curl answers, in order.
    answers: list[object]


@pytest.fixture(scope="module")
def tour(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tour]:
    """Sections 1 and 2 run as printed, one after the other, against a dev service; the
    directory keeps what they made for the later sections."""
    require(shutil.which("curl") is not None, "curl", hint="apt-get install curl")
    directory = tmp_path_factory.mktemp("tour")
    with running_server(directory, {}, args=["--dev"]) as server:
        env = service_environment({"port": str(server.port)})
        bin_dir = directory / "bin"
        bin_dir.mkdir()
        wrapper = bin_dir / "topicstore"
        wrapper.write_text(
            "#!/bin/sh\nexec " + " ".join(map(shlex.quote, topicstore_command())) + ' "$@"\n',
            encoding="utf-8",
        )
        wrapper.chmod(0o755)
        env["PATH"] = f"{bin_dir}:{env['PATH']}"

        (cli,) = _section_blocks("1. The command line")
        _run(cli.code, directory, env)

        (http,) = _section_blocks("2. The HTTP API")
        code = http.code.replace("http://127.0.0.1:8080", server.url)
        assert code != http.code, "the tour's URL line moved"
        # every curl line's answer, one per line (curl prints no newline of its own)
        code = re.sub(r"^curl ", "curl -sS -w '\\n' --fail-with-body ", code, flags=re.M)
        printed = _run(code, directory, env).stdout
        answers = [json.loads(line) for line in printed.splitlines() if line]
        assert len(answers) == code.count("\ncurl ")
        yield Tour(server, directory, env, answers)


def test_the_command_line_and_http_tour_runs_as_printed(tour: Tour) -> None:
    (http,) = _section_blocks("2. The HTTP API")
    shown = re.search(r"^# (\{.*\})$", http.code, flags=re.M)
    assert shown, "the tour shows a match's answer"
    assert json.loads(shown.group(1)) in tour.answers


@pytest.mark.slow
def test_the_route_and_analytics_tour_runs_as_printed(tour: Tour) -> None:
    """Two ``topicstore route`` runs (a cold JVM each): the batch and the stream. The
    subscriptions are the tour's: billing ``orders.*.created``, audit ``orders.#``,
    dashboard ``sensors/+/temp`` (MQTT) and shipping ``orders.*.shipped``; so m1 reaches
    billing and audit, m2 audit and shipping, and m3 nobody."""
    try:
        check_java(tour.env)
    except PreflightError as e:
        require(False, "Java 17 or newer (Spark's)", hint=e.message)
    recorded = class_archive_file("", tour.env)
    had_archive = recorded is not None and recorded.is_file()
    batch, stream = _section_blocks("5. Route recorded messages, then analyse them")

    done = _run(batch.code, tour.directory, tour.env)
    out = done.stdout
    assert "wrote 4 subscriptions to subs.parquet" in out
    assert re.search(r"^routed 3 messages .*: 4 deliveries, 1 unmatched, 0 rejected;", out, re.M)
    # "the first run records Spark's class archive, says so"
    assert ("recording Spark's class archive" in done.stderr) is not had_archive, done.stderr
    tables = _tables(out)
    assert tables["tenant"] == [
        ("default", "audit", "2", "2", "1"),
        ("default", "billing", "1", "1", "1"),
        ("default", "shipping", "1", "1", "1"),
    ]
    assert tables["fanout"] == [("0", "1", "1"), ("2", "2", "2")]  # fanout, messages, topics
    assert (tour.directory / "fanout.png").read_bytes().startswith(b"\x89PNG")
    routed = tour.directory / "routed"
    assert (routed / "_summary.json").is_file()
    # a Delta table, the run one commit
    assert sorted(p.name for p in (routed / "_delta_log").glob("*.json")) == [f"{0:020d}.json"]

    out = _run(stream.code, tour.directory, tour.env).stdout
    micro_batches = re.findall(
        r"^batch (\d+): 3 messages .*: 4 deliveries, 1 unmatched, 0 rejected; version (\d+)",
        out,
        re.M,
    )
    assert micro_batches == [("0", "0")], out  # one file landed: one micro-batch
    assert _tables(out)["tenant"] == [
        ("default", "4", "2", "3")
    ]  # deliveries, messages, subscribers
    history = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [(str(h["batch"]), str(h["version"])) for h in history] == micro_batches
