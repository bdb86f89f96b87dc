"""Request and response bodies (the OpenAPI schema is generated from these)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, GetJsonSchemaHandler, JsonValue
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from store import StoredSubscription

Dialect = Literal["amqp", "mqtt", "nats"]


class SubscriptionIn(BaseModel):
    # No NaN or infinities: Python's JSON parser reads NaN, Infinity and 1e400 into floats
    # that no JSON column stores (PostgreSQL refuses them; DuckDB turned them into null).
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    subscriber: str = Field(description="Queue or client that receives the messages.")
    pattern: str = Field("", description="Topic pattern (kind 'topic' only).")
    dialect: Dialect | None = Field(None, description="kind 'topic' only; default amqp.")
    tenant: str | None = Field(None, description="Only the admin token may name a tenant.")
    kind: Literal["topic", "headers"] = "topic"
    criteria: dict[str, str | None] | None = Field(
        None, description="kind 'headers' only: field -> value, or null for 'field is present'."
    )
    mode: Literal["all", "any"] | None = Field(None, description="kind 'headers' only.")
    labels: dict[str, JsonValue] | None = None


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
    created_at: datetime

    @classmethod
    def of(cls, row: StoredSubscription) -> SubscriptionOut:
        """The row as the API shows it (field by field, so a new column is one field here)."""
        values = {name: getattr(row, name) for name in cls.model_fields}
        if row.criteria is not None:
            values["criteria"] = dict(row.criteria)
        return cls(**values)


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


class MatchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    topic: str
    dialect: Dialect = "amqp"
    tenant: str | None = None


class MatchOut(BaseModel):
    subscriptions: list[int]
    subscribers: list[str]


class BatchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    topics: list[str]
    dialect: Dialect = "amqp"
    tenant: str | None = None


class BatchItem(BaseModel):
    subscriptions: list[int] | None = None
    subscribers: list[str] | None = None
    error: ErrorBody | None = None


class BatchOut(BaseModel):
    results: list[BatchItem]


class HeadersMatchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    headers: dict[str, str]
    tenant: str | None = None


class SnapshotEntry(BaseModel):
    id: int
    subscriber: str
    dialect: str
    pattern: str


class SnapshotOut(BaseModel):
    seq: int = Field(description="The change sequence number this listing reflects.")
    subscriptions: list[SnapshotEntry]


class Health(BaseModel):
    status: str


class Readiness(BaseModel):
    ready: bool
    seq: int
    lag: int | None
    subscriptions: int
