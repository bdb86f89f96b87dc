"""The API's request and response bodies: the service's OpenAPI document is generated from
these, and the Python client (``topicstore.client``) reads and sends them. Only pydantic
here: an application imports them without the service, its store or the engines."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, GetJsonSchemaHandler, JsonValue
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from topicstore.times import Time

#: A topic dialect, as the matcher's grammar names them (``matcher.DIALECTS``: a test holds
#: the two equal; the grammar itself stays with the engines).
Dialect = Literal["amqp", "mqtt", "nats"]
#: What a subscription's ``dialect`` holds: a topic dialect, or ``headers``.
StoredDialect = Literal["amqp", "mqtt", "nats", "headers"]
#: How a headers subscription's criteria combine (``store.records.Mode``).
Mode = Literal["all", "any"]
#: The longest TTL, and the furthest expiry: ten years (``store.expiry.MAX_EXPIRY``; a
#: test holds the two equal).
MAX_TTL_SECONDS: Final = 315_619_200
_EXPIRES_AT: Final = (
    "The instant (RFC 3339 with an offset) it stops matching, on every replica; after now "
    "and at most 10 years ahead (422 expiry_in_past, expiry_too_far). A sweep then deletes "
    "it. Not with ttl."
)
_TTL: Final = (
    "Seconds from now until it stops matching (1 to 315,619,200: 10 years); stored as "
    "expires_at. Not with expires_at (422 expiry_conflict)."
)


class SubscriptionIn(BaseModel):
    subscriber: str = Field(description="Queue or client that receives the messages.")
    pattern: str = Field("", description="Topic pattern (kind 'topic' only).")
    dialect: Dialect | None = Field(None, description="kind 'topic' only; default amqp.")
    tenant: str | None = Field(None, description="Only the admin token may name a tenant.")
    kind: Literal["topic", "headers"] = "topic"
    criteria: dict[str, str | None] | None = Field(
        None, description="kind 'headers' only: field -> value, or null for 'field is present'."
    )
    mode: Mode | None = Field(None, description="kind 'headers' only.")
    labels: dict[str, JsonValue] | None = None
    group: str | None = Field(
        None,
        description=(
            "Shared subscription: a match delivers to one member per group. 1-128 UTF-8 bytes, "
            "no '/', '+', '#', whitespace or control characters. An MQTT filter "
            "'$share/{group}/{filter}' sets it too."
        ),
        examples=["billing-workers"],
    )
    group_policy: Literal["random", "round_robin", "hash"] | None = Field(
        None,
        description=(
            "How the group's member is chosen; only with a group. Omitted: the group's "
            "current policy, or 'random' for a new group; another one than the group's is "
            "refused (409 group_policy_conflict)."
        ),
    )
    expires_at: Time | None = Field(None, description=_EXPIRES_AT)
    ttl: int | None = Field(None, ge=1, le=MAX_TTL_SECONDS, description=_TTL)

    # No NaN or infinities: Python's JSON parser reads NaN, Infinity and 1e400 into floats
    # that no JSON column stores (PostgreSQL refuses them; DuckDB turned them into null).
    model_config = ConfigDict(
        extra="forbid",
        allow_inf_nan=False,
        json_schema_extra={
            "examples": [
                {"subscriber": "audit", "pattern": "stock.#"},
                {
                    "subscriber": "worker-1",
                    "pattern": "orders.*.created",
                    "group": "order-workers",
                    "group_policy": "round_robin",
                },
                {
                    "subscriber": "client-7",
                    "pattern": "$share/dash/sensors/+/temp",
                    "dialect": "mqtt",
                },
                {
                    "subscriber": "session-42",
                    "pattern": "sensors/#",
                    "dialect": "mqtt",
                    "ttl": 3600,
                },
            ]
        },
    )


class SubscriptionOut(BaseModel):
    id: int
    tenant: str
    subscriber: str
    pattern: str
    dialect: str
    kind: str
    criteria: dict[str, str | None] | None
    mode: str | None
    labels: dict[str, Any] | None
    group: str | None = None
    group_policy: str | None = None
    created_at: datetime
    expires_at: datetime | None = Field(
        None, description="When it stops matching (null: never); past: awaiting the sweep."
    )


class ExpiryIn(BaseModel):
    """``PATCH /v1/subscriptions/{id}``: its new expiry, as an instant or a TTL from now;
    ``{"expires_at": null}`` clears it (it never expires then)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "minProperties": 1,
            "examples": [
                {"ttl": 3600},
                {"expires_at": "2027-01-01T00:00:00Z"},
                {"expires_at": None},
            ],
        },
    )

    expires_at: Time | None = Field(None, description=_EXPIRES_AT)
    ttl: int | None = Field(None, ge=1, le=MAX_TTL_SECONDS, description=_TTL)


