"""The Python client (``topicstore.client``) against a real ``topicstore serve``: every
endpoint, paging, a 429 waited out by its Retry-After, a 503 (a service still building its
table, a store that stopped), and each refusal raised as the exception of its status with
the envelope's code. Each scenario runs on both clients: the async one driven from the
test's thread through an anyio portal (``Blocking``), so the two are held to the very same
expectations; ``test_client_async.py`` uses it from an event loop, as applications do."""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pyarrow.parquet as pq
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal

from harness.scratch_db import libpq_dsn
from harness.server import Server
from harness.services import reset_postgres
from tests.app.conftest import ADMIN, TENANTS, TOKEN_A, TOKEN_B, ServerFactory
from tests.private_postgres import private_postgres
from tests.routed import write_routed
from topicstore.client import (
    DEFAULT_RETRY,
    NO_RETRY,
    ApiError,
    AsyncClient,
    BadRequestError,
    Client,
    ConflictError,
    ForbiddenError,
    InvalidRequestError,
    NotFoundError,
    RateLimitedError,
    Retry,
    TooLargeError,
    UnauthorizedError,
    UnavailableError,
)
from topicstore.models import CallerOut, GroupChoice, SubscriptionIn

KINDS = ["sync", "async"]


class Blocking:
    """An ``AsyncClient`` whose methods are called from this thread: each call runs on
    the portal's event loop (where the client and its connections live), and the paging
    iterators are gathered into lists there."""

    def __init__(self, portal: BlockingPortal, client: AsyncClient) -> None:
        self.portal = portal
        self.client = client

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.client, name)
        if name.startswith("iter_"):

            async def gather(*args: Any, **kwargs: Any) -> list[Any]:
                return [item async for item in method(*args, **kwargs)]

            return lambda *args, **kwargs: iter(self.portal.call(partial(gather, *args, **kwargs)))
        return lambda *args, **kwargs: self.portal.call(partial(method, *args, **kwargs))


ClientFactory = Callable[..., Any]


@pytest.fixture(params=KINDS)
def connect(request: pytest.FixtureRequest) -> Iterator[ClientFactory]:
    """``connect(url, token, retry=..., sleep=...)``: a ``Client``, or an ``AsyncClient``
    seen through ``Blocking`` (``sleep`` run in a worker thread); each closed at the end.
    Typed ``Any``: the two answer the same methods."""
    kind: str = request.param
    opened: list[Any] = []
    with start_blocking_portal() as portal:

        def make(
            url: str,
            token: str | None,
            *,
            retry: Retry = DEFAULT_RETRY,
            sleep: Callable[[float], None] = time.sleep,
        ) -> Any:
            if kind == "sync":
                client = Client(url, token, retry=retry, sleep=sleep)
                opened.append(client.close)
                return client

            async def awaited(seconds: float) -> None:
                await anyio.to_thread.run_sync(sleep, seconds)

            made = portal.call(partial(_async_client, url, token, retry, awaited))
            opened.append(partial(portal.call, made.aclose))
            return Blocking(portal, made)

        yield make
        for close in reversed(opened):
            close()


async def _async_client(
    url: str, token: str | None, retry: Retry, sleep: Callable[[float], Awaitable[None]]
) -> AsyncClient:
    """Made on the portal's event loop, where it is used."""
    return AsyncClient(url, token, retry=retry, sleep=sleep)


def _settings(tmp_path: Path, **more: str) -> dict[str, str]:
    return {
        "database_url": f"duckdb:///{tmp_path / 'client.duckdb'}",
        "admin_token": ADMIN,
        "tenant_tokens": json.dumps(TENANTS),
        "poll_interval": "0.1",
        **more,
    }


def _ready(serve: ServerFactory, **settings: str) -> Server:
    server = serve(**settings)
    server.wait_until("/readyz", 200)
    return server


