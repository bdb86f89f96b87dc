"""The async client as an application uses it, from its own event loop: many matches at
once over one client, an async paging iterator, a 429 waited out with the default sleep
(``anyio.sleep``). ``test_client.py`` holds it to every endpoint beside the blocking one."""

from __future__ import annotations

import json
import re
from pathlib import Path

import anyio
import pytest

from tests.app.conftest import ADMIN, TENANTS, TOKEN_A, ServerFactory
from topicstore.client import AsyncClient
from topicstore.models import MatchOut, SubscriptionIn

pytestmark = pytest.mark.anyio

SUBSCRIPTIONS = 50


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_an_application_on_its_event_loop(serve: ServerFactory, tmp_path: Path) -> None:
    server = serve(
        database_url=f"duckdb:///{tmp_path / 'async.duckdb'}",
        admin_token=ADMIN,
        tenant_tokens=json.dumps(TENANTS),
        rate_admin="0.5",
        rate_admin_burst="1",
    )
    server.wait_until("/readyz", 200)
    async with AsyncClient(server.url, ADMIN) as admin:
        items = [
            SubscriptionIn(subscriber=f"q{i}", pattern=f"t.{i}.#") for i in range(SUBSCRIPTIONS)
        ]
        assert (await admin.create_subscriptions(items)).created == SUBSCRIPTIONS
        answers: dict[int, MatchOut] = {}

        async def match(i: int) -> None:
            answers[i] = await admin.match(f"t.{i}.x")

        async with anyio.create_task_group() as group:
            for i in range(SUBSCRIPTIONS):
                group.start_soon(match, i)
        assert {i: a.subscribers for i, a in answers.items()} == {
            i: [f"q{i}"] for i in range(SUBSCRIPTIONS)
        }
        ids = [s.id async for s in admin.iter_subscriptions(page_size=7)]
        assert ids == list(range(1, SUBSCRIPTIONS + 1))
        assert [e.action async for e in admin.iter_audit()] == ["bulk_create"]

    # The tenant's second write in a row gets a 429 with Retry-After: 2, waited out.
    async with AsyncClient(server.url, TOKEN_A) as acme:
        first = await acme.create_subscription(SubscriptionIn(subscriber="a", pattern="x"))
        second = await acme.create_subscription(SubscriptionIn(subscriber="a", pattern="y"))
        assert second.id == first.id + 1
    async with AsyncClient(server.url, ADMIN) as admin:
        metrics = await admin.metrics()
    refused = re.search(
        r'topicstore_rate_limited_total\{kind="admin",tenant="acme"\} (\S+)', metrics
    )
    assert refused is not None and float(refused.group(1)) == 1
