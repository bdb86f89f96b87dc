"""The interface every engine implements, and the bookkeeping they share."""

from __future__ import annotations

import gc
import threading
from abc import ABC, abstractmethod
from array import array
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from itertools import pairwise
from typing import Any, ClassVar, Final, Protocol, TypeAlias

from matcher.errors import (
    CapacityError,
    InvalidSubscriptionIdError,
    MatcherError,
    SubscriptionConflictError,
)
from matcher.grammar import Tokens, checked_text, get_dialect
from matcher.limits import DEFAULT_LIMITS, Limits


class MatchResult(Protocol):
    """What ``match`` returns: an immutable collection of distinct subscription ids
    (``frozenset`` or ``pyroaring.FrozenBitMap``); callers may keep it, it never changes."""

    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[int]: ...
    def __contains__(self, sub_id: int, /) -> bool: ...


EMPTY: Final[frozenset[int]] = frozenset()
SUB_ID_LIMIT: Final = 2**32

#: What ``match_ids`` returns for topics ``t``: ``(counts, ids, errors)``, both arrays
#: ``array('I')``; topic k's ids, ascending, are the ``counts[k]`` entries of ``ids`` after
#: those of the topics before it, and ``errors`` maps the position of each topic the dialect
#: refuses to its error (its count is 0).
BatchIds: TypeAlias = "tuple[array[int], array[int], dict[int, MatcherError]]"