class _DocumentedAsSubscriptionIn:
    """The OpenAPI schema of a bulk item is ``SubscriptionIn``, though the route takes any
    JSON value there: an item that does not fit gets its own error in the 207, instead of
    failing the whole batch with a 422 (``AdminOperations.create_many`` validates each)."""

    @classmethod
    def __get_pydantic_json_schema__(
        cls, _: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return handler(SubscriptionIn.__pydantic_core_schema__)


class BulkIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[Annotated[JsonValue, _DocumentedAsSubscriptionIn]] = Field(
        description="Each a SubscriptionIn; one that is not gets its own error result."
    )


class ErrorBody(BaseModel):
    code: str
    message: str


class Problem(BaseModel):
    loc: list[str]
    msg: str


class ErrorInfo(ErrorBody):
    details: list[Problem] | None = Field(None, description="invalid_request: every problem.")
    retry_after: int | None = Field(
        None, description="rate_limited, store_unavailable: seconds to wait (as Retry-After)."
    )


class ErrorOut(BaseModel):
    """Every refusal: ``code`` names the rule (``nul_byte``, ``topic_too_long``, ...)."""

    error: ErrorInfo


class BulkItem(BaseModel):
    index: int
    status: Literal["created", "exists", "error"]
    id: int | None = None
    error: ErrorBody | None = None


class BulkOut(BaseModel):
    created: int
    exists: int
    failed: int
    results: list[BulkItem]


class Page(BaseModel):
    items: list[SubscriptionOut]
    next_after: int | None = Field(description="Pass as ?after= for the next page; null: done.")


class Counts(BaseModel):
    tenant: str
    total: int
    by_dialect: dict[str, int]


class Deleted(BaseModel):
    deleted: list[int]


_KEY_DESCRIPTION: Final = (
    "Key of the 'hash' policy (a message id, a client id; at most 1,024 UTF-8 bytes): the "
    "same key reaches the same member of a group while that member stays. Default: the topic."
)


class MatchIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"topic": "stock.nasdaq.msft"},
                {"topic": "orders.eu.created", "key": "order-1234"},
            ]
        },
    )

    topic: str
    dialect: Dialect = "amqp"
    tenant: str | None = None
    key: str | None = Field(None, description=_KEY_DESCRIPTION)


class GroupChoice(BaseModel):
    """The member one group delivers to, for one topic."""

    group: str
    policy: str
    subscription: int = Field(description="The chosen member (also in 'subscriptions').")
    subscriber: str
    candidates: int = Field(description="How many members of the group matched.")


