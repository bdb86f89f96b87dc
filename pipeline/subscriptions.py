"""The subscription set a routing job broadcasts: validated on the driver, built into
engines on the executors (``pipeline.executor``).

Rows are checked with the store's own rules (``store.validate``), so the job accepts exactly
what the store would; a row that breaks one is set aside with its reason code, never fatal.
Each valid subscription gets a *position* (0..n-1): engines are built with positions as ids,
so a match indexes the catalog arrays directly, with no id lookup per delivery.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

import pyarrow as pa

from matcher import HeaderLimits, Limits, MatcherError, check_sub_id
from pipeline.codes import DEFAULT_ENGINE, DUPLICATE_ID, MISSING_FIELD
from store import DEFAULT_TENANT, HEADERS_DIALECT, NewSubscription, StoreError, validate
from store.groups import GroupPolicies
from store.records import Criteria, Kind, Mode

#: Columns a subscriptions table must have; ``tenant``, ``dialect``, ``kind``, ``criteria``
#: and ``mode`` are optional (the ``topicstore export`` layout has them all).
REQUIRED_COLUMNS: Final = ("id", "subscriber", "pattern")

#: (position, pattern) per (tenant, dialect); (position, criteria, mode) per tenant.
TopicGroup: TypeAlias = tuple[tuple[int, str], ...]
HeadersGroup: TypeAlias = tuple[tuple[int, Criteria, Mode], ...]


@dataclass(frozen=True, slots=True)
class SubscriptionReject:
    """A subscription row that was left out, and why."""

    subscription_id: int | None
    pattern: str | None
    reason: str
    detail: str
    raw: str


@dataclass(frozen=True, slots=True)
class SubscriptionPlan:
    """Everything an executor needs to build its engines; pickled once into a broadcast.

    ``plan_id`` is fresh per plan, so a reused Python worker builds engines once per job
    and never serves a previous job's subscriptions.
    """

    engine: str
    limits: Limits
    header_limits: HeaderLimits
    ids: tuple[int, ...]
    subscribers: tuple[str, ...]
    tenants: tuple[str, ...]
    topics: Mapping[tuple[str, str], TopicGroup]
    headers: Mapping[str, HeadersGroup]
    #: Shared subscriptions: position -> (tenant, group), for grouped ones only.
    groups: Mapping[int, tuple[str, str]] = field(default_factory=dict)
    plan_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def __len__(self) -> int:
        return len(self.ids)


class _RowError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _text(row: Mapping[str, Any], name: str) -> str:
    value = row.get(name)
    if value is None:
        raise _RowError(MISSING_FIELD, f"subscription has no {name}")
    if not isinstance(value, str):
        raise _RowError(MISSING_FIELD, f"{name} must be text, not {type(value).__name__}")
    return value


def _criteria(raw: Any) -> Criteria | None:
    if raw is None:
        return None
    error = _RowError("invalid_criteria", "criteria must be a JSON list of [field, value or null]")
    try:
        pairs = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError as e:
        raise error from e
    if not isinstance(pairs, list) or not all(
        isinstance(pair, list) and len(pair) == 2 for pair in pairs
    ):
        raise error
    return tuple((str(f), None if v is None else str(v)) for f, v in pairs)


def _or_default(row: Mapping[str, Any], name: str, default: str) -> Any:
    value = row.get(name)
    return default if value is None else value


def _new_subscription(row: Mapping[str, Any]) -> NewSubscription:
    # A missing value (null, or no such column) means the default; an empty one is invalid.
    dialect = _or_default(row, "dialect", "amqp")
    kind_text = _or_default(row, "kind", "headers" if dialect == HEADERS_DIALECT else "topic")
    if kind_text not in ("topic", "headers"):
        raise _RowError("invalid_kind", "kind must be 'topic' or 'headers'")
    kind: Kind = "headers" if kind_text == "headers" else "topic"
    return NewSubscription(
        subscriber=_text(row, "subscriber"),
        pattern=_text(row, "pattern"),
        tenant=_or_default(row, "tenant", DEFAULT_TENANT),
        dialect=dialect,
        kind=kind,
        criteria=_criteria(row.get("criteria")),
        mode=row.get("mode"),
        group=row.get("group"),
        group_policy=row.get("group_policy"),
    )


def _raw(row: Mapping[str, Any]) -> str:
    return json.dumps(row, default=str, ensure_ascii=False, sort_keys=True)


def build_plan(
    table: pa.Table,
    *,
    engine: str = DEFAULT_ENGINE,
    limits: Limits | None = None,
    header_limits: HeaderLimits | None = None,
) -> tuple[SubscriptionPlan, list[SubscriptionReject]]:
    """The valid subscriptions of ``table`` as a plan, and every invalid row with its reason.

    O(rows x pattern length). A repeated id keeps its first row; the others are rejected
    (``duplicate_id``), as the store's primary key would. The first member of a group fixes
    its policy; a member stating another is rejected (``group_policy_conflict``,
    ``store.groups``).
    """
    limits = limits if limits is not None else Limits()
    header_limits = header_limits if header_limits is not None else HeaderLimits()
    ids: list[int] = []
    subscribers: list[str] = []
    tenants: list[str] = []
    topics: dict[tuple[str, str], list[tuple[int, str]]] = defaultdict(list)
    headers: dict[str, list[tuple[int, Criteria, Mode]]] = defaultdict(list)
    rejects: list[SubscriptionReject] = []
    seen: set[int] = set()
    groups: dict[int, tuple[str, str]] = {}
    policies = GroupPolicies()
    for row in table.to_pylist():
        raw_id = row.get("id")
        sub_id = raw_id if type(raw_id) is int else None
        try:
            if raw_id is None:
                raise _RowError(MISSING_FIELD, "subscription has no id")
            check_sub_id(raw_id)
            if raw_id in seen:
                raise _RowError(DUPLICATE_ID, f"subscription id {raw_id} appears more than once")
            new = policies.resolve(validate(_new_subscription(row), limits, header_limits))
        except (_RowError, MatcherError, StoreError) as e:
            pattern = row.get("pattern")
            rejects.append(
                SubscriptionReject(
                    sub_id,
                    pattern if isinstance(pattern, str) else None,
                    e.code,
                    e.message,
                    _raw(row),
                )
            )
            continue
        assert sub_id is not None
        seen.add(sub_id)
        position = len(ids)
        ids.append(sub_id)
        subscribers.append(new.subscriber)
        tenants.append(new.tenant)
        if new.group is not None:
            groups[position] = (new.tenant, new.group)
        if new.kind == "headers":
            assert new.criteria is not None and new.mode is not None
            headers[new.tenant].append((position, new.criteria, new.mode))
        else:
            topics[(new.tenant, new.dialect)].append((position, new.pattern))
    plan = SubscriptionPlan(
        engine=engine,
        limits=limits,
        header_limits=header_limits,
        ids=tuple(ids),
        subscribers=tuple(subscribers),
        tenants=tuple(tenants),
        topics={key: tuple(items) for key, items in topics.items()},
        headers={key: tuple(items) for key, items in headers.items()},
        groups=groups,
    )
    return plan, rejects
