"""Subscriptions as the admin API takes and gives them, bulk writes, pages and the
error envelope every refusal carries."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Final, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    JsonValue,
)
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


def _json_integer(value: object) -> object:
    """Refuse what lax validation would read as an integer though JSON Schema's
    ``integer`` is not: ``true`` (as 1) and text ("60"). A number with no fraction
    (``60.0``) is one."""
    if isinstance(value, bool | str):
        raise ValueError("must be an integer")
    return value


#: Seconds from now, as the schema's integer (``_json_integer``).
Ttl = Annotated[int, Field(ge=1, le=MAX_TTL_SECONDS), BeforeValidator(_json_integer)]


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
    ttl: Ttl | None = Field(None, description=_TTL)

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

    matches: int = Field(
        0,
        description="Deliveries to it (a match answer naming it; in a group, when it is the "
        "member chosen), summed over every replica as of their last flush: up to "
        "TOPICSTORE_STATS_FLUSH_INTERVAL seconds behind.",
    )
    last_matched_at: datetime | None = Field(
        None, description="When the last counted delivery was (to the second); null: never."
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
    ttl: Ttl | None = Field(None, description=_TTL)


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


#: The order of a subscription listing: by id, or most matched first (ties by id).
SubscriptionOrder = Literal["id", "matches"]


class Page(BaseModel):
    items: list[SubscriptionOut]
    next_after: int | None = Field(description="Pass as ?after= for the next page; null: done.")
    next_after_matches: int | None = Field(
        None,
        description="With sort=matches: pass as ?after_matches= beside ?after= for the next "
        "page (null otherwise).",
    )


class Counts(BaseModel):
    tenant: str
    total: int
    by_dialect: dict[str, int]


class Deleted(BaseModel):
    """What a removal deleted."""

    deleted: list[int] = Field(description="The ids removed, ascending.")
    more: bool = Field(
        False,
        description="The selection holds more than one request removes "
        "(`TOPICSTORE_MAX_DELETE`): send the same request again.",
    )
