"""``headers``: content-based routing on message fields (OpenAMQ's "Field Matching": one
bitmap per criterion, hit counts).

A subscription is a set of criteria, each ``field=value`` or ``field`` present, with mode
``all`` (every criterion must hold) or ``any`` (at least one). Each criterion owns a roaring
bitmap of the subscriptions that ask for it. A message looks up the bitmaps of its
``(field, value)`` and ``(field, present)`` pairs and counts hits per subscription: a hit
count equal to the criteria count matches ``all``, any hit matches ``any``.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

from pyroaring import BitMap, FrozenBitMap

from matcher.base import EMPTY, MatchResult, check_sub_id
from matcher.errors import CapacityError, MatcherError, SubscriptionConflictError
from matcher.grammar import checked_text

Mode: TypeAlias = Literal["all", "any"]
#: One criterion: (field, value) or (field, None) for "field is present".
Criterion: TypeAlias = tuple[str, str | None]
MODES: Final = ("all", "any")


class InvalidHeadersError(MatcherError, ValueError):
    """Criteria, a mode or message headers that break a rule or a limit."""


@dataclass(frozen=True, slots=True)
class HeaderLimits:
    """Bounds on criteria and messages, checked where they enter the matcher."""

    max_criteria: int = 32
    max_fields: int = 64
    max_field_bytes: int = 255
    max_value_bytes: int = 1024
    max_subscriptions: int = 10_000_000


def _text(value: object, kind: str, limit: int) -> str:
    try:
        return checked_text(value, kind, limit)
    except MatcherError as e:
        raise InvalidHeadersError(e.code, e.message) from e


class HeadersMatcher:
    """Match O(message fields + hits); subscribe/unsubscribe O(criteria). Thread-safe:
    writers serialize; a subscription becomes visible only once fully indexed."""

    name = "headers"

    def __init__(self, limits: HeaderLimits | None = None) -> None:
        self.limits = limits if limits is not None else HeaderLimits()
        self._rows: dict[Criterion, BitMap] = {}
        # id -> (criteria, mode); an "all" id matches when its hits reach len(criteria).
        self._subs: dict[int, tuple[frozenset[Criterion], Mode]] = {}
        self._write_lock = threading.Lock()

    def normalize(
        self, criteria: Iterable[Criterion] | Mapping[str, str | None]
    ) -> frozenset[Criterion]:
        """Validated criteria as a set; a mapping ``{field: value or None}`` is accepted."""
        items = criteria.items() if isinstance(criteria, Mapping) else criteria
        limits = self.limits
        out: set[Criterion] = set()
        for item in items:
            try:
                field, value = item
            except (TypeError, ValueError) as e:
                raise InvalidHeadersError(
                    "invalid_criterion", f"a criterion is (field, value or None), not {item!r}"
                ) from e
            field = _text(field, "field", limits.max_field_bytes)
            if value is not None:
                value = _text(value, "value", limits.max_value_bytes)
            out.add((field, value))
            if len(out) > limits.max_criteria:
                raise InvalidHeadersError(
                    "too_many_criteria",
                    f"a subscription has at most {limits.max_criteria} criteria",
                )
        if not out:
            raise InvalidHeadersError("no_criteria", "a subscription needs at least one criterion")
        return frozenset(out)

    def subscribe(
        self,
        sub_id: int,
        criteria: Iterable[Criterion] | Mapping[str, str | None],
        mode: Mode = "all",
    ) -> None:
        """Add subscription ``sub_id``; the same (id, criteria, mode) again is a no-op."""
        check_sub_id(sub_id)
        if mode not in MODES:
            raise InvalidHeadersError("invalid_mode", f"mode must be 'all' or 'any', not {mode!r}")
        wanted = self.normalize(criteria)
        with self._write_lock:
            existing = self._subs.get(sub_id)
            if existing is not None:
                if existing == (wanted, mode):
                    return
                raise SubscriptionConflictError(
                    "id_conflict", f"subscription {sub_id} already has other criteria"
                )
            if len(self._subs) >= self.limits.max_subscriptions:
                raise CapacityError(
                    "too_many_subscriptions",
                    f"the matcher holds {self.limits.max_subscriptions} subscriptions, its limit",
                )
            self._subs[sub_id] = (wanted, mode)
            for criterion in wanted:
                row = self._rows.get(criterion)
                if row is None:
                    row = self._rows[criterion] = BitMap()
                row.add(sub_id)

    def unsubscribe(self, sub_id: int) -> bool:
        with self._write_lock:
            entry = self._subs.get(sub_id)
            if entry is None:
                return False
            for criterion in entry[0]:
                row = self._rows[criterion]
                row.discard(sub_id)
                if not row:
                    del self._rows[criterion]
            del self._subs[sub_id]
            return True

    def match(self, headers: Mapping[str, str]) -> MatchResult:
        """Ids of the subscriptions whose criteria ``headers`` satisfy."""
        if not isinstance(headers, Mapping):
            raise InvalidHeadersError("not_a_mapping", "headers must be a mapping of fields")
        limits = self.limits
        if len(headers) > limits.max_fields:
            raise InvalidHeadersError(
                "too_many_fields", f"a message has at most {limits.max_fields} header fields"
            )
        rows = self._rows
        hit_rows: list[BitMap] = []
        for field, value in headers.items():
            field = _text(field, "field", limits.max_field_bytes)
            value = _text(value, "value", limits.max_value_bytes)
            row = rows.get((field, value))
            if row is not None:
                hit_rows.append(row)
            row = rows.get((field, None))
            if row is not None:
                hit_rows.append(row)
        if not hit_rows:
            return EMPTY
        hits: Counter[int] = Counter()
        for row in hit_rows:
            hits.update(row)
        subs = self._subs
        found = BitMap()
        for sub_id, count in hits.items():
            entry = subs.get(sub_id)
            # entry None: unsubscribed meanwhile; a criterion may be counted only once per
            # message because a mapping has each field once.
            if entry is not None and (entry[1] == "any" or count == len(entry[0])):
                found.add(sub_id)
        return FrozenBitMap(found)

    def __len__(self) -> int:
        return len(self._subs)

    def _check(self) -> None:
        """Invariants: rows hold exactly the ids asking for them, no empty row is kept."""
        expected: dict[Criterion, BitMap] = {}
        for sub_id, (criteria, _mode) in self._subs.items():
            for criterion in criteria:
                expected.setdefault(criterion, BitMap()).add(sub_id)
        assert expected == self._rows