def check_sub_id(sub_id: object) -> int:
    """``sub_id`` if it is an int in ``[0, 2**32)`` (the range a roaring bitmap indexes)."""
    if type(sub_id) is not int or not 0 <= sub_id < SUB_ID_LIMIT:
        raise InvalidSubscriptionIdError(
            "invalid_sub_id", f"subscription id must be an int in [0, 2**32), got {sub_id!r}"
        )
    return sub_id


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector during a bulk build.

    A bulk load allocates millions of acyclic objects (nodes, tuples, bitmaps); each
    allocation burst triggers full collections that rescan the whole, growing heap, which
    made loading quadratic in practice. Nothing built here forms a cycle, so pausing loses
    nothing; the previous state is restored.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Matcher(ABC):
    """Routes topics to the ids of the subscriptions whose pattern matches them.

    Subclasses implement ``_add``, ``_remove`` and ``match``; this class validates input once,
    keeps the id -> pattern table that makes re-subscribing idempotent, and serializes writers.
    """

    name: ClassVar[str]

    def __init__(self, dialect: str = "amqp", limits: Limits | None = None) -> None:
        self.dialect = get_dialect(dialect)
        self.limits = limits if limits is not None else DEFAULT_LIMITS
        self._split = self.dialect.topic_splitter(self.limits)
        self._patterns: dict[int, str] = {}
        self._write_lock = threading.Lock()

    def subscribe(self, sub_id: int, pattern: str) -> None:
        """Add subscription ``sub_id`` for ``pattern``.

        The same (id, pattern) again is a no-op; the same id with another pattern raises
        ``SubscriptionConflictError``. Invalid input raises before anything changes.
        """
        check_sub_id(sub_id)
        text = checked_text(pattern, "pattern", self.limits.max_pattern_bytes)
        with self._write_lock:
            existing = self._patterns.get(sub_id)
            if existing is not None:
                if existing == text:
                    return
                raise SubscriptionConflictError(
                    "id_conflict",
                    f"subscription {sub_id} already has pattern {existing!r}, not {text!r}",
                )
            if len(self._patterns) >= self.limits.max_subscriptions:
                raise CapacityError(
                    "too_many_subscriptions",
                    f"the matcher holds {self.limits.max_subscriptions} subscriptions, its limit",
                )
            tokens = self.dialect.tokens_of(text, self.limits)
            self._add(sub_id, tokens, text)
            self._patterns[sub_id] = text

    def subscribe_many(self, items: Iterable[tuple[int, str]]) -> int:
        """Subscribe every (id, pattern) as one write; returns how many were new.

        All or nothing: every item is validated (and checked against the others and the
        capacity) before anything is indexed, so an invalid item raises and changes nothing.
        Engines index the batch in bulk where that is cheaper (``_add_many``).
        """
        limits = self.limits
        with self._write_lock, gc_paused():
            batch: dict[int, str] = {}
            prepared: list[tuple[int, Tokens, str]] = []
            for sub_id, pattern in items:
                check_sub_id(sub_id)
                text = checked_text(pattern, "pattern", limits.max_pattern_bytes)
                existing = self._patterns.get(sub_id, batch.get(sub_id))
                if existing is not None:
                    if existing == text:
                        continue
                    raise SubscriptionConflictError(
                        "id_conflict",
                        f"subscription {sub_id} already has pattern {existing!r}, not {text!r}",
                    )
                batch[sub_id] = text
                prepared.append((sub_id, self.dialect.tokens_of(text, limits), text))
            if len(self._patterns) + len(prepared) > limits.max_subscriptions:
                raise CapacityError(
                    "too_many_subscriptions",
                    f"{len(prepared)} more subscriptions would exceed the limit of "
                    f"{limits.max_subscriptions}",
                )
            self._add_many(prepared)
            self._patterns.update(batch)
            return len(prepared)

    def subscribe_arrays(self, ids: Any, offsets: Any, data: Any) -> int:
        """Subscribe ``ids[k]`` to the UTF-8 pattern ``data[offsets[k]:offsets[k + 1]]``:
        a bulk build from an Arrow string column's buffers (int64 ids, int32 offsets, uint8
        bytes; anything with the buffer protocol). ``subscribe_many``'s rules (all or
        nothing); returns how many were new. Here one Python string per item; ``native``
        reads the buffers in C."""
        raw = bytes(memoryview(data).cast("B"))
        bounds = memoryview(offsets).tolist()
        if len(bounds) != len(memoryview(ids)) + 1:
            raise ValueError("offsets must hold one more entry than ids")
        patterns = [raw[start:end].decode("utf-8") for start, end in pairwise(bounds)]
        return self.subscribe_many(zip(memoryview(ids).tolist(), patterns, strict=True))

    def _add_many(self, items: list[tuple[int, Tokens, str]]) -> None:
        """Index validated, new subscriptions (write lock held); engines override it where a
        bulk build beats one ``_add`` each."""
        for sub_id, tokens, pattern in items:
            self._add(sub_id, tokens, pattern)

    def unsubscribe(self, sub_id: int) -> bool:
        """Remove subscription ``sub_id``; False when it was not subscribed."""
        with self._write_lock:
            text = self._patterns.pop(sub_id, None)
            if text is None:
                return False
            self._remove(sub_id, self.dialect.parse_pattern(text, self.limits))
            return True

    @abstractmethod
    def match(self, topic: str) -> MatchResult:
        """Ids of every subscription whose pattern matches ``topic``."""

    def match_ids(self, topics: Iterable[str]) -> BatchIds:
        """``match`` for many topics, answered in arrays (``BatchIds``): no Python object
        per id for the caller to hold. Here one ``match`` per topic; ``native`` walks them
        in C without the GIL. O(matches + their sort) beyond the walks."""
        counts: array[int] = array("I")
        ids: array[int] = array("I")
        errors: dict[int, MatcherError] = {}
        match = self.match
        for k, topic in enumerate(topics):
            try:
                found = match(topic)
            except MatcherError as e:
                errors[k] = e
                counts.append(0)
                continue
            counts.append(len(found))
            ids.extend(sorted(found))
        return counts, ids, errors

    def capacity(self) -> dict[str, tuple[int, int]]:
        """(used, limit) of each fixed capacity of the structure beyond
        ``limits.max_subscriptions``, by name; past a limit, writes raise CapacityError.
        None here; ``native`` has three."""
        return {}

    def check_room(self, patterns: Iterable[str]) -> None:
        """Raise CapacityError when subscribing ``patterns`` (new, and valid in the
        dialect) might not fit: here when they would pass ``max_subscriptions``; engines
        with fixed capacities (``capacity``) check those too. A writer's early refusal;
        subscribing decides. O(patterns)."""
        more = sum(1 for _ in patterns)
        limit = self.limits.max_subscriptions
        if len(self) + more <= limit:
            return
        if more == 1:
            raise CapacityError(
                "too_many_subscriptions", f"the matcher holds {limit} subscriptions, its limit"
            )
        raise CapacityError(
            "too_many_subscriptions",
            f"{more} more subscriptions would exceed the limit of {limit}",
        )

    @abstractmethod
    def _add(self, sub_id: int, tokens: Tokens, pattern: str) -> None:
        """Index a new, validated subscription (called with the write lock held); ``pattern``
        is its text, for engines that keep it (snapshots list it)."""

    @abstractmethod
    def _remove(self, sub_id: int, tokens: Tokens) -> None:
        """Forget a subscription previously given to ``_add`` (write lock held)."""

    def _check(self) -> None:
        """Assert the engine's structural invariants; tests call it after every mutation.
        Engines extend it."""
        assert len(self._patterns) <= self.limits.max_subscriptions

    def pattern_of(self, sub_id: int) -> str | None:
        """The pattern subscription ``sub_id`` was made with, or None."""
        return self._patterns.get(sub_id)

    def subscriptions(self) -> Iterator[tuple[int, str]]:
        """Every (id, pattern), from a copy taken under the write lock."""
        with self._write_lock:
            items = list(self._patterns.items())
        return iter(items)

    def __len__(self) -> int:
        return len(self._patterns)

    def __contains__(self, sub_id: object) -> bool:
        return sub_id in self._patterns

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.dialect.name} subscriptions={len(self)}>"
