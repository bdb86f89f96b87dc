"""Every code sample of README.md and docs/ runs here, so none goes stale.

* ``pycon`` blocks are doctests (their printed output is compared);
* ``python`` blocks are executed; the Python blocks of one page run in order in one
  namespace, with the working directory a scratch directory;
* ``sh`` blocks are checked, not run: each ``topicstore`` / ``topicstore-bench`` command line
  names a command and options that exist, each ``curl`` a route of the API, each
  ``python -m`` a module of the project, each ``make`` a target of the Makefile;
* a block right after a ``<!-- doc-test: skip ... -->`` comment is left out;
* a page with a ``<!-- doc-test: serve ... -->`` comment runs its Python blocks against a
  real service, as ``make run`` starts it (``topicstore serve --dev`` in the scratch
  directory, its token in ``data/dev-admin-token``), whose address is ``url``.

The settings table of docs/operations.md is also held to ``app.settings.Settings``, and the
README's links into the docs to the files and headings they name (``mkdocs build --strict``,
``make docs-build``, checks the links inside docs/).
"""

from __future__ import annotations

import doctest
import os
import re
import shlex
import subprocess
import sys
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Final

import pytest
import typer

from app.cli import app as cli_app
from app.main import create_app
from app.refusals import ServiceError
from app.settings import Settings
from harness.server import running_server

