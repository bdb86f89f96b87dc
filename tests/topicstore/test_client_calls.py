"""What the client asks and how it waits, without a server: every operation of the served
OpenAPI document has its call (and a method of each client, with the same parameters on
both), the filters are the routes' query parameters, a Retry-After is read and bounded as
documented, and an answer that is not the envelope still raises with its status. The
calls' answers are checked against a real server in ``tests/app/test_client.py``."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from app.main import create_app
from app.settings import Settings
from topicstore.client import (
    ApiError,
    AsyncClient,
    AuditFilters,
    Call,
    Client,
    NotFoundError,
    Retry,
    SelectionFilters,
    ServerError,
    SubscriptionFilters,
    UnavailableError,
    calls,
)
from topicstore.client.errors import error_for
from topicstore.client.retry import retry_after
from topicstore.models import SubscriptionIn

#: Served, and deliberately without a call: the same answer as ``POST /v1/match``, for a
#: browser or curl.
NOT_CALLED = {("GET", "/v1/match")}

#: One call of each builder of ``topicstore.client.calls``.
SAMPLES: dict[str, Call[Any]] = {
    "health": calls.health(),
    "readiness": calls.readiness(),
    "metrics": calls.metrics(),
    "whoami": calls.whoami(),
    "metrics_history": calls.metrics_history(),
    "create_subscription": calls.create_subscription(SubscriptionIn(subscriber="a")),
    "create_subscriptions": calls.create_subscriptions([{"subscriber": "a"}]),
    "get_subscription": calls.get_subscription(7),
    "set_expiry": calls.set_expiry(7, ttl=60),
    "delete_subscription": calls.delete_subscription(7),
    "list_subscriptions": calls.list_subscriptions(),
    "count_subscriptions": calls.count_subscriptions(),
    "export_subscriptions": calls.export_subscriptions(),
    "snapshot": calls.snapshot(),
    "delete_subscriber": calls.delete_subscriber("a/b c"),
    "delete_subscriptions": calls.delete_subscriptions(label="k=v"),
    "redundant": calls.redundant("a/b c"),
    "match": calls.match("a.b"),
    "match_batch": calls.match_batch(["a.b"]),
    "match_headers": calls.match_headers({"k": "v"}),
    "explain": calls.explain("a.b"),
    "audit_page": calls.audit_page(),
    "analytics": calls.analytics("subscribers"),
}


@cache
def _openapi(directory: Path) -> dict[str, Any]:
    settings = Settings(
        _env_file=None,
        database_url=f"duckdb:///{directory / 'unused.duckdb'}",
        admin_token="x" * 16,
    )
    document: dict[str, Any] = create_app(settings).openapi()  # built, not started
    return document


@pytest.fixture
def openapi(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _openapi(tmp_path_factory.getbasetemp())


def _operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in document["paths"].items():
        for method, operation in item.items():
            yield method.upper(), path, operation


def _template(path: str) -> re.Pattern[str]:
    return re.compile(re.sub(r"\{[^}]+\}", "[^/]+", path) + "$")


def test_every_served_operation_has_a_call(openapi: dict[str, Any]) -> None:
    served = {(method, path) for method, path, _ in _operations(openapi)}
    called = {
        (method, path)
        for method, path in served
        for call in SAMPLES.values()
        if call.method == method and _template(path).match(call.path)
    }
    assert len(served) > 15  # the document was read
    assert served - called == NOT_CALLED


def test_every_call_is_sampled_and_a_method_of_both_clients() -> None:
    builders = {
        name
        for name, function in inspect.getmembers(calls, inspect.isfunction)
        if function.__module__ == calls.__name__
        and str(inspect.signature(function).return_annotation).startswith("Call[")
        # a listing's next page (``previous`` given) is the listing's own call
        and "previous" not in inspect.signature(function).parameters
    }
    assert builders == set(SAMPLES)
    for name in builders:
        assert callable(getattr(Client, name)) and callable(getattr(AsyncClient, name)), name


def _public(kind: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in inspect.getmembers(kind, inspect.isfunction)
        if not name.startswith("_")
    }


def test_both_clients_have_the_same_methods_and_parameters() -> None:
    blocking, awaited = _public(Client), _public(AsyncClient)
    assert blocking.pop("close") and awaited.pop("aclose")
    assert blocking.keys() == awaited.keys()
    for name, signature in blocking.items():
        assert list(signature.parameters.values()) == list(awaited[name].parameters.values()), name
    coroutines = {
        name for name in awaited if inspect.iscoroutinefunction(getattr(AsyncClient, name))
    }
    assert coroutines == awaited.keys() - {"iter_subscriptions", "iter_audit"}
    assert inspect.isasyncgenfunction(AsyncClient._items)
    mine = inspect.signature(Client).parameters
    theirs = inspect.signature(AsyncClient).parameters
    assert [p.name for p in mine.values()] == [p.name for p in theirs.values()]


def _query_names(document: dict[str, Any], method: str, path: str) -> set[str]:
    operation = document["paths"][path][method.lower()]
    return {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}


def test_the_filters_are_the_routes_query_parameters(openapi: dict[str, Any]) -> None:
    listed = _query_names(openapi, "GET", "/v1/subscriptions")
    cursor = {"after", "after_matches", "limit"}  # the paging iterators pass them
    assert set(SubscriptionFilters.__annotations__) == listed - cursor
    removed = _query_names(openapi, "DELETE", "/v1/subscriptions")
    assert set(SelectionFilters.__annotations__) == removed
    audited = _query_names(openapi, "GET", "/v1/audit")
    renamed = {"since": "from", "until": "to"}
    assert {renamed.get(n, n) for n in AuditFilters.__annotations__} == audited - {"after", "limit"}


def test_calls_encode_what_the_api_reads() -> None:
    since = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    audit = calls.audit_page(after=9, limit=5, since=since, order="desc", action="create")
    assert dict(audit.query) == {
        "action": "create",
        "after": "9",
        "limit": "5",
        "order": "desc",
        "from": "2026-01-02T03:04:05+00:00",
    }
    explain = calls.explain("a.b", subscribers=["x", "y"])
    assert explain.query == (
        ("topic", "a.b"),
        ("dialect", "amqp"),
        ("subscriber", "x"),
        ("subscriber", "y"),
    )
    assert calls.delete_subscriber("a/b c").path == "/v1/subscribers/a%2Fb%20c/subscriptions"
    removal = calls.delete_subscriptions(tenant="t", label="k=v", group=None)
    assert (removal.method, removal.path) == ("DELETE", "/v1/subscriptions")
    assert removal.query == (("tenant", "t"), ("label", "k=v"))
    # Fields at their defaults are left out; the service fills them in.
    assert calls.match("a.b").body == b'{"topic":"a.b"}'
    assert calls.match("a/b", dialect="mqtt", key="k").body == (
        b'{"topic":"a/b","dialect":"mqtt","key":"k"}'
    )
    assert (
        calls.create_subscription(
            SubscriptionIn(subscriber="h", kind="headers", criteria={"k": None}, mode="any")
        ).body
        == b'{"subscriber":"h","kind":"headers","criteria":{"k":null},"mode":"any"}'
    )
    # A mapping item is sent as given (the service answers for each item).
    bulk = calls.create_subscriptions([{"subscriber": "a", "pattern": 1}])
    assert bulk.body == b'{"items":[{"subscriber":"a","pattern":1}]}'
    assert calls.readiness().answers == frozenset({503})


def test_retry_after_reads_seconds_and_dates() -> None:
    now = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
    assert retry_after("3", now) == 3.0
    assert retry_after(" 120 ", now) == 120.0
    assert retry_after(format_datetime(now + timedelta(seconds=30), usegmt=True), now) == 30.0
    assert retry_after(format_datetime(now - timedelta(seconds=30), usegmt=True), now) == 0.0
    assert retry_after(None, now) is None
    assert retry_after("soon", now) is None
    assert retry_after("-1", now) is None


def test_retry_is_bounded_in_requests_and_seconds() -> None:
    retry = Retry(attempts=3, max_wait=10)
    assert retry.wait(429, 2.0, attempt=1) == 2.0
    assert retry.wait(503, 10.0, attempt=2) == 10.0
    assert retry.wait(429, 2.0, attempt=3) is None  # the third request was the last
    assert retry.wait(429, 11.0, attempt=1) is None  # longer than allowed: raised
    assert retry.wait(429, None, attempt=1) is None  # no Retry-After: raised
    assert retry.wait(500, 1.0, attempt=1) is None
    assert retry.wait(400, 1.0, attempt=1) is None
    assert Retry(statuses=frozenset({429})).wait(503, 1.0, attempt=1) is None
    for wrong in ({"attempts": 0}, {"max_wait": -1}, {"statuses": frozenset({500})}):
        with pytest.raises(ValueError):
            Retry(**wrong)


def test_an_answer_without_the_envelope_still_raises_by_status() -> None:
    page = b"<html><body>502 Bad Gateway</body></html>"
    error = error_for(502, page, {"x-request-id": "r1"}, None)
    assert type(error) is ServerError
    assert (error.status, error.code, error.request_id) == (502, "http_error", "r1")
    assert "502 Bad Gateway" in error.message
    empty = error_for(503, b"", {}, 7.0)
    assert (type(empty), empty.code, empty.message, empty.retry_after) == (
        UnavailableError,
        "http_error",
        "HTTP 503",
        7.0,
    )
    assert type(error_for(418, b"{}", {}, None)) is ApiError
    enveloped = error_for(404, b'{"error":{"code":"not_found","message":"gone"}}', {}, None)
    assert (type(enveloped), enveloped.code, str(enveloped)) == (
        NotFoundError,
        "not_found",
        "404 not_found: gone",
    )