class MatchOut(BaseModel):
    """The delivered set: every ungrouped match plus one member per group; ``groups`` says
    which member each group chose (empty when no group matched)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "subscriptions": [3, 12],
                    "subscribers": ["audit", "worker-2"],
                    "groups": [
                        {
                            "group": "order-workers",
                            "policy": "round_robin",
                            "subscription": 12,
                            "subscriber": "worker-2",
                            "candidates": 3,
                        }
                    ],
                }
            ]
        }
    )

    subscriptions: list[int]
    subscribers: list[str]
    groups: list[GroupChoice] = Field(default_factory=list)


class BatchIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"topics": ["stock.nasdaq.msft", "orders.eu.created"]},
                {"topics": ["orders.eu.created"], "keys": ["order-1234"]},
            ]
        },
    )

    topics: list[str]
    dialect: Dialect = "amqp"
    tenant: str | None = None
    keys: list[str] | None = Field(
        None,
        description="One 'hash' key per topic, as many as topics (else 422 keys_mismatch; see "
        "POST /v1/match); default: the topics.",
    )


class BatchItem(BaseModel):
    subscriptions: list[int] | None = None
    subscribers: list[str] | None = None
    groups: list[GroupChoice] | None = None
    error: ErrorBody | None = None


class BatchOut(BaseModel):
    results: list[BatchItem]


class HeadersMatchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    headers: dict[str, str]
    tenant: str | None = None
    key: str | None = Field(
        None, description="Key of the 'hash' policy; default: the headers as sorted JSON."
    )


class CaptureOut(BaseModel):
    token: int = Field(description="Index of the wildcard among the pattern's words.")
    wildcard: str = Field(description="The wildcard as written: *, #, + or >.")
    start: int = Field(description="Index of the first topic word it took.")
    words: list[str] = Field(description="The topic words it took (may be none for #).")


class FailureOut(BaseModel):
    position: int = Field(
        description="Index of the first topic word no prefix of the pattern gets past (the "
        "number of words when the topic ended too soon)."
    )
    reason: Literal["mismatch", "too_long", "too_short", "system_topic"]
    expected: list[str] = Field(description="Literal words the pattern could take there.")


class ExplainedMatch(BaseModel):
    id: int
    subscriber: str
    pattern: str
    captures: list[CaptureOut]


class Closest(BaseModel):
    id: int
    pattern: str
    failure: FailureOut


class Unmatched(BaseModel):
    subscriber: str
    patterns: int = Field(description="Its subscriptions in this dialect.")
    closest: Closest | None = Field(
        description="The pattern that gets furthest into the topic (most words matched; then "
        "the lowest id); null when it has no subscription in this dialect."
    )


class ExplainOut(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "example": {
                "words": ["stock", "nasdaq", "msft"],
                "matched_total": 1,
                "truncated": False,
                "matched": [
                    {
                        "id": 7,
                        "subscriber": "q1",
                        "pattern": "stock.*.msft",
                        "captures": [
                            {"token": 1, "wildcard": "*", "start": 1, "words": ["nasdaq"]}
                        ],
                    }
                ],
                "unmatched": [
                    {
                        "subscriber": "q2",
                        "patterns": 1,
                        "closest": {
                            "id": 8,
                            "pattern": "stock.nyse.#",
                            "failure": {"position": 1, "reason": "mismatch", "expected": ["nyse"]},
                        },
                    }
                ],
            }
        }
    )

    words: list[str] = Field(description="The topic's words, as the dialect splits it.")
    matched_total: int
    truncated: bool = Field(description="True when only the first (lowest-id) were explained.")
    matched: list[ExplainedMatch]
    unmatched: list[Unmatched] = Field(
        description="Subscribers named in the query that did not match."
    )


class RedundantItem(BaseModel):
    id: int
    pattern: str
    covered_by: int = Field(description="A subscription of the same subscriber covering it.")
    covered_by_pattern: str


class RedundantOut(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "example": {
                "tenant": "default",
                "subscriber": "q1",
                "dialect": "amqp",
                "patterns": 3,
                "redundant": [
                    {"id": 12, "pattern": "a.b", "covered_by": 11, "covered_by_pattern": "a.#"}
                ],
            }
        }
    )

    tenant: str
    subscriber: str
    dialect: str
    patterns: int = Field(description="The subscriber's subscriptions in this dialect.")
    redundant: list[RedundantItem]


class SnapshotEntry(BaseModel):
    id: int
    subscriber: str
    dialect: str
    pattern: str


class SnapshotOut(BaseModel):
    seq: int = Field(description="The change sequence number this listing reflects.")
    subscriptions: list[SnapshotEntry]


#: How ``GET /v1/analytics/timeline`` buckets time (``pipeline.analytics.BUCKETS``).
AnalyticsBucket = Literal["minute", "hour", "day"]


class AnalyticsOut(BaseModel):
    """``GET /v1/analytics/{query}``: the query's columns and its rows, one object each."""

    query: str
    columns: list[str]
    rows: list[dict[str, Any]]