ROOT: Final = Path(__file__).resolve().parents[1]
README: Final = ROOT / "README.md"
DOCS: Final = ROOT / "docs"
PAGES: Final = [README, *sorted(DOCS.rglob("*.md"))]
SKIP: Final = "<!-- doc-test: skip"
SERVE: Final = "<!-- doc-test: serve"
FENCE: Final = re.compile(r"^(\s*)```(\w*)\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the first line of code, 1-based
    lang: str
    code: str

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of ``page``, except those a skip comment precedes."""
    found: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    previous = ""
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            if lines[i].strip():
                previous = lines[i].strip()
            i += 1
            continue
        indent, lang = opening.groups()
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        code = "\n".join(line.removeprefix(indent) for line in lines[i + 1 : end]) + "\n"
        if not previous.startswith(SKIP):
            found.append(Block(page, i + 2, lang, code))
        previous = ""
        i = end + 1
    return found


def _id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def test_every_page_is_read_and_has_samples() -> None:
    # The pages exist and the parser finds their blocks: a test that read nothing would pass.
    assert README in PAGES and len(PAGES) >= 10
    langs = {block.lang for page in PAGES for block in blocks(page)}
    assert {"python", "pycon", "sh"} <= langs


def test_block_parser_honours_the_skip_marker(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "text\n\n```python\nx = 1\n```\n\n<!-- doc-test: skip: needs a broker -->\n"
        "```python\nraise SystemExit\n```\n\n```sh\nls\n```\n",
        encoding="utf-8",
    )
    assert [(b.lang, b.code, b.line) for b in blocks(page)] == [
        ("python", "x = 1\n", 4),
        ("sh", "ls\n", 13),
    ]


# -- Python: doctests and scripts -----------------------------------------------------------


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A scratch working directory and no ``TOPICSTORE_*`` from the caller's environment."""
    for name in list(os.environ):
        if name.startswith("TOPICSTORE_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


PYTHON_PAGES: Final = [
    page for page in PAGES if any(b.lang in ("python", "pycon") for b in blocks(page))
]


@pytest.mark.parametrize("page", PYTHON_PAGES, ids=_id)
def test_python_samples_run(page: Path, scratch: Path) -> None:
    namespace: dict[str, Any] = {"__name__": "__doc_sample__"}
    if SERVE not in page.read_text(encoding="utf-8"):
        run_samples(page, namespace)
        return
    with running_server(scratch, {"dev": "true"}) as server:
        server.wait_until("/readyz", 200)
        namespace["url"] = server.url
        run_samples(page, namespace)


def run_samples(page: Path, namespace: dict[str, Any]) -> None:
    """The page's Python blocks in order, in ``namespace``."""
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for block in blocks(page):
        if block.lang == "python":
            exec(compile(block.code, block.where(), "exec"), namespace)
        elif block.lang == "pycon":
            test = doctest.DocTestParser().get_doctest(
                block.code, namespace, block.where(), str(block.page), block.line - 1
            )
            assert test.examples, f"{block.where()}: a pycon block without >>> examples"
            output: list[str] = []
            result = runner.run(test, out=output.append, clear_globs=False)
            assert result.failed == 0, "".join(output)
            namespace.update(test.globs)  # a DocTest runs in a copy of the globals given


def test_a_failing_doctest_fails(tmp_path: Path) -> None:
    page = tmp_path / "wrong.md"
    page.write_text("```pycon\n>>> 1 + 1\n3\n\n```\n", encoding="utf-8")
    (block,) = blocks(page)
    test = doctest.DocTestParser().get_doctest(block.code, {}, "wrong", str(page), 0)
    output: list[str] = []
    assert doctest.DocTestRunner().run(test, out=output.append).failed == 1


# -- Shell: the commands named exist --------------------------------------------------------


def command_lines(code: str) -> Iterator[list[str]]:
    """The command lines of a shell block as words: continuations joined, heredoc bodies and
    comments dropped, one line per command of a ``;``/``&&``/``|`` chain."""
    joined = code.replace("\\\n", " ")
    heredoc_end: str | None = None
    for line in joined.splitlines():
        if heredoc_end is not None:
            if line.strip() == heredoc_end:
                heredoc_end = None
            continue
        marker = re.search(r"<<-?\s*'?\"?(\w+)'?\"?", line)
        if marker:
            heredoc_end = marker.group(1)
            line = line[: marker.start()]
        words = shlex.split(line, comments=True)
        command: list[str] = []
        for word in words:
            if word in (";", "&&", "||", "|"):
                if command:
                    yield command
                command = []
            else:
                command.append(word)
        if command:
            yield command


def test_command_lines_split_like_a_shell() -> None:
    code = (
        "export A=1\ntopicstore sub add a 'x.#' \\\n  --label k=v   # note\n"
        "cat > m.jsonl <<'EOF'\ntopicstore not-a-command\nEOF\nmake setup && make test\n"
    )
    assert list(command_lines(code)) == [
        ["export", "A=1"],
        ["topicstore", "sub", "add", "a", "x.#", "--label", "k=v"],
        ["cat", ">", "m.jsonl"],
        ["make", "setup"],
        ["make", "test"],
    ]


def _program(word: str) -> str:
    return word.rsplit("/", 1)[-1]


@cache
def _cli() -> Any:
    """The command line's click tree (typer ships its own click, hence no click types)."""
    return typer.main.get_command(cli_app)


@cache
def _bench_help() -> str:
    """``topicstore bench --help`` in its own process: tests import nothing of bench."""
    probe = (
        "import sys; from app.cli import main; sys.argv = ['topicstore', 'bench', '--help']; main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _check_bench(words: list[str], where: str) -> None:
    text = _bench_help()
    # The help lists each option at the start of a line, with its type when it takes a
    # value (``--out <path>``) and bare when it is a flag (``--quick``).
    options = dict(re.findall(r"(?m)^\s+(--[a-z-]+)( <[^>]+>)?", text))
    value_next = False
    for word in words:
        if value_next:
            value_next = False
        elif word.startswith("--"):
            name = word.split("=", 1)[0]
            assert name in options, f"{where}: bench has no option {word}"
            value_next = "=" not in word and bool(options[name])
        elif not word.startswith("-"):
            assert f"{word}:" in text, f"{where}: bench has no table {word}"


def check_topicstore(words: list[str], where: str) -> None:
    """``words`` (after the program) name a command path of the CLI, and each option used
    is one that command takes."""
    command = _cli()
    rest = list(words)
    while hasattr(command, "commands") and rest and not rest[0].startswith("-"):
        sub = command.commands.get(rest[0])
        assert sub is not None, f"{where}: topicstore has no command {rest[0]!r}"
        command, rest = sub, rest[1:]
    if command.name == "bench":
        _check_bench(rest, where)
        return
    assert not hasattr(command, "commands"), f"{where}: {words} names no command"
    options = {name for p in command.params for name in (*p.opts, *p.secondary_opts)}
    options.add("--help")
    for word in rest:
        if word.startswith("--"):
            assert word.split("=", 1)[0] in options, f"{where}: {command.name} takes no {word}"


@cache
def _routes() -> list[re.Pattern[str]]:
    settings = Settings(
        _env_file=None, database_url="duckdb:///unused.duckdb", admin_token="x" * 16
    )
    app = create_app(settings)  # built, not started: no store is opened
    # The API's routes are in its OpenAPI document; the pages (/docs, /ui) are routes of
    # the app itself.
    paths = {*app.openapi()["paths"], *(getattr(route, "path", "") for route in app.routes)}
    return [re.compile(re.sub(r"\{[^}]+\}", "[^/]+", path) + "$") for path in paths if path]


def check_curl(words: list[str], where: str) -> None:
    urls = [w for w in words[1:] if "$URL" in w or w.startswith("http")]
    assert urls, f"{where}: curl without a URL"
    for url in urls:
        path = re.sub(r"^(\$URL|https?://[^/]+)", "", url).split("?", 1)[0] or "/"
        assert any(route.match(path) for route in _routes()), f"{where}: no route {path}"


@cache
def _make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([a-z][\w-]*):", text, flags=re.MULTILINE))


def check_line(words: list[str], where: str) -> None:
    program = _program(words[0])
    if program == "topicstore":
        check_topicstore(words[1:], where)
    elif program == "topicstore-bench":
        _check_bench(words[1:], where)
    elif program == "curl":
        check_curl(words, where)
    elif program == "make":
        for target in words[1:]:
            assert target in _make_targets(), f"{where}: the Makefile has no target {target}"
    elif program.startswith("python") and words[1:2] == ["-m"]:
        module = words[2]
        if module.split(".")[0] in {"matcher", "store", "loader", "app", "pipeline", "bench"}:
            path = ROOT.joinpath(*module.split("."))
            assert path.with_suffix(".py").is_file() or (path / "__main__.py").is_file(), (
                f"{where}: no module {module}"
            )


SHELL_PAGES: Final = [page for page in PAGES if any(b.lang == "sh" for b in blocks(page))]


@pytest.mark.parametrize("page", SHELL_PAGES, ids=_id)
def test_shell_samples_name_what_exists(page: Path, scratch: Path) -> None:
    checked = 0
    for block in blocks(page):
        if block.lang != "sh":
            continue
        for words in command_lines(block.code):
            check_line(words, block.where())
            checked += 1
    assert checked


@pytest.mark.parametrize(
    "line",
    [
        "topicstore sub frobnicate x",
        "topicstore sub add a b --colour red",
        "topicstore bench --no-such-option",
        "topicstore-bench no_such_table",
        "curl $URL/v1/nowhere",
        "make no-such-target",
        "python -m bench.no_such_module",
    ],
)
def test_shell_checks_catch_a_wrong_line(line: str, scratch: Path) -> None:
    (words,) = command_lines(line)
    with pytest.raises(AssertionError):
        check_line(words, "sample")


def test_shell_checks_accept_real_lines(scratch: Path) -> None:
    for line in [
        "topicstore sub ls --covered-by 'a.#' --json",
        "curl $URL/v1/subscriptions/12 -H x",
        "topicstore-bench scaled --engine native",
    ]:
        (words,) = command_lines(line)
        check_line(words, "sample")


# -- What the docs must list ----------------------------------------------------------------


def test_operations_lists_every_setting() -> None:
    text = (DOCS / "operations.md").read_text(encoding="utf-8")
    missing = [
        f"TOPICSTORE_{name.upper()}"
        for name in Settings.model_fields
        if f"`TOPICSTORE_{name.upper()}`" not in text
    ]
    assert missing == []


def _kinds(kind: type[ServiceError]) -> Iterator[type[ServiceError]]:
    for sub in kind.__subclasses__():
        yield sub
        yield from _kinds(sub)


def test_api_page_lists_every_refusal_under_its_status() -> None:
    text = (DOCS / "api.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| (\d{3}) \|(.*)$", text, flags=re.MULTILINE))
    kinds = list(_kinds(ServiceError))
    assert len(kinds) > 10
    for kind in kinds:
        row = rows.get(str(kind.status), "")
        assert kind.code in row, f"docs/api.md: {kind.code} is not listed under {kind.status}"


LINK: Final = re.compile(r"\]\((?!https?://)([^)#\s]+)(?:#([^)\s]+))?\)")


def slugify(heading: str) -> str:
    """A heading's anchor as MkDocs makes it (Python-Markdown's ``toc`` slugify, applied to
    the heading's text without its inline markup)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def test_slugify_makes_mkdocs_anchors() -> None:
    assert slugify("The `native` engine's capacities") == "the-native-engines-capacities"
    assert slugify("Explain, overlap and redundancy") == "explain-overlap-and-redundancy"
    assert slugify("The service at 1,000,000 subscriptions") == (
        "the-service-at-1000000-subscriptions"
    )


def _anchors(page: Path) -> set[str]:
    headings = re.findall(r"^#+\s+(.+?)\s*$", page.read_text(encoding="utf-8"), re.MULTILINE)
    return {slugify(heading) for heading in headings}


def test_readme_links_name_files_and_headings_that_exist() -> None:
    links = LINK.findall(README.read_text(encoding="utf-8"))
    assert links
    for target, anchor in links:
        path = ROOT / target
        assert path.is_file(), f"README links to {target}, which is not there"
        if anchor:
            assert anchor in _anchors(path), f"README links to {target}#{anchor}: no heading"