def _requests(metrics: str, method: str, route: str, status: int = 200) -> float:
    labels = f'method="{method}",route="{re.escape(route)}",status="{status}"'
    found = re.search(rf"topicstore_http_requests_total\{{{labels}\}} (\S+)", metrics)
    return float(found.group(1)) if found else 0.0


# -- every endpoint ------------------------------------------------------------------------


def test_every_endpoint(connect: ClientFactory, serve: ServerFactory, tmp_path: Path) -> None:
    routed = write_routed(tmp_path / "routed")
    server = _ready(
        serve,
        **_settings(
            tmp_path,
            analytics_dir=str(routed),
            analytics_subscriptions=str(routed / "subscriptions.parquet"),
        ),
    )
    admin = connect(server.url, ADMIN)
    acme = connect(server.url, TOKEN_A)

    assert admin.health().status == "ok"
    ready = admin.readiness()
    assert (ready.ready, ready.reason, ready.tenants) == (True, None, {})
    assert admin.whoami() == CallerOut(role="operator", tenant=None)
    assert acme.whoami() == CallerOut(role="tenant", tenant="acme")

    billing = acme.create_subscription(
        SubscriptionIn(subscriber="billing", pattern="orders.*.created", labels={"team": "pay"})
    )
    assert (billing.id, billing.tenant, billing.labels) == (1, "acme", {"team": "pay"})
    same = acme.create_subscription(
        SubscriptionIn(subscriber="billing", pattern="orders.*.created")
    )
    assert same.id == billing.id  # stored before: answered with that row
    bulk = acme.create_subscriptions(
        [
            SubscriptionIn(subscriber="audit", pattern="orders.#"),
            {"subscriber": "w1", "pattern": "orders.eu.*", "group": "g", "group_policy": "hash"},
            {"subscriber": "broken", "pattern": "orders.\0"},
            SubscriptionIn(subscriber="dash", pattern="sensors/+/temp", dialect="mqtt"),
            SubscriptionIn(subscriber="hdr", kind="headers", criteria={"region": "eu"}, mode="all"),
            SubscriptionIn(subscriber="audit", pattern="orders.us.created"),
        ]
    )
    assert (bulk.created, bulk.exists, bulk.failed) == (5, 0, 1)
    assert [r.id for r in bulk.results] == [2, 3, None, 4, 5, 6]
    failed = bulk.results[2].error
    assert failed is not None and failed.code == "nul_byte"
    assert acme.get_subscription(4).pattern == "sensors/+/temp"

    matched = acme.match("orders.eu.created")
    assert (matched.subscriptions, matched.subscribers) == ([1, 2, 3], ["audit", "billing", "w1"])
    assert matched.groups == [
        GroupChoice(group="g", policy="hash", subscription=3, subscriber="w1", candidates=1)
    ]
    assert acme.match("sensors/attic/temp", dialect="mqtt").subscribers == ["dash"]
    assert acme.match("orders.eu.created", tenant="acme").subscriptions == [1, 2, 3]
    batch = acme.match_batch(["orders.us.created", "x" * 300, "nothing"])
    assert batch.results[0].subscriptions == [1, 2, 6]
    assert batch.results[1].error is not None and batch.results[1].error.code == "topic_too_long"
    assert batch.results[2].subscriptions == []
    assert acme.match_batch(["orders.eu.x"], keys=["k"]).results[0].subscribers == ["audit", "w1"]
    assert acme.match_headers({"region": "eu", "more": "x"}).subscriptions == [5]

    explained = acme.explain("orders.us.created", subscribers=["w1"])
    assert [m.pattern for m in explained.matched] == [
        "orders.*.created",
        "orders.#",
        "orders.us.created",
    ]
    (missed,) = explained.unmatched
    assert missed.closest is not None and missed.closest.failure.position == 1

    assert [s.id for s in acme.list_subscriptions(overlaps="orders.us.#").items] == [1, 2, 6]
    assert [s.id for s in acme.list_subscriptions(covered_by="orders.*.created").items] == [1, 6]
    assert [s.id for s in acme.list_subscriptions(label="team=pay").items] == [1]
    assert [s.id for s in acme.list_subscriptions(dialect="headers").items] == [5]
    assert [s.subscriber for s in acme.iter_subscriptions(group="g")] == ["w1"]
    redundant = acme.redundant("audit")
    assert [(r.id, r.covered_by) for r in redundant.redundant] == [(6, 2)]

    counts = acme.count_subscriptions()
    assert (counts.tenant, counts.total, counts.by_dialect) == (
        "acme",
        6,
        {"amqp": 4, "headers": 1, "mqtt": 1},
    )
    assert [e.id for e in acme.snapshot().subscriptions] == [1, 2, 3, 4, 5, 6]
    exported = tmp_path / "acme.parquet"
    assert acme.export_subscriptions(exported) == 6
    assert sorted(pq.read_table(exported).column("id").to_pylist()) == [1, 2, 3, 4, 5, 6]
    assert not exported.with_name("acme.parquet.part").exists()

    assert acme.delete_subscriber("dash").deleted == [4]
    gone = acme.delete_subscriptions(group="g", pattern_prefix="orders.eu")
    assert (gone.deleted, gone.more) == ([3], False)
    acme.delete_subscription(billing.id)
    with pytest.raises(NotFoundError):
        acme.get_subscription(billing.id)
    assert acme.count_subscriptions().total == 3

    changes = list(admin.iter_audit(tenant="acme"))
    assert [(c.action, c.ids) for c in changes] == [
        ("create", [1]),
        ("bulk_create", [2, 3, 4, 5, 6]),
        ("delete_subscriber", [4]),
        ("delete", [3]),
        ("delete", [1]),
    ]
    assert {c.caller_name for c in changes} == {f"acme:{_short(TOKEN_A)}"}

    subscribers = admin.analytics("subscribers")
    assert subscribers.rows[0] == {
        "tenant": "t1",
        "subscriber": "alice",
        "deliveries": 3,
        "messages": 3,
        "subscriptions": 1,
    }
    assert [row["messages"] for row in admin.analytics("timeline", bucket="day").rows] == [5, 2]
    first = admin.analytics("timeline", bucket="day", as_of=0)  # the table's first commit
    assert [row["messages"] for row in first.rows] == [5]
    assert len(admin.analytics("hot-topics", limit=1).rows) == 1

    metrics = admin.metrics()
    assert 'topicstore_tenant_subscriptions{dialect="amqp",tenant="acme"} 2.0' in metrics
    assert "topicstore_tenant_subscriptions" not in acme.metrics()
    history = acme.metrics_history()  # any token; the samples are tested in test_history.py
    assert (history.interval_seconds, history.points) == (10.0, 360)


