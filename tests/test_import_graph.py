"""The packages import one way: matcher <- store <- loader <- app; migrations use store;
pipeline uses matcher and store; nothing imports bench (but the CLI's bench command, when
it runs). Every import counts, the ones inside functions too: a lazy import hides a cycle,
it does not remove it. And the command line stays light: ``--help`` and ``sub ls`` load
neither Spark, matplotlib nor FastAPI."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("matcher", "store", "migrations", "loader", "app", "pipeline", "bench")
#: What each package may import of ours (besides itself).
ALLOWED: dict[str, set[str]] = {
    "matcher": set(),
    "store": {"matcher"},
    "migrations": {"store", "matcher"},
    "loader": {"store", "matcher"},
    "pipeline": {"store", "matcher"},
    "app": {"loader", "store", "matcher", "migrations", "pipeline"},
    "bench": {"app", "loader", "store", "matcher", "migrations", "pipeline"},
}
#: The one module outside bench that may import it: the CLI's ``bench`` command, lazily.
BENCH_IMPORTERS = {"app/cli.py"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_packages_import_one_way() -> None:
    wrong: list[str] = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            ours = _imports(path) & set(PACKAGES)
            allowed = ALLOWED[package] | {package}
            if relative in BENCH_IMPORTERS:
                allowed = allowed | {"bench"}
            wrong += [f"{relative} imports {name}" for name in sorted(ours - allowed)]
    assert wrong == []


def test_the_checker_sees_lazy_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from store.db import Database\n    import bench.suite\n")
    assert _imports(module) == {"store", "bench"}


HEAVY = ("pyspark", "matplotlib", "fastapi")
_PROBE = """
import json, sys
from app.cli import main
sys.argv = ["topicstore", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})), file=sys.stderr)
"""


@pytest.mark.parametrize("args", [["--help"], ["sub", "ls"], ["sub", "--help"]])
def test_light_commands_load_no_heavy_library(args: list[str], tmp_path: Path) -> None:
    env = {**os.environ, "TOPICSTORE_DATABASE_URL": f"duckdb:///{tmp_path / 'cli.duckdb'}"}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    loaded = set(json.loads(done.stderr.strip().splitlines()[-1]))
    assert "typer" in loaded  # the probe did run the command line
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))


#: The compiled engine's private module: every engine answers the same interface
#: (``matcher.Matcher``), so only the matcher and its own tests import it (and this
#: checker names it), by path prefix.
PRIVATE_ENGINE = "matcher._native"
PRIVATE_ENGINE_IMPORTERS = ("matcher/", "tests/matcher/", "tests/test_import_graph.py")


def _imports_private_engine(path: Path) -> bool:
    """Whether ``path`` imports ``matcher._native`` in any spelling: ``import``, ``from``
    (of it, or of it from ``matcher``), or by name (``importlib.import_module``), at any
    depth of the module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value]
        else:
            continue
        if any(name == PRIVATE_ENGINE or name.startswith(f"{PRIVATE_ENGINE}.") for name in names):
            return True
    return False


def test_only_the_matcher_imports_the_compiled_engine() -> None:
    offenders = [
        relative
        for directory in (*PACKAGES, "tests")
        for path in sorted((ROOT / directory).rglob("*.py"))
        if not (relative := path.relative_to(ROOT).as_posix()).startswith(PRIVATE_ENGINE_IMPORTERS)
        and _imports_private_engine(path)
    ]
    assert offenders == []


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("def f():\n    from matcher._native import NativeMatcher\n", True),
        ("import matcher._native\n", True),
        ("def f():\n    from matcher import _native\n", True),
        ("import importlib\nimportlib.import_module('matcher._native')\n", True),
        ("from matcher import NativeMatcherLike, create_matcher\n", False),
        ("import matcher.native_helpers\n", False),
    ],
)
def test_the_checker_sees_every_spelling(source: str, found: bool, tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(source)
    assert _imports_private_engine(module) is found
