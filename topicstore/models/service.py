"""The service's own answers: snapshots, analytics, health and readiness, the caller,
the audit log and the metrics history."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue


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
