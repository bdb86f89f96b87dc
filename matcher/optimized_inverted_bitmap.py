"""``optimized_inverted_bitmap``: "Fast Topic Matching"'s per-position roaring bitmaps,
extended to ``#``.

The original keeps, for each word position, one bitmap per word that patterns name there plus an
"other" row (patterns with ``*`` at that position) and a "null" row (patterns too short to
reach it); a match ANDs one row per position. RabbitMQ's routing notes that per-word indexing cannot
express ``#``. Here patterns are grouped by shape so it can, exactly:

* a ``#``-free pattern of L words joins the exact group for length L, indexed by position
  from the start. Only topics of L words consult it, which is what the "null" row did;
* a pattern with ``#`` joins the group for (a, b): its a tokens before the first ``#`` are
  indexed by position from the start, its b tokens after the last ``#`` by position from the
  end; the group applies to topics of at least a + b words;
* a pattern with tokens between its first and last ``#`` (``#.x.#``) cannot be placed by
  position. Those go to a ``trie`` kept beside the groups (``TrieMatcher``, the ``trie``
  engine's walk), which answers them exactly in one walk, O(frontier x words), instead of
  verifying candidates one by one with the matching rule (O(tokens x words) each:
  milliseconds on ``#``-heavy patterns against 128-word keys).

Within a group a match intersects one row per indexed position (literal row OR the ``*``
row), sparsest first, stopping at the first empty intersection.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain

from pyroaring import BitMap, FrozenBitMap

from matcher.base import EMPTY, Matcher, MatchResult
from matcher.grammar import MANY, ONE, Token, Tokens, canonical
from matcher.limits import Limits
from matcher.trie import TrieMatcher


class _Position:
    """The rows of one indexed position: a bitmap per literal word and the ``*`` row."""

    __slots__ = ("one", "words")

    def __init__(self) -> None:
        self.words: dict[str, BitMap] = {}
        self.one = BitMap()

    def add(self, token: Token, sub_id: int) -> None:
        if token is ONE:
            self.one.add(sub_id)
        else:
            assert isinstance(token, str)
            row = self.words.get(token)
            if row is None:
                row = self.words[token] = BitMap()
            row.add(sub_id)

    def discard(self, token: Token, sub_id: int) -> None:
        if token is ONE:
            self.one.discard(sub_id)
        else:
            assert isinstance(token, str)
            row = self.words[token]
            row.discard(sub_id)
            if not row:
                del self.words[token]


class _Group:
    """Patterns of one shape: ``forward`` positions counted from the start of the topic,
    ``backward`` positions counted from its end."""

    __slots__ = ("backward", "forward", "members")

    def __init__(self, forward: int, backward: int) -> None:
        self.forward = [_Position() for _ in range(forward)]
        self.backward = [_Position() for _ in range(backward)]
        self.members = BitMap()

    def add(self, sub_id: int, prefix: Tokens, suffix: Tokens) -> None:
        for position, token in zip(self.forward, prefix, strict=True):
            position.add(token, sub_id)
        for position, token in zip(self.backward, reversed(suffix), strict=True):
            position.add(token, sub_id)
        self.members.add(sub_id)

    def discard(self, sub_id: int, prefix: Tokens, suffix: Tokens) -> None:
        for position, token in zip(self.forward, prefix, strict=True):
            position.discard(token, sub_id)
        for position, token in zip(self.backward, reversed(suffix), strict=True):
            position.discard(token, sub_id)
        self.members.discard(sub_id)

    def candidates(self, words: list[str]) -> BitMap | None:
        """Members whose indexed tokens all accept ``words``; None when there are none.

        May return one of the group's own bitmaps: callers copy before handing it out.
        """
        rows: list[BitMap] = []
        # Forward positions read the topic from its start, backward ones from its end.
        pairs: Iterable[tuple[_Position, str]] = zip(self.forward, words, strict=False)
        if self.backward:
            pairs = chain(pairs, zip(self.backward, reversed(words), strict=False))
        for position, word in pairs:
            literal = position.words.get(word)
            one = position.one
            if literal is None:
                if not one:
                    return None
                rows.append(one)
            else:
                rows.append(literal | one if one else literal)
        if not rows:
            return self.members
        rows.sort(key=len)
        found = rows[0]
        for row in rows[1:]:
            found = found & row
            if not found:
                return None
        return found


def _constraints(tokens: Tokens) -> tuple[Tokens, Tokens, int, bool]:
    """What a query pattern fixes by position: (tokens before its first ``#``, tokens after
    its last ``#``, its least topic length, whether it has a ``#``). Without ``#`` both ends
    are the whole pattern."""
    if MANY not in tokens:
        return tokens, tokens, len(tokens), False
    first = tokens.index(MANY)
    last = len(tokens) - 1 - tokens[::-1].index(MANY)
    return tokens[:first], tokens[last + 1 :], sum(t is not MANY for t in tokens), True


def _narrow(found: BitMap, position: _Position, token: Token) -> BitMap:
    """``found`` minus the ids whose token at ``position`` is a literal other than ``token``
    (a query wildcard fixes nothing)."""
    if not isinstance(token, str):
        return found
    literal = position.words.get(token)
    return found & (literal | position.one if literal is not None else position.one)


def _shape(tokens: Tokens) -> tuple[Tokens, Tokens] | None:
    """(tokens before the first ``#``, tokens after the last ``#``); None when some lie
    between (the pattern goes to the trie)."""
    first = tokens.index(MANY)
    last = len(tokens) - 1 - tokens[::-1].index(MANY)
    if last > first + 1:
        return None
    return tokens[:first], tokens[last + 1 :]


class OptimizedInvertedBitmapMatcher(Matcher):
    """Match O(groups x positions) bitmap operations plus a trie walk when some pattern has
    tokens between two ``#``; subscribe/unsubscribe O(tokens)."""

    name = "optimized_inverted_bitmap"

    def __init__(self, dialect: str = "amqp", limits: Limits | None = None) -> None:
        super().__init__(dialect, limits)
        self._exact: dict[int, _Group] = {}
        # (forward, backward) -> group
        self._hashed: dict[tuple[int, int], _Group] = {}
        # patterns with tokens between their first and last '#'; written under our lock
        self._middle = TrieMatcher(dialect, self.limits)

    def _check(self) -> None:
        """Assert the invariants: no empty group or row is kept, every id sits in exactly one
        group or in the trie, and the trie holds exactly the patterns that need it."""
        seen = BitMap()
        groups = [*self._exact.values(), *self._hashed.values()]
        for group in groups:
            assert group.members, "empty group kept"
            assert not (seen & group.members), "id in two groups"
            seen |= group.members
            for position in (*group.forward, *group.backward):
                assert all(position.words.values()), "empty row kept"
        self._middle._check()
        middle = dict(self._middle.subscriptions())
        assert not (seen & BitMap(middle)), "id in a group and in the trie"
        assert len(seen) + len(middle) == len(self._patterns)
        for text in middle.values():
            tokens = canonical(self.dialect.parse_pattern(text, self.limits))
            assert MANY in tokens and _shape(tokens) is None, text

    def _add(self, sub_id: int, tokens: Tokens, pattern: str) -> None:
        tokens = canonical(tokens)
        if MANY not in tokens:
            group = self._exact.get(len(tokens))
            if group is None:
                group = self._exact[len(tokens)] = _Group(len(tokens), 0)
            group.add(sub_id, tokens, ())
            return
        shape = _shape(tokens)
        if shape is None:
            self._middle.subscribe(sub_id, pattern)
            return
        prefix, suffix = shape
        key = (len(prefix), len(suffix))
        group = self._hashed.get(key)
        if group is None:
            group = self._hashed[key] = _Group(len(prefix), len(suffix))
        group.add(sub_id, prefix, suffix)

    def _remove(self, sub_id: int, tokens: Tokens) -> None:
        tokens = canonical(tokens)
        if MANY not in tokens:
            group = self._exact[len(tokens)]
            group.discard(sub_id, tokens, ())
            if not group.members:
                del self._exact[len(tokens)]
            return
        shape = _shape(tokens)
        if shape is None:
            self._middle.unsubscribe(sub_id)
            return
        prefix, suffix = shape
        key = (len(prefix), len(suffix))
        group = self._hashed[key]
        group.discard(sub_id, prefix, suffix)
        if not group.members:
            del self._hashed[key]

    def overlap_candidates(self, pattern: str) -> BitMap:
        """Ids whose pattern may share a topic with ``pattern``: a superset, pruned by the
        positional rows. A group is kept only if its topic lengths meet the query's; at every
        position both fix from the same end, a literal of the query keeps only the group's
        rows for that word and for ``*``. Patterns with tokens between two ``#`` (the trie's)
        are all candidates. A pattern covered by ``pattern`` shares a topic with it, so this
        is a superset of those too. O(groups x positions) bitmap operations.
        """
        tokens = canonical(self.dialect.parse_pattern(pattern, self.limits))
        head, tail, least, open_ended = _constraints(tokens)
        found = BitMap()
        # list(): copies under the GIL, so a concurrent writer cannot break the walk.
        groups: list[tuple[_Group, bool]] = [(g, False) for g in list(self._exact.values())]
        groups += [(g, True) for g in list(self._hashed.values())]
        for group, hashed in groups:
            forward, backward = len(group.forward), len(group.backward)
            if hashed:
                if not open_ended and least < forward + backward:
                    continue
            elif least > forward or (not open_ended and least != forward):
                continue
            rows = BitMap(group.members)
            for position, token in zip(group.forward, head, strict=False):
                rows = _narrow(rows, position, token)
            # From the end: a hashed group's backward rows, an exact group's last positions.
            ends = group.backward if hashed else group.forward[::-1]
            for position, token in zip(ends, reversed(tail), strict=False):
                rows = _narrow(rows, position, token)
            found |= rows
        found |= BitMap(sub_id for sub_id, _ in self._middle.subscriptions())
        return found

    def match(self, topic: str) -> MatchResult:
        words = self._split(topic)
        n = len(words)
        parts: list[BitMap] = []
        group = self._exact.get(n)
        if group is not None:
            found = group.candidates(words)
            if found:
                parts.append(found)
        if self._hashed:
            for (forward, backward), group in list(self._hashed.items()):
                if forward + backward > n:
                    continue
                found = group.candidates(words)
                if found:
                    parts.append(found)
        if len(self._middle):
            middle = self._middle.match_words(words)
            if middle:
                parts.append(BitMap(middle))
        if not parts:
            return EMPTY
        if len(parts) == 1:
            return FrozenBitMap(parts[0])
        return FrozenBitMap.union(*parts)
