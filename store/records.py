"""Plain records that cross the store's boundary, and the validation of new subscriptions.

Validation uses the matcher's own grammar, so the store never accepts a pattern the
matchers would refuse (the write order is: store first, then matcher).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Final, Literal, TypeAlias, get_args

from matcher import HeaderLimits, HeadersMatcher, Limits, MatcherError, checked_text, get_dialect
from matcher.grammar import unseen_character
from matcher.groups import Policy, check_group, check_policy, split_shared
from store.defaults import DEFAULT_TENANT
from store.errors import InvalidSubscriptionError

Kind: TypeAlias = Literal["topic", "headers"]
Op: TypeAlias = Literal["add", "remove"]
#: How a headers subscription combines its criteria.
Mode: TypeAlias = Literal["all", "any"]
MODES: Final[tuple[Mode, ...]] = get_args(Mode)
#: Headers criteria: sorted (field, value) pairs, value None for "field present".
Criteria: TypeAlias = tuple[tuple[str, str | None], ...]
#: The dialect value stored for content-based (headers) subscriptions.
HEADERS_DIALECT: Final = "headers"
DEFAULT_DIALECT: Final = "amqp"
MAX_NAME_BYTES: Final = 255
MAX_LABELS_BYTES: Final = 4096


@dataclass(frozen=True, slots=True)
class NewSubscription:
    """A subscription to create. ``pattern`` for topic kinds; ``criteria`` and ``mode`` for
    ``kind='headers'`` (its pattern is derived from them).

    Its own declaration, not an extension of ``SubscriptionFields``: a dataclass puts a
    base's fields first, and this constructor takes the subscriber and the pattern first,
    everything else defaulted (``NewSubscription("q", "a.*")``). ``test_records`` checks it
    holds the same fields with the same types, plus ``labels``."""

    subscriber: str
    pattern: str = ""
    tenant: str = DEFAULT_TENANT
    dialect: str = DEFAULT_DIALECT
    kind: Kind = "topic"
    criteria: Criteria | None = None
    mode: Mode | None = None
    labels: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    #: Shared subscriptions: the group (MQTT ``$share/{group}/...`` lands here too) and its
    #: policy (None: the group's current one, or the default; see ``store.groups``).
    group: str | None = None
    group_policy: Policy | None = None
    #: The instant it stops matching (aware, UTC; ``store.expiry``); None: never.
    expires_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class SubscriptionFields:
    """What a stored subscription and each of its change_log rows say about it: the fields
    a matcher, a group and a listing read."""

    tenant: str
    subscriber: str
    pattern: str
    dialect: str
    kind: Kind
    criteria: Criteria | None
    mode: Mode | None
    group: str | None = None
    group_policy: Policy | None = None
    expires_at: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredSubscription(SubscriptionFields):
    """A subscription as the store holds it (built from a row by name, so its own fields
    are keyword-only: they follow the base's defaulted ones)."""

    id: int
    labels: dict[str, Any] | None
    created_at: datetime
    #: Deliveries counted by the serving processes, as of their last flush
    #: (``store.stats``), and the last one's time (None: never matched).
    matches: int = 0
    last_matched_at: datetime | None = None


@dataclass(frozen=True)
class _ChangeHead:
    """``Change``'s leading fields. Not slotted itself (two slotted bases cannot share an
    instance layout): ``Change`` holds the slots."""

    __slots__ = ()
    seq: int
    op: Op
    subscription_id: int


@dataclass(frozen=True, slots=True)
class Change(SubscriptionFields, _ChangeHead):
    """One change_log row: everything a loader needs to apply it. Fields in the order a
    dataclass collects them, the last base's first: ``seq, op, subscription_id``, then the
    subscription's (``Change(seq, op, id, tenant, subscriber, pattern, ...)``)."""


@dataclass(frozen=True, slots=True)
class Removals:
    """Consecutive ``remove`` changes of the log, as columns: ``seqs[k]`` removed
    ``ids[k]``, seqs ascending. What a loader needs of a remove is its id (it knows the rest
    from its own catalog), so a mass removal's 100,000 changes are read as two lists of
    ints, not 100,000 ``Change`` objects (``RoutingReads.changes_in``)."""

    seqs: list[int]
    ids: list[int]

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, part: slice) -> Removals:
        return Removals(self.seqs[part], self.ids[part])