def _short(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:8]


# -- paging --------------------------------------------------------------------------------


def test_paging_walks_every_page(
    connect: ClientFactory, serve: ServerFactory, tmp_path: Path
) -> None:
    server = _ready(serve, **_settings(tmp_path))
    admin = connect(server.url, ADMIN)
    items = [SubscriptionIn(subscriber=f"q{i % 3}", pattern=f"page.{i}") for i in range(7)]
    for item in items:  # one audit row each
        admin.create_subscription(item)

    before = _requests(admin.metrics(), "GET", "/v1/subscriptions")
    assert [s.id for s in admin.iter_subscriptions(page_size=2)] == [1, 2, 3, 4, 5, 6, 7]
    # Four pages of at most two: the last one says it is the last.
    assert _requests(admin.metrics(), "GET", "/v1/subscriptions") - before == 4
    assert [s.pattern for s in admin.iter_subscriptions(subscriber="q1", page_size=1)] == [
        "page.1",
        "page.4",
    ]
    first = admin.list_subscriptions(limit=3)
    assert ([s.id for s in first.items], first.next_after) == ([1, 2, 3], 3)
    last = admin.list_subscriptions(after=6, limit=3)
    assert ([s.id for s in last.items], last.next_after) == ([7], None)
    assert list(admin.iter_subscriptions(subscriber="nobody")) == []

    oldest_first = [entry.id for entry in admin.iter_audit(page_size=3)]
    assert len(oldest_first) == 7
    assert [entry.id for entry in admin.iter_audit(order="desc", page_size=2)] == (
        oldest_first[::-1]
    )
    page = admin.audit_page(limit=2, action="create", since=datetime(2000, 1, 1, tzinfo=UTC))
    assert (len(page.items), page.next_after) == (2, page.items[-1].id)
    assert admin.audit_page(until=datetime(2000, 1, 1, tzinfo=UTC)).items == []


