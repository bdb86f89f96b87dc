"""Every command's ``--help`` as a newcomer reads it in an 80-column terminal: plain text
(no boxes), a flag without a type after it (no ``<bool>``), paragraphs re-wrapped without
breaking a word, command lists without a description cut short, and the token named
wherever ``--api`` is. All of it rendered in one process of its own (``bench`` loads the
bench suite, which the tests never import)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from functools import cache

from harness.server import service_environment

#: Renders ``--help`` of every command path of the ``topicstore`` tree (``bench`` included,
#: which runs its own typer app) at 80 columns, as JSON {path: [exit status, text]}.
RENDER = textwrap.dedent(
    """
    import json, sys
    import typer
    from typer.testing import CliRunner
    from app.cli import app

    def paths(command, path):
        yield path
        for name, sub in getattr(command, "commands", {}).items():
            yield from paths(sub, [*path, name])

    helps = {}
    for path in paths(typer.main.get_command(app), []):
        done = CliRunner().invoke(app, [*path, "--help"], terminal_width=80)
        helps[" ".join(path)] = [done.exit_code, done.output]
    json.dump(helps, sys.stdout)
    """
)

BOX_DRAWING = re.compile("[\u2500-\u257f]")


@cache
def helps() -> dict[str, tuple[int, str]]:
    done = subprocess.run(
        [sys.executable, "-c", RENDER],
        env={**service_environment({}), "COLUMNS": "80"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return {path: (status, text) for path, (status, text) in json.loads(done.stdout).items()}


def test_every_command_has_plain_help() -> None:
    found = helps()
    assert {"", "bench", "route", "analytics", "sub", "sub add", "sub import"} <= set(found)
    for path, (status, text) in found.items():
        where = f"topicstore {path} --help:\n{text}"
        assert status == 0 and text.startswith("Usage: "), where
        assert "<bool>" not in text, where
        assert not BOX_DRAWING.search(text), where
        assert all(len(line) <= 80 for line in text.splitlines()), where
        # A line ending in a letter and a hyphen is a word the wrap broke ("JSON-" "lines").
        assert not re.search(r"(?m)[A-Za-z]-$", text), where


def test_flags_show_no_type_and_options_their_value() -> None:
    text = helps()["bench"][1]
    assert re.search(r"(?m)^  --quick +Small sizes", text)
    assert re.search(r"(?m)^  --out <path> +Write", text)
    assert "throughput: " in text  # the tables, listed after the options
    match = helps()["match"][1]
    assert re.search(r"(?m)^  --json +Machine-readable output", match)


def test_command_lists_are_not_cut_short() -> None:
    for path in ("", "sub"):
        text = helps()[path][1]
        commands = text.split("Commands:\n", 1)[1].splitlines()
        assert len(commands) >= 5, text
        assert not any(line.rstrip().endswith("...") for line in commands), text


def test_the_api_option_names_the_token() -> None:
    with_api = [path for path, (_, text) in helps().items() if re.search(r"--api <", text)]
    assert {"match", "export", "sub ls", "sub add", "route"} <= set(with_api)
    for path in with_api:
        text = " ".join(helps()[path][1].split())  # the help re-wrapped: one line
        assert "TOPICSTORE_ADMIN_TOKEN" in text, f"topicstore {path} --help: {text}"
