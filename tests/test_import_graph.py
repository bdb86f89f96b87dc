"""The packages import one way: matcher <- store <- loader <- app; migrations use store;
pipeline uses matcher and store (and the Python client, for ``route --api``); topicstore
(the API's models and the Python client) imports nothing of ours, and app uses it; harness
(what tests and bench share) may use them all but pipeline; nothing outside bench imports
it (but the CLI's bench command, when it runs): the bench suite's own tests live inside it
(bench/tests), and neither the tests nor the root conftest.py (which both test trees load)
import it; no package, nor that conftest, imports the tests. Within a package, no
module-level circle. Every import counts, the ones inside functions too: a lazy import
hides a cycle, it does not remove it. And what should stay light does: the command line's
``--help`` and ``sub ls`` load neither Spark, matplotlib nor FastAPI; ``import
topicstore.client`` loads none of them, nor the engines, the store or the service."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "matcher",
    "store",
    "migrations",
    "loader",
    "app",
    "pipeline",
    "bench",
    "harness",
    "topicstore",
)
#: What each package may import of ours (besides itself).
ALLOWED: dict[str, set[str]] = {
    "matcher": set(),
    "topicstore": set(),
    "store": {"matcher"},
    "migrations": {"store", "matcher"},
    "loader": {"store", "matcher"},
    "pipeline": {"store", "matcher", "topicstore"},
    "app": {"loader", "store", "matcher", "migrations", "pipeline", "topicstore"},
    "harness": {"app", "loader", "store", "matcher", "migrations", "topicstore"},
    "bench": {
        "harness",
        "app",
        "loader",
        "store",
        "matcher",
        "migrations",
        "pipeline",
        "topicstore",
    },
}
#: The one module outside bench that may import it: the CLI's ``bench`` command, lazily.
BENCH_IMPORTERS = {"app/cli/__init__.py"}
#: The fixtures and xdist grouping of both test trees, ``tests/`` and ``bench/tests/``.
SHARED_CONFTEST = ROOT / "conftest.py"


def _imports(path: Path) -> set[str]:
    """The top-level names of what ``path`` imports (absolute imports, lazy ones too)."""
    return {target[0].split(".")[0] for target in _import_targets(path)}


def _import_targets(path: Path) -> set[tuple[str, ...]]:
    """What each import of ``path`` names, lazy imports too, as dotted names to try in
    turn: ``import a.b`` is ``("a.b",)``, ``from a import b`` is ``("a.b", "a")`` (``b`` a
    module, or a name in ``a``); relative imports are resolved against the module's own
    package."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[tuple[str, ...]] = set()
    package = _module_name(path.parent / "__init__.py", path.parent.parent)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update((alias.name,) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join([*parts[: len(parts) - node.level + 1], *([base] if base else [])])
            found.update((f"{base}.{alias.name}", base) for alias in node.names)
    return found


def _module_name(path: Path, root: Path) -> str:
    """``app/cli/direct.py`` -> ``app.cli.direct``; a package's ``__init__`` is the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_packages_import_one_way() -> None:
    wrong: list[str] = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            ours = _imports(path) & {*PACKAGES, "tests"}
            allowed = ALLOWED[package] | {package}
            if relative in BENCH_IMPORTERS:
                allowed = allowed | {"bench"}
            wrong += [f"{relative} imports {name}" for name in sorted(ours - allowed)]
    assert wrong == []


def test_the_tests_import_no_bench() -> None:
    """The tests drive the service through ``harness``; bench is tested by its own tests,
    in ``bench/tests`` (whose imports of bench are the package's own)."""
    wrong = [
        path.relative_to(ROOT).as_posix()
        for path in [*sorted((ROOT / "tests").rglob("*.py")), SHARED_CONFTEST]
        if "bench" in _imports(path)
    ]
    assert wrong == []


def test_the_shared_conftest_imports_no_tests() -> None:
    """``bench/tests`` loads it too: what both trees share is in ``harness``."""
    assert "tests" not in _imports(SHARED_CONFTEST)


def test_the_checker_sees_lazy_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from store.db import Database\n    import bench.suite\n")
    assert _imports(module) == {"store", "bench"}


def _package_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports. ``from a import b`` is an edge
    to ``a.b`` when that is a module, else to ``a``; importing a submodule is no edge to
    its parent package (Python runs the parent's ``__init__`` first, and an ``__init__``
    importing its own modules is how a package shows them). Compiled modules (``.pyx``)
    are leaves."""
    modules = {_module_name(path, root): path for path in sorted((root / package).rglob("*.py"))}
    leaves = {_module_name(path, root) for path in (root / package).rglob("*.pyx")}
    known = modules.keys() | leaves

    def resolve(names: tuple[str, ...]) -> str | None:
        """The first of ``names`` that is a module of the package, else the package module
        that holds the last (``a.b.c`` -> ``a.b``)."""
        name = next((n for n in names if n in known), names[-1])
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in modules.items():
        targets = (resolve(target) for target in _import_targets(path))
        graph[name] = {t for t in targets if t is not None and t != name}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan's, with an
    explicit stack: a deep package must not hit the recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterable[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, rest = work[-1]
            for nxt in rest:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_circle_inside_a_package(package: str) -> None:
    assert _circles(_package_graph(ROOT, package)) == []


def test_the_checker_sees_a_circle_hidden_by_a_lazy_import(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from pkg.front import run\n")
    (package / "front.py").write_text("from pkg.sub import back\n\ndef run(): ...\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "back.py").write_text("def f():\n    from pkg import front\n")
    (package / "lone.py").write_text("from . import front\nfrom .sub import back\n")
    graph = _package_graph(tmp_path, "pkg")
    assert graph["pkg.lone"] == {"pkg.front", "pkg.sub.back"}
    assert _circles(graph) == [["pkg.front", "pkg.sub.back"]]
    (package / "sub" / "back.py").write_text("X = 1\n")
    assert _circles(_package_graph(tmp_path, "pkg")) == []


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


#: What an application importing the client must not load: the service, its store, the
#: engines, Spark and the web framework.
NOT_FOR_THE_CLIENT = (
    "app",
    "store",
    "loader",
    "matcher",
    "pipeline",
    "migrations",
    "fastapi",
    "starlette",
    "uvicorn",
    "sqlalchemy",
    "pyspark",
    "pandas",
    "duckdb",
)
_CLIENT_PROBE = """
import json, sys
import topicstore.client, topicstore.models
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
"""


def test_the_client_loads_neither_the_service_nor_spark_nor_the_engines(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _CLIENT_PROBE],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    loaded = set(json.loads(done.stdout))
    assert {"topicstore", "httpx", "pydantic"} <= loaded  # the probe did import the client
    assert loaded.isdisjoint(NOT_FOR_THE_CLIENT), sorted(loaded & set(NOT_FOR_THE_CLIENT))