# -- 429 and 503 ---------------------------------------------------------------------------


def test_a_429_is_waited_out_as_retry_after_asks(
    connect: ClientFactory, serve: ServerFactory, tmp_path: Path
) -> None:
    """One match every two seconds, one at once, for the tenant: the second match in a row
    is refused with Retry-After: 2 and sent again two seconds later."""
    server = _ready(serve, **_settings(tmp_path, rate_match="0.5", rate_match_burst="1"))
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    acme = connect(server.url, TOKEN_A, sleep=sleep)
    assert acme.match("a").subscriptions == []
    assert acme.match("a").subscriptions == []
    assert waits == [2.0]

    # Bounded in requests: three refused in a row (no real wait, so no token comes back).
    counted: list[float] = []
    impatient = connect(server.url, TOKEN_A, retry=Retry(attempts=3), sleep=counted.append)
    with pytest.raises(RateLimitedError) as refused:
        impatient.match("a")
    assert (refused.value.status, refused.value.code, refused.value.retry_after) == (
        429,
        "rate_limited",
        2.0,
    )
    assert counted == [2.0, 2.0]
    # Bounded in seconds: a longer wait than allowed is raised at once.
    short = connect(server.url, TOKEN_A, retry=Retry(max_wait=1), sleep=counted.append)
    with pytest.raises(RateLimitedError):
        short.match("a")
    assert counted == [2.0, 2.0]
    refusals = _metric(connect(server.url, ADMIN).metrics(), "match", "acme")
    assert refusals == 1 + 3 + 1


def _metric(metrics: str, kind: str, tenant: str) -> float:
    found = re.search(
        rf'topicstore_rate_limited_total\{{kind="{kind}",tenant="{tenant}"\}} (\S+)', metrics
    )
    return float(found.group(1)) if found else 0.0


@contextmanager
def _locked(url: str) -> Iterator[Callable[[], None]]:
    """The subscription table locked (its readers wait), until the function given is called
    or the block ends: a service started meanwhile answers while its table is not built."""
    connection = psycopg.connect(libpq_dsn(url))
    connection.execute("LOCK TABLE subscription IN ACCESS EXCLUSIVE MODE")
    try:
        yield connection.rollback
    finally:
        connection.rollback()
        connection.close()


def test_a_503_while_the_table_builds_is_waited_out(
    connect: ClientFactory, serve: ServerFactory, tmp_path: Path, postgres_url: str
) -> None:
    reset_postgres(postgres_url)
    with _locked(postgres_url) as release:
        server = serve(**{**_settings(tmp_path), "database_url": postgres_url})
        acme = connect(server.url, TOKEN_A, retry=NO_RETRY)
        building = acme.readiness()  # a 503 that is an answer
        assert (building.ready, building.reason) == (False, "building")
        with pytest.raises(UnavailableError) as refused:
            acme.match("a")
        assert (refused.value.status, refused.value.code, refused.value.retry_after) == (
            503,
            "not_ready",
            1.0,
        )
        waits: list[float] = []

        def sleep(seconds: float) -> None:
            waits.append(seconds)
            release()  # the build goes on while the client waits
            time.sleep(seconds)

        patient = connect(server.url, TOKEN_A, retry=Retry(attempts=30), sleep=sleep)
        assert patient.match("a").subscriptions == []
    assert waits[0] == 1.0
    assert patient.readiness().ready


