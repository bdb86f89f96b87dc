"""Fixtures shared by both test trees, the project's (``tests/``) and the benchmark suite's
own (``bench/tests/``): the real databases and the Spark session; and how the run splits
over pytest-xdist workers (``make test`` runs ``-n 2``). It lives at the root so that both
trees load it and neither imports the other.

Each xdist worker is a pytest session of its own, so each gets its own PostgreSQL database
(named after the worker) and, if it runs Spark tests, its own Spark session. Tests that
should not share a service with another worker at the same time are kept on one worker by
where they live (``XDIST_GROUPS``); every other test goes wherever a worker is free.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pytest
from hypothesis import settings
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling

from harness.services import fresh_postgres_database, reset_postgres
from harness.zygote import SWITCH
from migrations.runner import upgrade
from store import Database

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# The servers and command lines the tests start are forked from a process that has imported
# them (``harness.zygote``): the imports were most of what each of hundreds of them cost.
# Benchmark processes a test starts inherit it; run from the command line they do not fork.
os.environ.setdefault(SWITCH, "1")  # HARNESS_ZYGOTE=0: every one a fresh process

# No per-example deadline: speed is measured by bench/, not timed in tests, and on a loaded
# 2-core CI machine a first example took 4.9 s (hypothesis' default deadline is 200 ms).
settings.register_profile("topicstore", deadline=None)
settings.load_profile("topicstore")

#: The benchmark tables' quick runs (one test per table).
_SMOKE: Final = (
    "bench/tests/test_bench_smoke.py::test_quick_table_writes_its_outputs_for_every_engine"
)
#: Node id prefix -> the group whose tests run one after another on one worker:
#: * ``spark``: the Spark tests share one session (a JVM, seconds to start) per worker (the
#:   one test elsewhere that asks for it too: on another worker it would start a second);
#: * ``brokers``: Mosquitto and nats-server topics cannot carry a per-run prefix (it would
#:   change what ``#``, ``>`` and the ``$`` rule match), so two runs at once would each
#:   receive the other's traffic: filtered out by run id, but it counts against Mosquitto's
#:   outgoing queue;
#: * ``rabbitmq``: each run declares its own exchange and could share the broker; grouped so
#:   that the module fixtures routing the corpus through it run once, not once per worker;
#: * ``tour``: the README tour's tests share one service and the state its sections made (a
#:   module fixture), which two workers would each set up;
#: * ``big_store``: the quick tables that write to the shared PostgreSQL store of their size
#:   hold it for their run (``bench.big_store``), so on two workers one would wait for the
#:   other.
XDIST_GROUPS: Final = {
    "tests/pipeline/": "spark",
    "bench/tests/test_bench_pipeline.py": "spark",
    "tests/app/test_cli_errors.py::test_route_reads_the_subscriptions_through_the_api": "spark",
    "tests/matcher/test_broker_dialects.py": "brokers",
    "tests/matcher/test_broker_groups.py": "brokers",
    "tests/matcher/test_rabbitmq_conformance.py": "rabbitmq",
    "tests/app/test_readme_tour.py": "tour",
    f"{_SMOKE}[write_load]": "big_store",
    f"{_SMOKE}[storm]": "big_store",
}
#: Tests under a grouped prefix that use none of the group's shared service (these start
#: their own JVMs, or none), so they go wherever a worker is free.
UNGROUPED: Final = (
    "tests/pipeline/test_class_archive.py",
    "tests/pipeline/test_standalone_cluster.py",
    "tests/pipeline/test_cli_preflight.py",
    "tests/pipeline/test_analytics.py",
    "tests/pipeline/test_maintenance.py",
    "tests/pipeline/test_executor.py",
    "tests/pipeline/test_subscriptions.py",
)
#: Modules (outside any group) whose tests share a module fixture that takes seconds to set
#: up: a standalone Spark cluster, a browser, a server process or app per backend. Each is
#: one unit of work, so one worker sets the fixture up once; split test by test, each worker
#: that drew one of the module's tests would set it up again.
MODULE_UNITS: Final = (
    "tests/pipeline/test_standalone_cluster.py",
    "tests/app/test_api_bad_input.py",
    "tests/app/test_api_server.py",
    "tests/app/test_cli_errors.py",
    "tests/app/test_console.py",
    "tests/app/test_slow_clients.py",
    "tests/app/test_tracing.py",
    "tests/app/test_work_stops.py",
)


class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist has no types
    """xdist's ``load`` distribution, except that the tests of one ``XDIST_GROUPS`` group,
    and of one ``MODULE_UNITS`` module, are one unit of work. (xdist's own ``loadgroup``
    marks groups by rewriting node ids, which pytest 9.2 no longer lets a plugin do:
    pytest-xdist issue 1386.)"""

    def _split_scope(self, nodeid: str) -> str:
        if not nodeid.startswith(UNGROUPED):
            for prefix, group in XDIST_GROUPS.items():
                if nodeid.startswith(prefix):
                    return group
        if nodeid.startswith(MODULE_UNITS):
            return nodeid.split("::", 1)[0]
        return nodeid


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # before xdist's own choice
def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> GroupScheduling | None:
    """``GroupScheduling`` for ``-n N`` (whose distribution is ``load``); any other
    ``--dist`` asked for is left to xdist."""
    return GroupScheduling(config, log) if config.getvalue("dist") == "load" else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the ``slow`` tests first: started last, one of them would keep a worker busy long
    after the other has run out of tests."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session, migrated to head."""
    with fresh_postgres_database() as url:
        db = Database(url)
        upgrade(db.url)
        db.dispose()
        yield url


@pytest.fixture(scope="session")
def duckdb_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DuckDB file migrated to head once per session, which ``new_duckdb`` copies:
    migrating a new file takes a quarter of a second or more, and some 250 tests each
    start on a new one. (The migrations themselves are tests/store/test_migrations.py's.)"""
    path = tmp_path_factory.mktemp("duckdb-template") / "store.duckdb"
    upgrade(f"duckdb:///{path}")  # checkpointed: the whole store is in the one file
    return path


@pytest.fixture
def new_duckdb(duckdb_template: Path, tmp_path: Path) -> Callable[[str], str]:
    """Makes ``tmp_path / name`` a new, migrated DuckDB store (a copy of the template) and
    returns its URL."""

    def make(name: str) -> str:
        path = tmp_path / name
        shutil.copyfile(duckdb_template, path)
        return f"duckdb:///{path}"

    return make


@pytest.fixture(params=["postgres", "duckdb"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """An empty, migrated store on each backend: a reset PostgreSQL database, or a new
    DuckDB file."""
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
        reset_postgres(url)
    else:
        url = request.getfixturevalue("new_duckdb")("store.duckdb")
    db = Database(url)
    yield db
    db.dispose()


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local[2] Spark session for the whole run (it takes seconds to start); Spark
    loads only in a session that asks for it."""
    from pipeline.session import spark_session

    session = spark_session("local[2]", app_name="topicstore-tests", shuffle_partitions=2)
    yield session
    session.stop()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Name the RabbitMQ the conformance tests compared with (the test records it as the
    ``rabbitmq`` property; from xdist workers too), so a run says which release it vouches
    for."""
    seen = {
        str(value)
        for reports in terminalreporter.stats.values()
        for report in reports
        for name, value in getattr(report, "user_properties", ())
        if name == "rabbitmq"
    }
    for line in sorted(seen):
        terminalreporter.write_line(f"RabbitMQ conformance: compared with {line}")
