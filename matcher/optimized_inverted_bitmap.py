"""``optimized_inverted_bitmap``: seed 000's per-position roaring bitmaps, extended to ``#``.

Seed 000 keeps, for each word position, one bitmap per word that patterns name there plus an
"other" row (patterns with ``*`` at that position) and a "null" row (patterns too short to
reach it); a match ANDs one row per position. Seed 003 notes that per-word indexing cannot
express ``#``. Here patterns are grouped by shape so it can, exactly:

* a ``#``-free pattern of L words joins the exact group for length L, indexed by position
  from the start. Only topics of L words consult it, which is what the "null" row did;
* a pattern with ``#`` joins the group for (a, b): its a tokens before the first ``#`` are
  indexed by position from the start, its b tokens after the last ``#`` by position from the
  end; the group applies to topics of at least a + b words. Tokens between the first and the
  last ``#`` (``#.x.#``) cannot be placed; those rare candidates are verified one by one.

Within a group a match intersects one row per indexed position (literal row OR the ``*``
row), sparsest first, stopping at the first empty intersection.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import chain

from pyroaring import BitMap, FrozenBitMap

from matcher.base import EMPTY, Matcher, MatchResult
from matcher.grammar import MANY, ONE, Token, Tokens, canonical, compile_predicate
from matcher.limits import Limits


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


def _shape(tokens: Tokens) -> tuple[Tokens, Tokens, bool]:
    """(tokens before the first ``#``, tokens after the last ``#``, whether any lie between)."""
    first = tokens.index(MANY)
    last = len(tokens) - 1 - tokens[::-1].index(MANY)
    return tokens[:first], tokens[last + 1 :], last > first + 1


class OptimizedInvertedBitmapMatcher(Matcher):
    """Match O(groups x positions) bitmap operations; subscribe/unsubscribe O(tokens)."""

    name = "optimized_inverted_bitmap"

    def __init__(self, dialect: str = "amqp", limits: Limits | None = None) -> None:
        super().__init__(dialect, limits)
        self._exact: dict[int, _Group] = {}
        # (forward, backward, needs verification) -> group
        self._hashed: dict[tuple[int, int, bool], _Group] = {}
        self._verifiers: dict[int, Callable[[Sequence[str]], bool]] = {}

    def _check(self) -> None:
        """Assert the invariants: no empty group or row is kept, every id sits in exactly one
        group, and only groups that need verification have verifiers."""
        seen = BitMap()
        groups = [*self._exact.values(), *self._hashed.values()]
        for group in groups:
            assert group.members, "empty group kept"
            assert not (seen & group.members), "id in two groups"
            seen |= group.members
            for position in (*group.forward, *group.backward):
                assert all(position.words.values()), "empty row kept"
        assert len(seen) == len(self._patterns)
        verified = BitMap()
        for (_, _, verify), group in self._hashed.items():
            if verify:
                verified |= group.members
        assert verified == BitMap(self._verifiers)

    def _add(self, sub_id: int, tokens: Tokens, pattern: str) -> None:
        tokens = canonical(tokens)
        if MANY not in tokens:
            group = self._exact.get(len(tokens))
            if group is None:
                group = self._exact[len(tokens)] = _Group(len(tokens), 0)
            group.add(sub_id, tokens, ())
            return
        prefix, suffix, verify = _shape(tokens)
        key = (len(prefix), len(suffix), verify)
        group = self._hashed.get(key)
        if group is None:
            group = self._hashed[key] = _Group(len(prefix), len(suffix))
        if verify:
            # Before indexing: a concurrent reader may find the id as soon as it is indexed.
            self._verifiers[sub_id] = compile_predicate(tokens)
        group.add(sub_id, prefix, suffix)

    def _remove(self, sub_id: int, tokens: Tokens) -> None:
        tokens = canonical(tokens)
        if MANY not in tokens:
            group = self._exact[len(tokens)]
            group.discard(sub_id, tokens, ())
            if not group.members:
                del self._exact[len(tokens)]
            return
        prefix, suffix, verify = _shape(tokens)
        key = (len(prefix), len(suffix), verify)
        group = self._hashed[key]
        group.discard(sub_id, prefix, suffix)
        if not group.members:
            del self._hashed[key]
        self._verifiers.pop(sub_id, None)

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
            verifiers = self._verifiers
            for (forward, backward, verify), group in list(self._hashed.items()):
                if forward + backward > n:
                    continue
                found = group.candidates(words)
                if found and verify:
                    # A verifier missing here belongs to an id being unsubscribed right now.
                    found = BitMap(
                        [i for i in found if (test := verifiers.get(i)) is not None and test(words)]
                    )
                if found:
                    parts.append(found)
        if not parts:
            return EMPTY
        if len(parts) == 1:
            return FrozenBitMap(parts[0])
        return FrozenBitMap.union(*parts)
