"""``AsyncClient``: the API over HTTP, for asyncio or trio (httpx, anyio). The same
methods as ``Client`` (``topicstore.client.sync``), awaited; each sends one call of
``topicstore.client.calls`` and answers with the API's own model."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar, Unpack

import anyio
import httpx
from pydantic import JsonValue

from topicstore.client import calls
from topicstore.client.calls import (
    PAGE_SIZE,
    AuditFilters,
    Call,
    Paged,
    SelectionFilters,
    SubscriptionFilters,
)
from topicstore.client.retry import DEFAULT_RETRY, Retry
from topicstore.models import (
    AnalyticsBucket,
    AnalyticsOut,
    AuditOut,
    AuditPage,
    BatchOut,
    BulkOut,
    CallerOut,
    Counts,
    Deleted,
    Dialect,
    ExplainOut,
    Health,
    HistoryOut,
    MatchOut,
    Page,
    Readiness,
    RedundantOut,
    SnapshotOut,
    SubscriptionIn,
    SubscriptionOut,
)

T = TypeVar("T")
Item = TypeVar("Item")


class AsyncClient:
    """The service at ``base_url`` with ``token`` (the operator's or a tenant's).

    A refusal raises the ``ApiError`` of its status (``code`` names the rule); a 429 or
    503 with ``Retry-After`` is first waited out and sent again as ``retry`` allows
    (``sleep`` waits). A service that cannot be reached raises httpx's
    ``TransportError``. Close it (``aclose``, or use it in an ``async with``) to close
    its connections."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retry: Retry = DEFAULT_RETRY,
        headers: Mapping[str, str] | None = None,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self.retry = retry
        self._sleep = sleep
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=calls.headers(token, headers), timeout=timeout
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- sending -------------------------------------------------------------------------

    async def send(self, call: Call[T]) -> T:
        """The answer to ``call``, read into its model."""
        async with self._answer(call) as response:
            await response.aread()
            return call.read(response)

    @asynccontextmanager
    async def _answer(self, call: Call[Any]) -> AsyncIterator[httpx.Response]:
        """The response that answers ``call``, its body not read yet; each refusal the
        retry policy waits out is waited out and the request sent again."""
        attempt = 1
        while True:
            response = await self._http.send(calls.request(self._http, call), stream=True)
            try:
                if calls.answered(call, response):
                    yield response
                    return
                await response.aread()
                wait = calls.refusal(response, self.retry, attempt)
            finally:
                await response.aclose()
            await self._sleep(wait)
            attempt += 1

    async def _items(
        self, page: Callable[[Paged[Item] | None], Call[Paged[Item]]]
    ) -> AsyncIterator[Item]:
        """Every item of a keyset listing: ``page`` makes the call for the page after the
        one it is given (None: the first)."""
        answer: Paged[Item] | None = None
        while True:
            answer = await self.send(page(answer))
            for item in answer.items:
                yield item
            if answer.next_after is None:
                return

    # -- operations ----------------------------------------------------------------------

    async def health(self) -> Health:
        return await self.send(calls.health())

    async def readiness(self) -> Readiness:
        """Ready or not (``/readyz`` answers 503 when not: that is an answer here)."""
        return await self.send(calls.readiness())

    async def metrics(self) -> str:
        """The Prometheus text (the operator's token adds the per-tenant series)."""
        return await self.send(calls.metrics())

    async def whoami(self) -> CallerOut:
        return await self.send(calls.whoami())

    async def metrics_history(self) -> HistoryOut:
        """The last hour (at most 360 samples) of this replica's match rate, latency and
        change lag, oldest first: what the console's Health page graphs."""
        return await self.send(calls.metrics_history())

    # -- subscriptions -------------------------------------------------------------------

    async def create_subscription(self, item: SubscriptionIn) -> SubscriptionOut:
        """The new subscription, or the same one stored before (201 and 200 alike)."""
        return await self.send(calls.create_subscription(item))

    async def create_subscriptions(
        self, items: Sequence[SubscriptionIn | Mapping[str, JsonValue]]
    ) -> BulkOut:
        """One result per item (``created``, ``exists`` or ``error`` with its code); the
        valid items are stored even when others fail."""
        return await self.send(calls.create_subscriptions(items))

    async def get_subscription(self, sub_id: int) -> SubscriptionOut:
        return await self.send(calls.get_subscription(sub_id))

    async def set_expiry(
        self, sub_id: int, expires_at: datetime | None = None, *, ttl: int | None = None
    ) -> SubscriptionOut:
        """Set its expiry to ``ttl`` seconds from now, else to ``expires_at`` (aware),
        else clear it (never expires); ``NotFoundError`` when there is no such
        subscription, ``ConflictError`` (``subscription_expired``) when it has already
        expired."""
        return await self.send(calls.set_expiry(sub_id, expires_at, ttl))

    async def delete_subscription(self, sub_id: int) -> None:
        """``NotFoundError`` when there is no such subscription (for this tenant)."""
        await self.send(calls.delete_subscription(sub_id))

    async def list_subscriptions(
        self,
        *,
        after: int | None = None,
        after_matches: int | None = None,
        limit: int = 100,
        **filters: Unpack[SubscriptionFilters],
    ) -> Page:
        """One page in id order (or ``sort="matches"``: most matched first, the cursor
        ``after`` with ``after_matches``); ``iter_subscriptions`` walks them all."""
        call = calls.list_subscriptions(
            after=after, after_matches=after_matches, limit=limit, **filters
        )
        return await self.send(call)

    def iter_subscriptions(
        self, *, page_size: int = PAGE_SIZE, **filters: Unpack[SubscriptionFilters]
    ) -> AsyncIterator[SubscriptionOut]:
        """Every subscription the filters select, in id order (or ``sort="matches"``: most
        matched first), a page at a time."""
        return self._items(
            lambda previous: calls.next_subscriptions(previous, limit=page_size, **filters)
        )

    async def count_subscriptions(self, tenant: str | None = None) -> Counts:
        return await self.send(calls.count_subscriptions(tenant))

    async def export_subscriptions(
        self, path: str | os.PathLike[str], tenant: str | None = None
    ) -> int:
        """Write the tenant's subscriptions to ``path`` as Parquet (streamed; a failed
        download leaves no file) and return how many rows it holds."""
        call = calls.export_subscriptions(tenant)
        target = Path(path)
        part = target.with_name(target.name + ".part")
        async with self._answer(call) as response:
            try:
                async with await anyio.open_file(part, "wb") as out:
                    async for chunk in response.aiter_bytes():
                        await out.write(chunk)
                await anyio.Path(part).replace(target)
            finally:
                await anyio.Path(part).unlink(missing_ok=True)
            return call.read(response)

    async def snapshot(self, tenant: str | None = None) -> SnapshotOut:
        return await self.send(calls.snapshot(tenant))

    async def delete_subscriptions(self, **filters: Unpack[SelectionFilters]) -> Deleted:
        """Delete what the filters select (at least one), at most the service's
        ``TOPICSTORE_MAX_DELETE`` per call, lowest ids first: call again while ``more``."""
        return await self.send(calls.delete_subscriptions(**filters))

    async def delete_subscriber(self, subscriber: str, tenant: str | None = None) -> Deleted:
        return await self.send(calls.delete_subscriber(subscriber, tenant))

    async def redundant(
        self, subscriber: str, *, dialect: Dialect = "amqp", tenant: str | None = None
    ) -> RedundantOut:
        return await self.send(calls.redundant(subscriber, dialect, tenant))

    # -- matching ------------------------------------------------------------------------

    async def match(
        self,
        topic: str,
        *,
        dialect: Dialect = "amqp",
        tenant: str | None = None,
        key: str | None = None,
    ) -> MatchOut:
        return await self.send(calls.match(topic, dialect, tenant, key))

    async def match_batch(
        self,
        topics: Sequence[str],
        *,
        dialect: Dialect = "amqp",
        tenant: str | None = None,
        keys: Sequence[str] | None = None,
    ) -> BatchOut:
        """One result per topic, in order: its matches, or its error."""
        return await self.send(calls.match_batch(topics, dialect, tenant, keys))

    async def match_headers(
        self, headers: Mapping[str, str], *, tenant: str | None = None, key: str | None = None
    ) -> MatchOut:
        return await self.send(calls.match_headers(headers, tenant, key))

    async def explain(
        self,
        topic: str,
        *,
        dialect: Dialect = "amqp",
        tenant: str | None = None,
        subscribers: Sequence[str] = (),
    ) -> ExplainOut:
        return await self.send(calls.explain(topic, dialect, tenant, subscribers))

    # -- audit and analytics -------------------------------------------------------------

    async def audit_page(
        self, *, after: int | None = None, limit: int = 100, **filters: Unpack[AuditFilters]
    ) -> AuditPage:
        """One page of the audit log; ``iter_audit`` walks them all."""
        return await self.send(calls.audit_page(after=after, limit=limit, **filters))

    def iter_audit(
        self, *, page_size: int = PAGE_SIZE, **filters: Unpack[AuditFilters]
    ) -> AsyncIterator[AuditOut]:
        return self._items(
            lambda previous: calls.audit_page(
                after=None if previous is None else previous.next_after,
                limit=page_size,
                **filters,
            )
        )

    async def analytics(
        self,
        query: str,
        *,
        limit: int | None = None,
        bucket: AnalyticsBucket = "hour",
        as_of: int | None = None,
    ) -> AnalyticsOut:
        return await self.send(calls.analytics(query, limit, bucket, as_of))