def _criterion_order(criterion: tuple[str, str | None]) -> tuple[str, bool, str]:
    field, value = criterion
    return (field, value is not None, value or "")


def criteria_tuple(raw: Any) -> Criteria | None:
    """Criteria as stored (JSON list of pairs) back to a sorted tuple of pairs."""
    if raw is None:
        return None
    return tuple(
        sorted(((str(f), None if v is None else str(v)) for f, v in raw), key=_criterion_order)
    )


def headers_pattern(criteria: Criteria, mode: str) -> str:
    """Canonical text of headers criteria: equal criteria give equal text, so the unique
    constraint on (tenant, subscriber, dialect, pattern) covers headers subscriptions."""
    return json.dumps({"mode": mode, "criteria": [list(c) for c in criteria]}, sort_keys=True)


def headers_from_pattern(text: str) -> tuple[Criteria, str]:
    """Criteria and mode back from ``headers_pattern``'s text (a loader rebuilding headers
    subscriptions from the pattern column alone)."""
    raw = json.loads(text)
    criteria = criteria_tuple(raw["criteria"])
    assert criteria is not None
    return criteria, str(raw["mode"])


#: The characters refused in names and patterns: NUL and the C0 controls other than tab,
#: as the body of a regular expression class that both ``re`` and JSON Schema (ECMA-262)
#: read, so ``app.contract`` states the rule this module enforces. NUL is refused before
#: this rule runs (``checked_text``: ``nul_byte``), so here it only completes the range.
CONTROL_CHARACTERS: Final = "\\u0000-\\u0008\\u000a-\\u001f"
_CONTROLS: Final = re.compile(f"[{CONTROL_CHARACTERS}]")


def _no_controls(text: str, what: str) -> None:
    """Refuse C0 control characters other than tab in names and patterns: a newline in a
    subscriber splits the command line's one-per-line output and an import's lines, an
    escape sequence rewrites the terminal. One rule for the API, the command line and the
    import (every path validates here)."""
    found = _CONTROLS.search(text)
    if found is not None:
        raise InvalidSubscriptionError(
            "control_character",
            f"{what} contains the control character U+{ord(found.group()):04X} "
            "(only tab is allowed)",
        )


def _name(value: object, what: str) -> str:
    try:
        text = checked_text(value, what, MAX_NAME_BYTES)
    except MatcherError as e:
        raise InvalidSubscriptionError(e.code, e.message.replace("pattern", what)) from e
    if not text:
        raise InvalidSubscriptionError(f"empty_{what}", f"{what} must not be empty")
    _no_controls(text, what)
    return text


def _seen(text: str, what: str) -> str:
    """Refuse whitespace and format characters in a subscriber name, as in a group name
    (``matcher.grammar.unseen_character``, the one rule both follow): a right-to-left
    override shows ``\u202egnp.exe`` as "exe.png", a no-break space ``w\u00a01`` as
    ``w 1``. Rows stored before the rule keep working: only new names are checked."""
    unseen = unseen_character(text)
    if unseen is not None:
        code, found = unseen
        raise InvalidSubscriptionError(code, f"{what} may not contain {found}")
    return text


MAX_LABELS_DEPTH: Final = 8


