"""A bounded topic -> result cache that can sit in front of any engine.

Every write replaces the whole cache dictionary *after* the engine has applied it. A reader
stores what it computed into the dictionary it read before computing, so a result computed
against an older state can only land in a dictionary that is already discarded: once
``subscribe`` or ``unsubscribe`` has returned, no stale result is ever served.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

from matcher.base import BatchIds, Matcher, MatchResult
from matcher.grammar import Tokens


class CachedMatcher(Matcher):
    """``engine`` behind an exact-topic cache of at most ``size`` entries (oldest evicted).

    Writes must go through this object (it shares the engine's id -> pattern table and write
    lock); reads of engine-specific features (``snapshot()``) go to ``engine``. The batch
    and capacity calls of the interface are the engine's own (a batch bypasses the cache:
    ``native`` answers it in C, and its answers are never stale either).
    """

    name = "cache"

    def __init__(self, engine: Matcher, size: int) -> None:
        if size < 1:
            raise ValueError("cache size must be at least 1")
        # No super().__init__: this matcher *is* the engine's bookkeeping, shared.
        self.engine = engine
        self.dialect = engine.dialect
        self.limits = engine.limits
        self._split = engine._split
        self._patterns = engine._patterns
        self._write_lock = engine._write_lock
        self._size = size
        self._cache: dict[str, MatchResult] = {}

    def match(self, topic: str) -> MatchResult:
        cache = self._cache
        result = cache.get(topic)
        if result is not None:
            return result
        result = self.engine.match(topic)  # validates: only valid topics become keys
        if len(cache) >= self._size:
            # Another reader may have emptied or resized it meanwhile.
            with contextlib.suppress(StopIteration, RuntimeError):
                cache.pop(next(iter(cache)), None)
        cache[topic] = result
        return result

    def match_ids(self, topics: Iterable[str]) -> BatchIds:
        return self.engine.match_ids(topics)

    def capacity(self) -> dict[str, tuple[int, int]]:
        return self.engine.capacity()

    def check_room(self, patterns: Iterable[str]) -> None:
        self.engine.check_room(patterns)

    def cached_topics(self) -> int:
        return len(self._cache)

    def __repr__(self) -> str:
        return f"<CachedMatcher size={self._size} {self.engine!r}>"

    def subscribe_many(self, items: Iterable[tuple[int, str]]) -> int:
        """The engine's own bulk write (all or nothing, its capacities included), then
        a cleared cache."""
        try:
            return self.engine.subscribe_many(items)
        finally:
            self._cache = {}

    def subscribe_arrays(self, ids: Any, offsets: Any, data: Any) -> int:
        """The engine's own bulk build from arrays, then a cleared cache."""
        try:
            return self.engine.subscribe_arrays(ids, offsets, data)
        finally:
            self._cache = {}

    def _add(self, sub_id: int, tokens: Tokens, pattern: str) -> None:
        self.engine._add(sub_id, tokens, pattern)
        self._cache = {}

    def _remove(self, sub_id: int, tokens: Tokens) -> None:
        self.engine._remove(sub_id, tokens)
        self._cache = {}

    def _check(self) -> None:
        self.engine._check()
        for topic, result in list(self._cache.items()):
            assert set(result) == set(self.engine.match(topic)), topic
