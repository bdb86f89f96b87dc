"""Every operation of the API as a ``Call``: the request (method, path, query, JSON body)
and how its answer is read into the API's own model. Built here once, sent by either
client (``Client.send``, ``AsyncClient.send``), so the blocking and the async client
cannot differ in what they ask or how they read it.

A call's body is encoded when the call is built: a caller may build the next call while
the one before is in flight (the command line's ``sub import`` does)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Generic, Protocol, TypedDict, TypeVar, Unpack
from urllib.parse import quote

import httpx
from pydantic import BaseModel, JsonValue

from topicstore.client.errors import error_for
from topicstore.client.retry import Retry, retry_after
from topicstore.models import (
    AnalyticsBucket,
    AnalyticsOut,
    AuditAction,
    AuditOrder,
    AuditPage,
    BatchIn,
    BatchOut,
    BulkOut,
    CallerOut,
    Counts,
    Deleted,
    Dialect,
    ExplainOut,
    HeadersMatchIn,
    Health,
    HistoryOut,
    MatchIn,
    MatchOut,
    Page,
    Readiness,
    RedundantOut,
    SnapshotOut,
    StoredDialect,
    SubscriptionIn,
    SubscriptionOrder,
    SubscriptionOut,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
M = TypeVar("M", bound=BaseModel)
Item_co = TypeVar("Item_co", covariant=True)

#: A query: (name, value) pairs, a name repeated for each value of a list.
Query = tuple[tuple[str, str], ...]
#: What a query parameter may be given as (None: left out).
QueryValue = str | int | datetime | Sequence[str] | None
#: The size of a page the paging iterators ask for (the API's most).
PAGE_SIZE: Final = 1000


@dataclass(frozen=True, slots=True)
class Call(Generic[T_co]):
    """One request and how its answer is read. ``answers``: statuses of 400 and more that
    are an answer, not a refusal (``/readyz`` answers 503 with its usual body)."""

    method: str
    path: str
    read: Callable[[httpx.Response], T_co]
    query: Query = ()
    body: bytes | None = None
    answers: frozenset[int] = field(default_factory=frozenset)


class Paged(Protocol[Item_co]):
    """A page of a keyset listing: pass ``next_after`` back as ``after``; None: done."""

    @property
    def items(self) -> Sequence[Item_co]: ...
    @property
    def next_after(self) -> int | None: ...


class SelectionFilters(TypedDict, total=False):
    """What ``DELETE /v1/subscriptions`` selects by (each None: no filter); the listing
    takes them too, with the same meaning."""

    tenant: str | None
    subscriber: str | None
    pattern_prefix: str | None
    dialect: StoredDialect | None
    group: str | None
    label: str | None


class SubscriptionFilters(SelectionFilters, total=False):
    """What ``GET /v1/subscriptions`` filters on (each None: no filter)."""

    overlaps: str | None
    covered_by: str | None
    sort: SubscriptionOrder | None
    unmatched_since: datetime | None


class AuditFilters(TypedDict, total=False):
    """What ``GET /v1/audit`` filters on, and its order (``since``: the query's ``from``,
    ``until``: its ``to``)."""

    tenant: str | None
    action: AuditAction | None
    since: datetime | None
    until: datetime | None
    order: AuditOrder


def _model(model: type[M]) -> Callable[[httpx.Response], M]:
    def read(response: httpx.Response) -> M:
        return model.model_validate_json(response.content)

    return read


def _nothing(_: httpx.Response) -> None:
    return None


def _text(response: httpx.Response) -> str:
    return response.text


def _rows(response: httpx.Response) -> int:
    return int(response.headers.get("x-row-count", "0"))


def _json(model: BaseModel) -> bytes:
    """The model as the API reads it: fields left at their defaults are left out."""
    return model.model_dump_json(exclude_defaults=True).encode()


def _query(**values: QueryValue) -> Query:
    """Query pairs of the values that are not None (a sequence: one pair per item)."""
    pairs: list[tuple[str, str]] = []
    for name, value in values.items():
        if value is None:
            continue
        if isinstance(value, datetime):
            pairs.append((name, value.isoformat()))
        elif isinstance(value, str | int):
            pairs.append((name, str(value)))
        else:
            pairs.extend((name, item) for item in value)
    return tuple(pairs)


def _segment(name: str) -> str:
    """A name as one path segment: ``/`` and every other reserved character escaped."""
    return quote(name, safe="")


# -- operations --------------------------------------------------------------------------


def health() -> Call[Health]:
    return Call("GET", "/healthz", _model(Health))


def readiness() -> Call[Readiness]:
    return Call("GET", "/readyz", _model(Readiness), answers=frozenset({503}))


def metrics() -> Call[str]:
    return Call("GET", "/metrics", _text)


def whoami() -> Call[CallerOut]:
    return Call("GET", "/v1/whoami", _model(CallerOut))


def metrics_history() -> Call[HistoryOut]:
    return Call("GET", "/v1/metrics/history", _model(HistoryOut))


# -- subscriptions -----------------------------------------------------------------------


def create_subscription(item: SubscriptionIn) -> Call[SubscriptionOut]:
    return Call("POST", "/v1/subscriptions", _model(SubscriptionOut), body=_json(item))


def create_subscriptions(
    items: Sequence[SubscriptionIn | Mapping[str, JsonValue]],
) -> Call[BulkOut]:
    """A mapping item is sent as it is: the service checks each item and answers for each
    (an invalid one gets its error result, the others are stored)."""
    encoded = [
        item.model_dump(mode="json", exclude_defaults=True)
        if isinstance(item, BaseModel)
        else item
        if isinstance(item, dict)
        else dict(item)
        for item in items
    ]
    body = json.dumps({"items": encoded}, separators=(",", ":")).encode()
    return Call("POST", "/v1/subscriptions/bulk", _model(BulkOut), body=body)


def get_subscription(sub_id: int) -> Call[SubscriptionOut]:
    return Call("GET", f"/v1/subscriptions/{sub_id}", _model(SubscriptionOut))


def set_expiry(
    sub_id: int, expires_at: datetime | None = None, ttl: int | None = None
) -> Call[SubscriptionOut]:
    """``ttl`` seconds from now, else ``expires_at`` (an aware instant), else never."""
    body: dict[str, JsonValue] = (
        {"ttl": ttl}
        if ttl is not None
        else {"expires_at": None if expires_at is None else expires_at.isoformat()}
    )
    encoded = json.dumps(body, separators=(",", ":")).encode()
    return Call("PATCH", f"/v1/subscriptions/{sub_id}", _model(SubscriptionOut), body=encoded)


def delete_subscription(sub_id: int) -> Call[None]:
    return Call("DELETE", f"/v1/subscriptions/{sub_id}", _nothing)


def list_subscriptions(
    *,
    after: int | None = None,
    after_matches: int | None = None,
    limit: int = 100,
    **filters: Unpack[SubscriptionFilters],
) -> Call[Page]:
    """A page of subscriptions; with ``sort="matches"`` the cursor is ``after`` and
    ``after_matches`` together (a page's ``next_after`` and ``next_after_matches``)."""
    query = _query(**filters, after=after, after_matches=after_matches, limit=limit)
    return Call("GET", "/v1/subscriptions", _model(Page), query=query)


def next_subscriptions(
    previous: Paged[SubscriptionOut] | None, *, limit: int, **filters: Unpack[SubscriptionFilters]
) -> Call[Page]:
    """The listing's page after ``previous`` (the first when None), its cursor passed
    back (both parts with ``sort="matches"``)."""
    if previous is None:
        return list_subscriptions(limit=limit, **filters)
    after_matches = previous.next_after_matches if isinstance(previous, Page) else None
    return list_subscriptions(
        after=previous.next_after, after_matches=after_matches, limit=limit, **filters
    )


def count_subscriptions(tenant: str | None = None) -> Call[Counts]:
    return Call("GET", "/v1/subscriptions-count", _model(Counts), query=_query(tenant=tenant))


def export_subscriptions(tenant: str | None = None) -> Call[int]:
    """The answer is Parquet, written to a file by the client; this reads its row count."""
    return Call("GET", "/v1/subscriptions-export", _rows, query=_query(tenant=tenant))


def snapshot(tenant: str | None = None) -> Call[SnapshotOut]:
    return Call("GET", "/v1/snapshot", _model(SnapshotOut), query=_query(tenant=tenant))


def delete_subscriptions(**filters: Unpack[SelectionFilters]) -> Call[Deleted]:
    """One removal of what the filters select (at least one), at most the service's
    ``TOPICSTORE_MAX_DELETE`` rows: ``more`` says whether to send it again."""
    return Call("DELETE", "/v1/subscriptions", _model(Deleted), query=_query(**filters))


def delete_subscriber(subscriber: str, tenant: str | None = None) -> Call[Deleted]:
    path = f"/v1/subscribers/{_segment(subscriber)}/subscriptions"
    return Call("DELETE", path, _model(Deleted), query=_query(tenant=tenant))


def redundant(
    subscriber: str, dialect: Dialect = "amqp", tenant: str | None = None
) -> Call[RedundantOut]:
    path = f"/v1/subscribers/{_segment(subscriber)}/redundant"
    query = _query(dialect=dialect, tenant=tenant)
    return Call("GET", path, _model(RedundantOut), query=query)


# -- matching ----------------------------------------------------------------------------


def match(
    topic: str, dialect: Dialect = "amqp", tenant: str | None = None, key: str | None = None
) -> Call[MatchOut]:
    body = _json(MatchIn(topic=topic, dialect=dialect, tenant=tenant, key=key))
    return Call("POST", "/v1/match", _model(MatchOut), body=body)


def match_batch(
    topics: Sequence[str],
    dialect: Dialect = "amqp",
    tenant: str | None = None,
    keys: Sequence[str] | None = None,
) -> Call[BatchOut]:
    batch = BatchIn(
        topics=list(topics),
        dialect=dialect,
        tenant=tenant,
        keys=None if keys is None else list(keys),
    )
    return Call("POST", "/v1/match/batch", _model(BatchOut), body=_json(batch))


def match_headers(
    headers: Mapping[str, str], tenant: str | None = None, key: str | None = None
) -> Call[MatchOut]:
    body = _json(HeadersMatchIn(headers=dict(headers), tenant=tenant, key=key))
    return Call("POST", "/v1/match/headers", _model(MatchOut), body=body)


def explain(
    topic: str,
    dialect: Dialect = "amqp",
    tenant: str | None = None,
    subscribers: Sequence[str] = (),
) -> Call[ExplainOut]:
    query = _query(topic=topic, dialect=dialect, tenant=tenant, subscriber=list(subscribers))
    return Call("GET", "/v1/match/explain", _model(ExplainOut), query=query)


# -- audit and analytics -----------------------------------------------------------------


def audit_page(
    *, after: int | None = None, limit: int = 100, **filters: Unpack[AuditFilters]
) -> Call[AuditPage]:
    query = _query(
        tenant=filters.get("tenant"),
        action=filters.get("action"),
        after=after,
        limit=limit,
        order=filters.get("order"),
        # ``from`` is a Python keyword: the filters say ``since`` and ``until``.
        **{"from": filters.get("since"), "to": filters.get("until")},
    )
    return Call("GET", "/v1/audit", _model(AuditPage), query=query)


def analytics(
    query: str,
    limit: int | None = None,
    bucket: AnalyticsBucket = "hour",
    as_of: int | None = None,
) -> Call[AnalyticsOut]:
    path = f"/v1/analytics/{_segment(query)}"
    return Call(
        "GET", path, _model(AnalyticsOut), query=_query(limit=limit, bucket=bucket, as_of=as_of)
    )


# -- sending -----------------------------------------------------------------------------

_JSON_BODY: Final = {"Content-Type": "application/json"}


def request(http: httpx.Client | httpx.AsyncClient, call: Call[Any]) -> httpx.Request:
    """The HTTP request of ``call`` on ``http`` (its base URL and headers)."""
    headers = _JSON_BODY if call.body is not None else None
    return http.build_request(
        call.method, call.path, params=call.query or None, content=call.body, headers=headers
    )


def answered(call: Call[Any], response: httpx.Response) -> bool:
    """Whether ``response`` answers ``call`` (else it is a refusal: ``refusal``)."""
    return response.status_code < 400 or response.status_code in call.answers


def refusal(response: httpx.Response, retry: Retry, attempt: int) -> float:
    """The seconds to wait before sending again the request ``response`` refused at its
    ``attempt``-th sending; raises the refusal (``ApiError``) when ``retry`` says not to.
    The response's body must have been read."""
    status = response.status_code
    asked = retry_after(response.headers.get("retry-after"))
    wait = retry.wait(status, asked, attempt)
    if wait is None:
        raise error_for(status, response.content, response.headers, asked)
    sent = response.request
    log.info("%s %s refused with %s: sent again in %g s", sent.method, sent.url.path, status, wait)
    return wait


def headers(token: str | None, extra: Mapping[str, str] | None) -> dict[str, str]:
    """A client's headers: the bearer token, and the caller's own."""
    values = dict(extra or {})
    if token is not None:
        values["Authorization"] = f"Bearer {token}"
    return values
