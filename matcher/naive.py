"""``naive``: scan every pattern. The executable specification and the oracle for the others."""

from __future__ import annotations

from matcher.base import Matcher, MatchResult
from matcher.grammar import Tokens, pattern_matches
from matcher.limits import Limits


class NaiveMatcher(Matcher):
    """O(subscriptions x tokens x words) per match; uses the patterns exactly as written
    (not canonicalized), so it also checks the rewriting the fast engines rely on."""

    name = "naive"

    def __init__(self, dialect: str = "amqp", limits: Limits | None = None) -> None:
        super().__init__(dialect, limits)
        self._tokens: dict[int, Tokens] = {}

    def _add(self, sub_id: int, tokens: Tokens, pattern: str) -> None:
        self._tokens[sub_id] = tokens

    def _remove(self, sub_id: int, tokens: Tokens) -> None:
        del self._tokens[sub_id]

    def match(self, topic: str) -> MatchResult:
        words = self._split(topic)
        # list() copies under the GIL, so a concurrent writer cannot break the scan.
        return frozenset(
            sub_id
            for sub_id, tokens in list(self._tokens.items())
            if pattern_matches(tokens, words)
        )