def test_a_503_while_the_store_is_away_is_waited_out(
    connect: ClientFactory, serve: ServerFactory, tmp_path: Path
) -> None:
    with private_postgres() as store:
        server = _ready(serve, **{**_settings(tmp_path), "database_url": store.url})
        admin = connect(server.url, ADMIN, retry=NO_RETRY)
        kept = admin.create_subscription(SubscriptionIn(subscriber="q", pattern="kept.#"))
        store.stop()
        with pytest.raises(UnavailableError) as refused:
            admin.create_subscription(SubscriptionIn(subscriber="q", pattern="later.#"))
        assert (refused.value.code, refused.value.retry_after) == ("store_unavailable", 5.0)
        assert admin.match("kept.x").subscriptions == [kept.id]  # from memory

        waits: list[float] = []

        def sleep(seconds: float) -> None:
            # The wait asked for is what is checked; the store is back once ``start``
            # returns (``pg_ctl -w``), so the seconds themselves need not pass.
            waits.append(seconds)
            store.start()

        patient = connect(server.url, ADMIN, sleep=sleep)
        later = patient.create_subscription(SubscriptionIn(subscriber="q", pattern="later.#"))
        assert waits == [5.0]
        assert patient.match("later.x").subscriptions == [later.id]


# -- refusals ------------------------------------------------------------------------------


def test_each_refusal_raises_its_exception_with_the_code(
    connect: ClientFactory, serve: ServerFactory, tmp_path: Path
) -> None:
    server = _ready(serve, **_settings(tmp_path, max_batch="3"))
    admin = connect(server.url, ADMIN)
    acme = connect(server.url, TOKEN_A)
    globex = connect(server.url, TOKEN_B)
    stranger = connect(server.url, "not-a-token-of-this-service")
    acme.create_subscription(SubscriptionIn(subscriber="w", pattern="jobs.#", group="g"))

    cases: list[tuple[Callable[[], object], type[ApiError], int, str]] = [
        (lambda: acme.match("a\0b"), BadRequestError, 400, "nul_byte"),
        (
            lambda: acme.create_subscription(
                SubscriptionIn(subscriber="x", pattern="a/#/b", dialect="mqtt")
            ),
            BadRequestError,
            400,
            "invalid_wildcard",
        ),
        (lambda: admin.analytics("tenants"), NotFoundError, 404, "no_deliveries"),
        (lambda: stranger.whoami(), UnauthorizedError, 401, "unauthorized"),
        (lambda: acme.match("a", tenant="globex"), ForbiddenError, 403, "wrong_tenant"),
        (lambda: acme.analytics("subscribers"), ForbiddenError, 403, "operator_only"),
        (lambda: globex.get_subscription(1), NotFoundError, 404, "not_found"),
        (lambda: acme.delete_subscription(99), NotFoundError, 404, "not_found"),
        (
            lambda: acme.create_subscription(
                SubscriptionIn(subscriber="v", pattern="more.#", group="g", group_policy="hash")
            ),
            ConflictError,
            409,
            "group_policy_conflict",
        ),
        (lambda: acme.match_batch(["a", "b", "c", "d"]), TooLargeError, 413, "batch_too_large"),
        (
            lambda: acme.match_batch(["a"], keys=["k", "l"]),
            InvalidRequestError,
            422,
            "keys_mismatch",
        ),
        (
            lambda: admin.audit_page(since=datetime(1900, 1, 1, tzinfo=UTC)),
            InvalidRequestError,
            422,
            "time_out_of_range",
        ),
        (lambda: acme.list_subscriptions(limit=5000), InvalidRequestError, 422, "invalid_request"),
    ]
    for call, kind, status, code in cases:
        with pytest.raises(kind) as refused:
            call()
        error = refused.value
        assert (type(error), error.status, error.code) == (kind, status, code), error
        assert error.message and error.request_id
    with pytest.raises(InvalidRequestError) as invalid:
        acme.list_subscriptions(limit=5000)
    assert invalid.value.details and invalid.value.details[0].loc == ["query", "limit"]
