"""``inverted_bitmap``: OpenAMQ's inverted bitmap, one bitmap of subscription ids per
concrete topic.

A topic is "compiled" the first time it is seen; after that a match is one dictionary
lookup. Compiling walks a ``trie`` kept beside the table (``TrieMatcher``, the same walk the
``trie`` engine uses), so a cold topic costs what a ``trie`` match costs, O(frontier x
words), not one test per distinct pattern: high-cardinality topics (device ids) stay cheap.
Writes pay instead: a subscribe tests its pattern against every compiled topic ("recompile
when a new topic is detected", OpenAMQ), O(compiled topics) per write, at most
``Limits.max_compiled_topics`` pattern tests. The topic table evicts the least recently used
topic past that bound, so an unbounded topic space cannot exhaust memory.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

from pyroaring import BitMap, FrozenBitMap

from matcher.base import Matcher, MatchResult
from matcher.grammar import Tokens, canonical, compile_predicate
from matcher.limits import Limits
from matcher.trie import TrieMatcher

_EMPTY_BITMAP = FrozenBitMap()


class _Pattern:
    """A distinct (canonical) pattern, its compiled test and the ids subscribed with it."""

    __slots__ = ("ids", "test")

    def __init__(self, test: Callable[[Sequence[str]], bool]) -> None:
        self.test = test
        self.ids = BitMap()


class InvertedBitmapMatcher(Matcher):
    """Match O(1) for a compiled topic, a ``trie`` walk to compile a new one;
    subscribe/unsubscribe O(compiled topics)."""

    name = "inverted_bitmap"

    def __init__(self, dialect: str = "amqp", limits: Limits | None = None) -> None:
        super().__init__(dialect, limits)
        self._by_pattern: dict[Tokens, _Pattern] = {}
        # Every subscription, for compiling new topics; written under our write lock.
        self._trie = TrieMatcher(dialect, self.limits)
        # topic -> (matching ids, its words). Values are immutable, replaced on writes, so a
        # reader always holds a complete bitmap.
        self._topics: OrderedDict[str, tuple[FrozenBitMap, list[str]]] = OrderedDict()
        self._capacity = self.limits.max_compiled_topics

    def compiled_topics(self) -> int:
        """How many concrete topics the table holds now (at most ``max_compiled_topics``)."""
        return len(self._topics)

    def _check(self) -> None:
        """Assert the invariants: the table is within its bound, every compiled topic holds
        exactly the ids whose pattern matches it (by each pattern's own test, not the trie),
        the trie holds exactly our subscriptions, and no empty pattern entry is kept."""
        assert len(self._topics) <= self._capacity
        assert all(pattern.ids for pattern in self._by_pattern.values())
        self._trie._check()
        assert dict(self._trie.subscriptions()) == self._patterns
        for ids, words in self._topics.values():
            expected = BitMap()
            for pattern in self._by_pattern.values():
                if pattern.test(words):
                    expected |= pattern.ids
            assert ids == expected, (words, ids, expected)

    def _add(self, sub_id: int, tokens: Tokens, pattern: str) -> None:
        key = canonical(tokens)
        entry = self._by_pattern.get(key)
        if entry is None:
            entry = self._by_pattern[key] = _Pattern(compile_predicate(key))
        entry.ids.add(sub_id)
        self._trie.subscribe(sub_id, pattern)
        test = entry.test
        one = FrozenBitMap([sub_id])
        topics = self._topics
        for topic, (ids, words) in list(topics.items()):
            if test(words):
                topics[topic] = (ids | one, words)

    def _remove(self, sub_id: int, tokens: Tokens) -> None:
        key = canonical(tokens)
        entry = self._by_pattern[key]
        entry.ids.discard(sub_id)
        if not entry.ids:
            del self._by_pattern[key]
        self._trie.unsubscribe(sub_id)
        gone = FrozenBitMap([sub_id])
        topics = self._topics
        for topic, (ids, words) in list(topics.items()):
            if sub_id in ids:
                topics[topic] = (ids - gone, words)

    def match(self, topic: str) -> MatchResult:
        topics = self._topics
        entry = topics.get(topic)
        if entry is not None:
            try:  # noqa: SIM105 (suppress() would add a context manager to the hot path)
                topics.move_to_end(topic)
            except KeyError:  # evicted by a concurrent compile: the entry is still correct
                pass
            return entry[0]
        return self._compile(topic)

    def _compile(self, topic: str) -> FrozenBitMap:
        words = self._split(topic)
        # Under the write lock, so no write lands between the walk and the table insert.
        with self._write_lock:
            found = self._trie.match_words(words)
            ids = FrozenBitMap(found) if found else _EMPTY_BITMAP
            # Only a valid topic (as text) becomes a key, so a later hit skips validation.
            if isinstance(topic, str):
                topics = self._topics
                topics[topic] = (ids, words)
                while len(topics) > self._capacity:
                    topics.popitem(last=False)
        return ids