def _check_label_text(value: object, depth: int) -> None:
    """Labels are stored as JSON: every string in them (keys too) must be valid Unicode
    without NUL (PostgreSQL's JSONB refuses ``\\u0000``), every number finite, nested at
    most 8 deep."""
    if depth > MAX_LABELS_DEPTH:
        raise InvalidSubscriptionError(
            "labels_too_deep", f"labels nest at most {MAX_LABELS_DEPTH} levels"
        )
    if isinstance(value, str):
        try:
            checked_text(value, "label", MAX_LABELS_BYTES)
        except MatcherError as e:
            raise InvalidSubscriptionError(e.code, e.message) from e
    elif isinstance(value, float) and not math.isfinite(value):
        # JSON has no NaN or infinity (1e400 parses as inf): PostgreSQL refuses them.
        raise InvalidSubscriptionError("invalid_number", "labels may only hold finite numbers")
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_label_text(key, depth + 1)
            _check_label_text(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_label_text(item, depth + 1)


def _grouped(new: NewSubscription) -> NewSubscription:
    """``new`` with its group checked, an MQTT ``$share/{group}/{filter}`` split into group
    and filter (the stored pattern is the filter), and a policy only where there is a
    group. ``InvalidGroupError`` (a ``MatcherError``) names the broken rule."""
    group = None if new.group is None else check_group(new.group)
    pattern = new.pattern
    if new.kind == "topic" and new.dialect == "mqtt" and isinstance(pattern, str):
        shared = split_shared(pattern)
        if shared is not None:
            if group is not None and group != shared[0]:
                raise InvalidSubscriptionError(
                    "group_mismatch",
                    f"the filter names group {shared[0]!r} and the group field {group!r}",
                )
            group, pattern = shared
    policy = None if new.group_policy is None else check_policy(new.group_policy)
    if policy is not None and group is None:
        raise InvalidSubscriptionError(
            "policy_without_group", "group_policy applies only to a subscription with a group"
        )
    return replace(new, group=group, group_policy=policy, pattern=pattern)


def validate(
    new: NewSubscription,
    limits: Limits | None = None,
    header_limits: HeaderLimits | None = None,
) -> NewSubscription:
    """``new`` with normalized fields, or ``InvalidSubscriptionError`` / a ``MatcherError``
    (both carry a machine-readable ``code``) naming the broken rule."""
    tenant = _name(new.tenant, "tenant")
    subscriber = _seen(_name(new.subscriber, "subscriber"), "subscriber")
    new = _grouped(new)
    if new.labels is not None:
        if not isinstance(new.labels, dict):
            raise InvalidSubscriptionError("invalid_labels", "labels must be a JSON object")
        _check_label_text(new.labels, 0)
        size = len(json.dumps(new.labels, ensure_ascii=False).encode("utf-8"))
        if size > MAX_LABELS_BYTES:
            raise InvalidSubscriptionError(
                "labels_too_large",
                f"labels are {size} bytes of JSON; the limit is {MAX_LABELS_BYTES}",
            )
    if new.kind == "headers":
        if new.criteria is None or new.mode is None:
            raise InvalidSubscriptionError(
                "missing_criteria", "a headers subscription needs criteria and a mode"
            )
        matcher = HeadersMatcher(header_limits)
        if new.mode not in MODES:
            raise InvalidSubscriptionError("invalid_mode", "mode must be 'all' or 'any'")
        criteria = tuple(sorted(matcher.normalize(new.criteria), key=_criterion_order))
        return replace(
            new,
            tenant=tenant,
            subscriber=subscriber,
            dialect=HEADERS_DIALECT,
            criteria=criteria,
            pattern=headers_pattern(criteria, new.mode),
        )
    if new.kind != "topic":
        raise InvalidSubscriptionError("invalid_kind", "kind must be 'topic' or 'headers'")
    try:
        dialect = get_dialect(new.dialect)
    except ValueError as e:
        raise InvalidSubscriptionError("invalid_dialect", str(e)) from e
    limits = limits or Limits()
    dialect.parse_pattern(new.pattern, limits)  # raises InvalidPatternError
    _no_controls(new.pattern, "pattern")
    dialect.check_hash_wildcards(new.pattern, limits)  # a write's rule: see Limits
    return replace(new, tenant=tenant, subscriber=subscriber, criteria=None, mode=None)
