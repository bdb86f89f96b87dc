"""``Client``: the API over HTTP, blocking (httpx). Each method sends one call of
``topicstore.client.calls`` and answers with the API's own model; ``AsyncClient``
(``topicstore.client.aio``) has the same methods, awaited."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar, Unpack

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


class Client:
    """The service at ``base_url`` with ``token`` (the operator's or a tenant's).

    A refusal raises the ``ApiError`` of its status (``code`` names the rule); a 429 or
    503 with ``Retry-After`` is first waited out and sent again as ``retry`` allows
    (``sleep`` waits). A service that cannot be reached raises httpx's
    ``TransportError``. Close it (or use it in a ``with``) to close its connections."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retry: Retry = DEFAULT_RETRY,
        headers: Mapping[str, str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.retry = retry
        self._sleep = sleep
        self._http = httpx.Client(
            base_url=base_url, headers=calls.headers(token, headers), timeout=timeout
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- sending -------------------------------------------------------------------------

    def send(self, call: Call[T]) -> T:
        """The answer to ``call``, read into its model."""
        with self._answer(call) as response:
            response.read()
            return call.read(response)

    @contextmanager
    def _answer(self, call: Call[Any]) -> Iterator[httpx.Response]:
        """The response that answers ``call``, its body not read yet; each refusal the
        retry policy waits out is waited out and the request sent again."""
        attempt = 1
        while True:
            response = self._http.send(calls.request(self._http, call), stream=True)
            try:
                if calls.answered(call, response):
                    yield response
                    return
                response.read()
                wait = calls.refusal(response, self.retry, attempt)
            finally:
                response.close()
            self._sleep(wait)
            attempt += 1

    def _items(self, page: Callable[[Paged[Item] | None], Call[Paged[Item]]]) -> Iterator[Item]:
        """Every item of a keyset listing: ``page`` makes the call for the page after the
        one it is given (None: the first)."""
        answer: Paged[Item] | None = None
        while True:
            answer = self.send(page(answer))
            yield from answer.items
            if answer.next_after is None:
                return

    # -- operations ----------------------------------------------------------------------

    def health(self) -> Health:
        return self.send(calls.health())

    def readiness(self) -> Readiness:
        """Ready or not (``/readyz`` answers 503 when not: that is an answer here)."""
        return self.send(calls.readiness())

    def metrics(self) -> str:
        """The Prometheus text (the operator's token adds the per-tenant series)."""
        return self.send(calls.metrics())

    def whoami(self) -> CallerOut:
        return self.send(calls.whoami())

    def metrics_history(self) -> HistoryOut:
        """The last hour (at most 360 samples) of this replica's match rate, latency and
        change lag, oldest first: what the console's Health page graphs."""
        return self.send(calls.metrics_history())

    # -- subscriptions -------------------------------------------------------------------

    def create_subscription(self, item: SubscriptionIn) -> SubscriptionOut:
        """The new subscription, or the same one stored before (201 and 200 alike)."""
        return self.send(calls.create_subscription(item))

    def create_subscriptions(
        self, items: Sequence[SubscriptionIn | Mapping[str, JsonValue]]
    ) -> BulkOut:
        """One result per item (``created``, ``exists`` or ``error`` with its code); the
        valid items are stored even when others fail."""
        return self.send(calls.create_subscriptions(items))

    def get_subscription(self, sub_id: int) -> SubscriptionOut:
        return self.send(calls.get_subscription(sub_id))

    def set_expiry(
        self, sub_id: int, expires_at: datetime | None = None, *, ttl: int | None = None
    ) -> SubscriptionOut:
        """Set its expiry to ``ttl`` seconds from now, else to ``expires_at`` (aware),
        else clear it (never expires); ``NotFoundError`` when there is no such
        subscription, ``ConflictError`` (``subscription_expired``) when it has already
        expired."""
        return self.send(calls.set_expiry(sub_id, expires_at, ttl))

    def delete_subscription(self, sub_id: int) -> None:
        """``NotFoundError`` when there is no such subscription (for this tenant)."""
        self.send(calls.delete_subscription(sub_id))

    def list_subscriptions(
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
        return self.send(call)

    def iter_subscriptions(
        self, *, page_size: int = PAGE_SIZE, **filters: Unpack[SubscriptionFilters]
    ) -> Iterator[SubscriptionOut]:
        """Every subscription the filters select, in id order (or ``sort="matches"``: most
        matched first), a page at a time."""
        return self._items(
            lambda previous: calls.next_subscriptions(previous, limit=page_size, **filters)
        )

    def count_subscriptions(self, tenant: str | None = None) -> Counts:
        return self.send(calls.count_subscriptions(tenant))

    def export_subscriptions(self, path: str | os.PathLike[str], tenant: str | None = None) -> int:
        """Write the tenant's subscriptions to ``path`` as Parquet (streamed; a failed
        download leaves no file) and return how many rows it holds."""
        call = calls.export_subscriptions(tenant)
        target = Path(path)
        part = target.with_name(target.name + ".part")
        with self._answer(call) as response:
            try:
                with part.open("wb") as out:
                    for chunk in response.iter_bytes():
                        out.write(chunk)
                part.replace(target)
            finally:
                part.unlink(missing_ok=True)
            return call.read(response)

    def snapshot(self, tenant: str | None = None) -> SnapshotOut:
        return self.send(calls.snapshot(tenant))

    def delete_subscriptions(self, **filters: Unpack[SelectionFilters]) -> Deleted:
        """Delete what the filters select (at least one), at most the service's
        ``TOPICSTORE_MAX_DELETE`` per call, lowest ids first: call again while ``more``."""
        return self.send(calls.delete_subscriptions(**filters))

    def delete_subscriber(self, subscriber: str, tenant: str | None = None) -> Deleted:
        return self.send(calls.delete_subscriber(subscriber, tenant))

    def redundant(
        self, subscriber: str, *, dialect: Dialect = "amqp", tenant: str | None = None
    ) -> RedundantOut:
        return self.send(calls.redundant(subscriber, dialect, tenant))

    # -- matching ------------------------------------------------------------------------

    def match(
        self,
        topic: str,
        *,
        dialect: Dialect = "amqp",
        tenant: str | None = None,
        key: str | None = None,
    ) -> MatchOut:
        return self.send(calls.match(topic, dialect, tenant, key))

    def match_batch(
        self,
        topics: Sequence[str],
        *,
        dialect: Dialect = "amqp",
        tenant: str | None = None,
        keys: Sequence[str] | None = None,
    ) -> BatchOut:
        """One result per topic, in order: its matches, or its error."""
        return self.send(calls.match_batch(topics, dialect, tenant, keys))

    def match_headers(
        self, headers: Mapping[str, str], *, tenant: str | None = None, key: str | None = None
    ) -> MatchOut:
        return self.send(calls.match_headers(headers, tenant, key))

    def explain(
        self,
        topic: str,
        *,
        dialect: Dialect = "amqp",
        tenant: str | None = None,
        subscribers: Sequence[str] = (),
    ) -> ExplainOut:
        return self.send(calls.explain(topic, dialect, tenant, subscribers))

    # -- audit and analytics -------------------------------------------------------------

    def audit_page(
        self, *, after: int | None = None, limit: int = 100, **filters: Unpack[AuditFilters]
    ) -> AuditPage:
        """One page of the audit log; ``iter_audit`` walks them all."""
        return self.send(calls.audit_page(after=after, limit=limit, **filters))

    def iter_audit(
        self, *, page_size: int = PAGE_SIZE, **filters: Unpack[AuditFilters]
    ) -> Iterator[AuditOut]:
        return self._items(
            lambda previous: calls.audit_page(
                after=None if previous is None else previous.next_after,
                limit=page_size,
                **filters,
            )
        )

    def analytics(
        self,
        query: str,
        *,
        limit: int | None = None,
        bucket: AnalyticsBucket = "hour",
        as_of: int | None = None,
    ) -> AnalyticsOut:
        return self.send(calls.analytics(query, limit, bucket, as_of))
