"""OpenTelemetry traces (``app.tracing``) from a real uvicorn, with the connection guards and
the match fast path, serving the app in this process so the SDK's in-memory exporter sees
every span: one tree per request, the store's statements under it (also for writes that
another request's thread committed in its group), the caller's ``traceparent`` honoured
and answered, the match span's word count and result size without the topic. With tracing
off, none of it is even imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from sqlalchemy.orm import Session

from app import tracing
from app.connections import GuardedHttpProtocol
from app.main import create_app
from app.services import Services
from harness.server import free_port
from harness.services import reset_postgres
from tests.app.conftest import ADMIN_HEADERS, make_settings

ROOT = Path(__file__).resolve().parents[2]
SQL_SCOPE = "opentelemetry.instrumentation.sqlalchemy"
#: A caller's span: W3C Trace Context's own example.
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
MATCH_TRACE = "4bf92f3577b34da6a3ce929d0e0e4737"


def traceparent(trace_id: str, span_id: str = CALLER_SPAN) -> str:
    return f"00-{trace_id}-{span_id}-01"


@dataclass
class Traced:
    """A traced server in this process and the spans it finished."""

    url: str
    services: Services
    exporter: InMemorySpanExporter

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=ADMIN_HEADERS, timeout=30)

    def trace(self, trace_id: str) -> list[ReadableSpan]:
        """The finished spans of ``trace_id``, once its request's own (server) span is among
        them: the server ends it after the answer is sent, so the client can read the
        answer first."""
        deadline = time.monotonic() + 10.0
        while True:
            spans = [s for s in self.exporter.get_finished_spans() if _trace_id(s) == trace_id]
            if any(s.kind == SpanKind.SERVER for s in spans) or time.monotonic() > deadline:
                return spans
            time.sleep(0.01)


def _trace_id(span: ReadableSpan) -> str:
    assert span.context is not None
    return f"{span.context.trace_id:032x}"


def _span_id(span: ReadableSpan) -> str:
    assert span.context is not None
    return f"{span.context.span_id:016x}"


def _parent_id(span: ReadableSpan) -> str | None:
    return None if span.parent is None else f"{span.parent.span_id:016x}"


def _scope(span: ReadableSpan) -> str:
    assert span.instrumentation_scope is not None
    return span.instrumentation_scope.name


def one_tree(spans: list[ReadableSpan]) -> ReadableSpan:
    """The root of ``spans`` after checking that they form one tree under it (every other
    span's parent is among them); the root's parent, if any, is outside (the caller's)."""
    ids = {_span_id(s) for s in spans}
    roots = [s for s in spans if _parent_id(s) not in ids]
    assert len(roots) == 1, [s.name for s in roots]
    return roots[0]


def children(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if _parent_id(s) == _span_id(parent)]


@contextmanager
def serving_traced(store_url: str, **overrides: Any) -> Iterator[Traced]:
    """The app with tracing on (exporting nowhere but the in-memory exporter added here)
    under uvicorn in a thread, stopped at the end."""
    before = os.environ.get("OTEL_TRACES_EXPORTER")
    os.environ["OTEL_TRACES_EXPORTER"] = "none"
    try:
        app = create_app(make_settings(store_url, tracing=True, **overrides), wait_until_ready=True)
    finally:
        if before is None:
            del os.environ["OTEL_TRACES_EXPORTER"]
        else:
            os.environ["OTEL_TRACES_EXPORTER"] = before
    services: Services = app.state.services
    assert services.tracing is not None
    exporter = InMemorySpanExporter()
    services.tracing.add_span_processor(SimpleSpanProcessor(exporter))
    config = uvicorn.Config(
        app, host="127.0.0.1", port=free_port(), http=GuardedHttpProtocol, log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="traced-server")
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.01)
        yield Traced(f"http://127.0.0.1:{config.port}", services, exporter)
    finally:
        server.should_exit = True
        thread.join(30)


@pytest.fixture(scope="module", params=["postgres", "duckdb"])
def traced(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Traced]:
    """One traced server per backend for the module (the tests tell their requests apart
    by trace id)."""
    if request.param == "postgres":
        url: str = request.getfixturevalue("postgres_url")
        reset_postgres(url)
    else:
        url = f"duckdb:///{tmp_path_factory.mktemp('traced') / 'traced.duckdb'}"
    with serving_traced(url) as server:
        yield server


def test_a_write_is_one_tree_under_the_callers_span_with_its_statements(traced: Traced) -> None:
    with traced.client() as client:
        response = client.post(
            "/v1/subscriptions",
            json={"subscriber": "s", "pattern": "orders.*"},
            headers={"traceparent": traceparent(CALLER_TRACE)},
        )
    assert response.status_code == 201, response.text
    spans = traced.trace(CALLER_TRACE)
    root = one_tree(spans)
    assert root.name == "POST /v1/subscriptions"
    assert _parent_id(root) == CALLER_SPAN  # the caller's span, honoured
    # The answer names the server span, in the caller's trace.
    assert response.headers["traceparent"] == f"00-{CALLER_TRACE}-{_span_id(root)}-01"
    statements = [s for s in spans if _scope(s) == SQL_SCOPE]
    inserts = [s for s in statements if "INSERT INTO subscription " in str(s.attributes)]
    assert len(inserts) == 1
    assert {_parent_id(s) for s in statements} == {_span_id(root)}


def test_each_request_is_its_own_trace(traced: Traced) -> None:
    with traced.client() as client:
        answers = [client.get("/v1/subscriptions") for _ in range(3)]
    trace_ids = [a.headers["traceparent"].split("-")[1] for a in answers]
    assert len(set(trace_ids)) == 3
    for trace_id in trace_ids:
        spans = traced.trace(trace_id)
        root = one_tree(spans)
        assert root.name == "GET /v1/subscriptions"
        assert root.parent is None
        assert any(_scope(s) == SQL_SCOPE for s in spans)


def test_writes_committed_by_another_requests_thread_stay_in_their_own_trace(
    traced: Traced,
) -> None:
    """Four writes queued behind a held transaction commit as one group, led by one of
    their threads: each one's statements are still under its own request. The group's new
    rows go in as one statement of the group's own (``store.deferred``), under at most one
    request."""
    writes = traced.services.db.writes
    held, release = threading.Event(), threading.Event()

    def hold(session: Session) -> Callable[[], None]:
        held.set()
        assert release.wait(30)
        return lambda: None

    holder = threading.Thread(target=writes.run, args=(hold,))
    holder.start()
    assert held.wait(30)
    trace_ids = [f"{i + 1:032x}" for i in range(4)]
    statuses: list[int] = []

    def create(index: int) -> None:
        with traced.client() as client:
            response = client.post(
                "/v1/subscriptions",
                json={"subscriber": f"s{index}", "pattern": f"grouped.{index}"},
                headers={"traceparent": traceparent(trace_ids[index])},
            )
        statuses.append(response.status_code)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    while writes.waiting() < 4:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    groups = writes.groups
    release.set()
    for thread in [holder, *threads]:
        thread.join(30)
    assert statuses == [201] * 4
    assert writes.groups == groups + 2  # the holder's, then one for the four
    inserts = []
    for index, trace_id in enumerate(trace_ids):
        spans = traced.trace(trace_id)
        root = one_tree(spans)
        inserts.append(
            sum("INSERT INTO subscription " in str(s.attributes) for s in children(spans, root))
        )
        assert f"grouped.{index}" not in str([s.attributes for s in spans])  # bound, not text
    assert sum(inserts) <= 1, inserts


def test_the_match_span_has_words_and_results_but_not_the_topic(traced: Traced) -> None:
    topic = "plumbus.dinglebop.schleem"
    with traced.client() as client:
        for pattern in ("plumbus.#", "plumbus.*.schleem", "other.#"):
            client.post("/v1/subscriptions", json={"subscriber": "s", "pattern": pattern})
        by_post = client.post(
            "/v1/match",
            json={"topic": topic},
            headers={"traceparent": traceparent(MATCH_TRACE)},
        )
        by_get = client.get("/v1/match", params={"topic": topic})
        refused = client.post("/v1/match", json={"topic": "a/+/b#", "dialect": "mqtt"})
    assert len(by_post.json()["subscriptions"]) == 2
    assert refused.status_code == 400
    for answer, route in ((by_post, "POST /v1/match"), (by_get, "GET /v1/match")):
        spans = traced.trace(answer.headers["traceparent"].split("-")[1])
        root = one_tree(spans)
        assert root.name == route
        (match,) = children(spans, root)
        assert match.name == "match"
        assert match.attributes is not None
        assert match.attributes["topicstore.match.words"] == 3
        assert match.attributes["topicstore.match.results"] == 2
        assert "plumbus" not in str([(s.attributes, s.events) for s in spans])
    (match,) = [
        s for s in traced.trace(refused.headers["traceparent"].split("-")[1]) if s.name == "match"
    ]
    assert match.status.description == "wildcard_in_topic"
    assert match.events == ()  # the refusal's message quotes the topic


def test_the_topic_is_traced_when_configured(tmp_path: Path) -> None:
    with serving_traced(f"duckdb:///{tmp_path / 'topics.duckdb'}", trace_topics=True) as traced:
        with traced.client() as client:
            answer = client.get("/v1/match", params={"topic": "a.b"})
        spans = traced.trace(answer.headers["traceparent"].split("-")[1])
    (match,) = [s for s in spans if s.name == "match"]
    assert match.attributes is not None
    assert match.attributes["topicstore.match.topic"] == "a.b"
    assert match.attributes["topicstore.match.results"] == 0
    (root,) = [s for s in spans if s.name == "GET /v1/match"]
    assert root.attributes is not None
    assert str(root.attributes["http.url"]).endswith("/v1/match?topic=a.b")


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({}, ["OTLPSpanExporter"]),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, ["OTLPSpanExporter"]),
        ({"OTEL_TRACES_EXPORTER": "console, none"}, ["ConsoleSpanExporter"]),
        ({"OTEL_TRACES_EXPORTER": "none"}, []),
    ],
)
def test_the_exporters_are_the_ones_the_standard_variables_name(
    variables: dict[str, str], expected: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    found = tracing.exporters()
    assert [type(e).__name__ for e in found] == expected
    protocol = variables.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    if found and protocol:
        assert type(found[0]).__module__.startswith("opentelemetry.exporter.otlp.proto.http")
    for exporter in found:
        exporter.shutdown()


@pytest.mark.parametrize(
    ("name", "value"),
    [("OTEL_TRACES_EXPORTER", "jaeger"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")],
)
def test_an_exporter_this_installation_lacks_stops_the_startup(
    name: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(tracing.TracingConfigError, match=value) as refused:
        tracing.exporters()
    assert refused.value.code == "invalid_otel_setting"


def test_the_service_is_named_topicstore_unless_the_variables_say(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    assert tracing.resource().attributes["service.name"] == "topicstore"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "routing-eu")
    assert tracing.resource().attributes["service.name"] == "routing-eu"


_OFF_PROBE = """
import json, os, sys
from app.main import create_app
from app.settings import Settings
settings = Settings(_env_file=None, database_url=sys.argv[1], admin_token="x" * 16)
create_app(settings).state.services.close()
# On, but OpenTelemetry's own switch says off:
os.environ["OTEL_SDK_DISABLED"] = "true"
assert not Settings(_env_file=None, tracing=True).tracing_on()
print(json.dumps(sorted(sys.modules)))
"""
#: What tracing loads: the SDK, the instrumentations, the exporters. (FastAPI itself imports
#: OpenTelemetry's API, ``opentelemetry.trace`` and ``opentelemetry.context``, for telemetry
#: of its own that stays off while no tracer provider is set, as here.)
TRACING_MODULES = ("opentelemetry.sdk", "opentelemetry.instrumentation", "opentelemetry.exporter")


def test_with_tracing_off_nothing_of_it_is_imported(tmp_path: Path) -> None:
    """Off by default, and off when OpenTelemetry's own switch says so."""
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TOPICSTORE_"))
    }
    done = subprocess.run(
        [sys.executable, "-c", _OFF_PROBE, f"duckdb:///{tmp_path / 'off.duckdb'}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={**environment, "PYTHONPATH": str(ROOT)},
    )
    loaded = set(json.loads(done.stdout.splitlines()[-1]))
    assert {"app.main", "fastapi"} <= loaded  # the probe did build the app
    assert [m for m in loaded if m.startswith(TRACING_MODULES)] == []
    assert "app.tracing" not in loaded
