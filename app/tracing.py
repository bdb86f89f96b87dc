"""OpenTelemetry traces of the API's requests and the store statements under them.

Imported only when ``TOPICSTORE_TRACING`` is on (``Settings.tracing_on``): with it off
neither OpenTelemetry's SDK nor an instrumentation is loaded (FastAPI imports the API for
telemetry of its own, which ``app.main`` turns off) and no middleware is added, so the
service pays nothing.

What a traced request records, as one tree:

* the server span, from the FastAPI instrumentation (outermost ASGI middleware, so the match
  fast path, ``app.fastpath``, is inside it like every route): named ``METHOD /route``. An
  incoming W3C ``traceparent`` (``OTEL_PROPAGATORS``, by default ``tracecontext,baggage``)
  makes it a child of the caller's span, and the response carries a ``traceparent`` of its
  own context, so a client can find the request's trace;
* the store's statements, from the SQLAlchemy instrumentation on the store's engine: one
  span per statement, only under a request (the loader's polls, the startup build and
  reconciliation have no request and are not traced: ``store_provider``'s sampler drops
  spans without a parent). A write that joined another request's group commit runs its
  statements in its own request's context (``store.group_commit``), so they are under its
  own request; the group's own statements (PostgreSQL's writer lock, the group's
  read-ahead and its subscription rows: ``store.deferred``, the change-log, audit and
  tenant-count rows written once per group) are under the request that led it, if any
  (a write alone: all of its transaction's statements are under its own request);
* ``match`` (``POST``/``GET /v1/match``): the topic's word count, the result size (the
  subscriptions delivered, a group counting once) and the dialect; the topic text only with
  ``TOPICSTORE_TRACE_TOPICS`` (with it off the request's query string is left out of the
  server span too, and a refused topic records its error code, not its message);
* ``match.batch`` (``POST /v1/match/batch``): the topics and the matches.

Exporters, sampler and resource come from the standard variables (``OTEL_TRACES_EXPORTER``,
``OTEL_EXPORTER_OTLP_*``, ``OTEL_TRACES_SAMPLER``, ``OTEL_SERVICE_NAME``, ``OTEL_BSP_*``),
read by the SDK itself where it reads them."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Sequence
from importlib.metadata import entry_points
from typing import Any, Final

import sqlalchemy as sa
from fastapi import FastAPI
from opentelemetry.context import Context
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from opentelemetry.instrumentation.propagators import (
    ResponsePropagator,
    set_global_response_propagator,
)
from opentelemetry.instrumentation.sqlalchemy.engine import EngineTracer
from opentelemetry.instrumentation.sqlalchemy.version import __version__ as sqlalchemy_version
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.propagators import textmap
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased
from opentelemetry.trace import Span, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from app.auth import ConfigurationError
from app.settings import Settings
from loader import RoutingTable
from matcher import MatcherError, MatchResult, get_dialect

#: Attributes of the match spans (the ``topicstore.`` namespace: not OpenTelemetry's).
WORDS: Final = "topicstore.match.words"
RESULTS: Final = "topicstore.match.results"
DIALECT: Final = "topicstore.match.dialect"
TENANT: Final = "topicstore.tenant"
TOPIC: Final = "topicstore.match.topic"
BATCH_TOPICS: Final = "topicstore.batch.topics"
BATCH_MATCHES: Final = "topicstore.batch.matches"
#: Requests not traced unless ``OTEL_PYTHON_FASTAPI_EXCLUDED_URLS`` (or
#: ``OTEL_PYTHON_EXCLUDED_URLS``) says otherwise: the probes and the scrape, every few
#: seconds from every load balancer and Prometheus, would bury the requests.
EXCLUDED_URLS: Final = r"/(healthz|readyz|metrics)$"
_EXCLUDED_URLS_VARIABLES: Final = ("OTEL_PYTHON_FASTAPI_EXCLUDED_URLS", "OTEL_PYTHON_EXCLUDED_URLS")
#: The SDK's entry points per exporter name, and ``otlp``'s by protocol (as the SDK's own
#: configurator reads them: grpc unless ``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`` says).
_EXPORTER_GROUP: Final = "opentelemetry_traces_exporter"
_OTLP_BY_PROTOCOL: Final = {"grpc": "otlp_proto_grpc", "http/protobuf": "otlp_proto_http"}
#: The server span's query-bearing attributes (old and new HTTP conventions), cut to the
#: path when topics are not to be traced (``GET /v1/match?topic=...``).
_URL_ATTRIBUTES: Final = ("http.url", "http.target", "url.full")


class TracingConfigError(ConfigurationError):
    """An ``OTEL_*`` variable names something this installation cannot do."""

    code = "invalid_otel_setting"


def exporters() -> list[SpanExporter]:
    """The exporters ``OTEL_TRACES_EXPORTER`` names (comma-separated; default ``otlp``,
    ``none`` for none), each configured by its own ``OTEL_EXPORTER_*`` variables."""
    names = [n.strip() for n in os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")]
    found: list[SpanExporter] = []
    for name in filter(None, names):
        if name == "none":
            continue
        if name == "otlp":
            protocol = (
                os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "grpc"
            ).strip()
            if protocol not in _OTLP_BY_PROTOCOL:
                raise TracingConfigError(
                    f"OTEL_EXPORTER_OTLP_PROTOCOL is {protocol!r}: grpc or http/protobuf"
                )
            name = _OTLP_BY_PROTOCOL[protocol]
        points = list(entry_points(group=_EXPORTER_GROUP, name=name))
        if not points:
            raise TracingConfigError(
                f"OTEL_TRACES_EXPORTER names {name!r}, which no installed package provides "
                "(otlp comes with `pip install topicstore[tracing]`; console is built in)"
            )
        found.append(points[0].load()())
    return found


def resource() -> Resource:
    """``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME``, with ``topicstore`` as the
    service's name when neither names it (the SDK would say ``unknown_service``)."""
    found = Resource.create()
    if str(found.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        found = found.merge(Resource({SERVICE_NAME: "topicstore"}))
    return found


class TraceparentResponse(ResponsePropagator):
    """Puts the server span's context on the response as a W3C ``traceparent`` (and
    ``tracestate`` when it has one): the instrumentation's own response propagator writes a
    ``traceresponse`` header, a draft that clients do not read."""

    _format: Final = TraceContextTextMapPropagator()

    def inject(
        self,
        carrier: textmap.CarrierT,
        context: Context | None = None,
        setter: textmap.Setter[Any] = textmap.default_setter,
    ) -> None:
        self._format.inject(carrier, context=context, setter=setter)


def _words(dialect: str, topic: str) -> int:
    """Words of a topic (of a valid one: a refused topic is counted the same way)."""
    return topic.count(get_dialect(dialect).separator) + 1 if topic else 0


class Tracing:
    """The service's tracer providers and what puts spans on its requests (see the module
    docstring). ``processors``: where the spans go (``exporters()`` batched, by default);
    tests add the SDK's in-memory exporter with ``add_span_processor``."""

    def __init__(self, *, topics: bool, processors: Sequence[SpanProcessor] = ()) -> None:
        found = resource()
        #: Requests and match spans; the sampler is ``OTEL_TRACES_SAMPLER``'s (by default
        #: ``parentbased_always_on``).
        self.provider = TracerProvider(resource=found, shutdown_on_exit=False)
        #: Store statements: only under a sampled span (a request), never a trace of their own.
        self.store_provider = TracerProvider(
            resource=found, sampler=ParentBased(ALWAYS_OFF), shutdown_on_exit=False
        )
        for processor in processors:
            self.add_span_processor(processor)
        self.tracer = self.provider.get_tracer("topicstore")
        self.topics = topics

    @classmethod
    def from_settings(cls, settings: Settings) -> Tracing:
        batched = [BatchSpanProcessor(exporter) for exporter in exporters()]
        return cls(topics=settings.trace_topics, processors=batched)

    def add_span_processor(self, processor: SpanProcessor) -> None:
        """Send both providers' spans to ``processor`` (shut down by ``shutdown``)."""
        self.provider.add_span_processor(processor)
        self.store_provider.add_span_processor(processor)

    def instrument(self, app: FastAPI, engine: sa.Engine) -> None:
        """Trace ``app``'s requests and ``engine``'s statements. Before the app's first
        request: the instrumentation wraps the middleware stack Starlette builds then."""
        excluded = None if any(map(os.environ.get, _EXCLUDED_URLS_VARIABLES)) else EXCLUDED_URLS
        FastAPIInstrumentor.instrument_app(
            app,
            tracer_provider=self.provider,
            meter_provider=NoOpMeterProvider(),  # /metrics has the request figures
            excluded_urls=excluded,
            exclude_spans=["receive", "send"],  # a span per ASGI message: noise
            server_request_hook=None if self.topics else _without_query,
        )
        set_global_response_propagator(TraceparentResponse())  # type: ignore[no-untyped-call]
        # The engine alone, not ``SQLAlchemyInstrumentor().instrument()``: that one patches
        # ``create_engine`` and ``Engine.connect`` for the whole process, once per process,
        # and declines SQLAlchemy 2.1 (its declared range ends before; the listeners work).
        meter = NoOpMeterProvider().get_meter("topicstore")
        EngineTracer(  # type: ignore[no-untyped-call]
            self.store_provider.get_tracer(
                "opentelemetry.instrumentation.sqlalchemy", sqlalchemy_version
            ),
            engine,
            meter.create_up_down_counter("db.client.connections.usage"),
        )

    def routes(self, table: RoutingTable, tenant: str, dialect: str, topic: str) -> MatchResult:
        """``table.routes`` in a ``match`` span."""
        attributes: dict[str, str | int] = {
            DIALECT: dialect,
            TENANT: tenant,
            WORDS: _words(dialect, topic),
        }
        if self.topics:
            attributes[TOPIC] = topic
        span = self.tracer.start_span("match", attributes=attributes)
        try:
            ids = table.routes(tenant, dialect, topic)
            span.set_attribute(RESULTS, len(ids))
            return ids
        except MatcherError as e:
            _refused(span, e, self.topics)
            raise
        finally:
            span.end()

    async def batch(
        self, tenant: str, dialect: str, topics: int, answers: Awaitable[tuple[list[bytes], int]]
    ) -> tuple[list[bytes], int]:
        """``answers`` (a batch's answers and the matches they took) in a ``match.batch``
        span."""
        attributes: dict[str, str | int] = {
            DIALECT: dialect,
            TENANT: tenant,
            BATCH_TOPICS: topics,
        }
        with self.tracer.start_as_current_span("match.batch", attributes=attributes) as span:
            found = await answers
            span.set_attribute(BATCH_MATCHES, found[1])
            return found

    def shutdown(self) -> None:
        """Export what is still queued, then stop the exporters."""
        self.provider.shutdown()


def _refused(span: Span, error: MatcherError, topics: bool) -> None:
    """A refused topic: its code always, its message (which may quote the topic) only when
    topics are traced."""
    span.set_status(StatusCode.ERROR, error.code)
    if topics:
        span.record_exception(error)


def _without_query(span: Span, scope: dict[str, Any]) -> None:
    """The server span without the query string (it may hold a topic)."""
    if not scope.get("query_string") or not span.is_recording():
        return
    attributes = getattr(span, "attributes", None) or {}
    for name in _URL_ATTRIBUTES:
        value = attributes.get(name)
        if isinstance(value, str):
            span.set_attribute(name, value.partition("?")[0])
    if "url.query" in attributes:
        span.set_attribute("url.query", "")


def install(app: FastAPI, engine: sa.Engine, settings: Settings) -> Tracing:
    """Tracing for ``app`` and its store ``engine`` as ``settings`` and the ``OTEL_*``
    variables configure it."""
    tracing = Tracing.from_settings(settings)
    tracing.instrument(app, engine)
    return tracing