class Health(BaseModel):
    status: str
    worker: int = Field(description="Process id of the worker that answered.")


class Readiness(BaseModel):
    """``/readyz``: ready when built, listening and caught up within the bound
    (``TOPICSTORE_READY_MAX_LAG_SECONDS``); ``reason`` names what is missing."""

    ready: bool
    seq: int = Field(description="The newest change applied here.")
    lag: int | None = Field(
        None, description="Committed changes not applied yet (absent or null: unknown)."
    )
    lag_seconds: float | None = Field(
        None, description="Age of the oldest change not applied yet (0 when none)."
    )
    reason: Literal["building", "store_unavailable", "listener_stalled", "behind"] | None = None
    subscriptions: int = Field(description="Subscriptions in the routing table, all tenants.")
    tenants: dict[str, int] | None = Field(
        None, description="Subscriptions per tenant: only with the operator's token."
    )


class CallerOut(BaseModel):
    """``GET /v1/whoami``: the operator (``tenant`` null: may name any tenant) or a tenant."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"role": "tenant", "tenant": "acme"}]}
    )

    role: Literal["operator", "tenant"]
    tenant: str | None = Field(description="The token's tenant; null for the operator.")


#: ``expire``: expired subscriptions deleted (by the sweep, or replaced by a create of
#: their key); ``update``: an expiry set or cleared.
AuditAction = Literal["create", "delete", "bulk_create", "delete_subscriber", "expire", "update"]
#: The audit listing's order: by id, oldest first or newest first.
AuditOrder = Literal["asc", "desc"]

_AUDIT_EXAMPLE: dict[str, JsonValue] = {
    "id": 41,
    "created_at": "2026-11-24T01:02:03.456789Z",
    "tenant": "acme",
    "action": "bulk_create",
    "ids": [1007, 1008, 1009],
    "caller_tenant": "acme",
    "caller_name": "acme:5f1c9a2e",
    "request_id": "7d0c5e9a8b4f4c1e9a3b2d6f0e1a2b3c",
    "address": "203.0.113.7",
}


class AuditOut(BaseModel):
    """One admin change. ``caller_tenant`` null is the operator; ``caller_name`` names the
    token (``operator``, ``<tenant>:<first 8 hex digits of its SHA-256>``, or
    ``cli:<user>`` for the command line on the store itself), never the token."""

    model_config = ConfigDict(json_schema_extra={"examples": [_AUDIT_EXAMPLE]})

    id: int
    created_at: datetime
    tenant: str = Field(description="The tenant whose subscriptions changed.")
    action: AuditAction
    ids: list[int] = Field(description="The subscriptions created or deleted.")
    caller_tenant: str | None
    caller_name: str
    request_id: str = Field(
        description="X-Request-ID of the request (the command line on the store: one per command)."
    )
    address: str = Field(description="The client's address (``local``: not over HTTP).")


class AuditPage(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"items": [_AUDIT_EXAMPLE], "next_after": None}]}
    )

    items: list[AuditOut]
    next_after: int | None = Field(description="Pass as ?after= for the next page; null: done.")


class HistorySample(BaseModel):
    """One sampling interval of a process's metrics, ending at ``at`` (UTC). Latencies: as
    Prometheus' histogram_quantile estimates them (null: no match); ``lag``: changes not yet
    applied (null: the table was building)."""

    at: datetime
    seconds: float = Field(description="The interval's length.")
    matches: int = Field(description="Match requests answered (/v1/match and under it).")
    rate: float = Field(description="Match requests per second.")
    mean_ms: float | None
    p50_ms: float | None
    p99_ms: float | None
    lag: int | None


class HistoryOut(BaseModel):
    """``GET /v1/metrics/history``: the last samples, oldest first, at most ``points``."""

    interval_seconds: float = Field(description="Seconds between samples.")
    points: int = Field(description="The most samples kept: the answer's bound.")
    samples: list[HistorySample]
