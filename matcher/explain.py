"""Why a pattern matches a topic or not: the words each wildcard took, or the first topic word
no prefix of the pattern gets past.

Works on the grammar's internal form, so it has exactly ``pattern_matches``' semantics (AMQP
``#`` taking zero words, empty words, the MQTT ``$`` rule and ``#`` matching the parent, NATS
``>`` taking one or more), and reports in the dialect's own terms: the pattern's words as
written and the topic's words as the caller split them (no MQTT marker word).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from matcher.budget import Budget
from matcher.grammar import MANY, ONE, Dialect, Tokens, get_dialect
from matcher.limits import DEFAULT_LIMITS, Limits

#: ``mismatch``: the word differs from every literal the pattern could take there;
#: ``too_long``: the pattern ended before the topic; ``too_short``: the topic ended before
#: the pattern; ``system_topic``: MQTT, a filter starting with a wildcard never matches a
#: topic starting with ``$`` (MQTT 3.1.1 section 4.7.2).
Reason = Literal["mismatch", "too_long", "too_short", "system_topic"]

#: The fixed work of one explanation (parsing the pattern, splitting the topic) in budget
#: steps: about what 50 cells of its table cost.
EXPLAIN_STEPS: Final = 50


@dataclass(frozen=True, slots=True)
class Capture:
    """The topic words one wildcard of the pattern took."""

    #: Index of the wildcard among the pattern's words (as written).
    token: int
    #: The wildcard as written: ``*``, ``#``, ``+`` or ``>``.
    wildcard: str
    #: Index of the first topic word it took (where it would start when it took none).
    start: int
    words: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Failure:
    """Where a pattern stops matching a topic.

    ``position`` words of the topic are consumed by some prefix of the pattern, and no topic
    that starts with the first ``position + 1`` words matches (when ``position`` is the topic's
    length, the topic ended too soon: some longer topic starting with it does match).
    """

    position: int
    reason: Reason
    #: Literal words the pattern could have taken at ``position`` (sorted).
    expected: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Explanation:
    matched: bool
    #: The topic's words (the dialect's split, without MQTT's internal marker).
    words: tuple[str, ...]
    #: One per wildcard of the pattern, in pattern order, when matched; else empty.
    captures: tuple[Capture, ...]
    failure: Failure | None


def explain(
    pattern: str,
    topic: str,
    dialect: str | Dialect = "amqp",
    limits: Limits = DEFAULT_LIMITS,
    budget: Budget | None = None,
) -> Explanation:
    """Explain ``pattern`` against ``topic``. Raises the grammar's errors for invalid input.

    Cost O(tokens x words) time and memory (at most 257 x 257 with the default limits),
    charged to ``budget`` as it goes: (tokens + 1) x (words + 1) steps for the table of
    what can still match, plus ``EXPLAIN_STEPS`` for parsing and splitting, before either
    is done; a failure's walk then costs a step per live state per word.
    When a ``#`` could take different numbers of words, each ``#`` takes as few as it can,
    the leftmost first.
    """
    grammar = get_dialect(dialect) if isinstance(dialect, str) else dialect
    tokens = grammar.parse_pattern(pattern, limits)
    words = grammar.split_topic(topic, limits)
    if budget is not None:
        budget.spend((len(tokens) + 1) * (len(words) + 1) + EXPLAIN_STEPS)
    owners, written = _owners(grammar, pattern, tokens)
    skip = 1 if grammar.mqtt_dollar_rule else 0  # the internal marker word
    shown = tuple(words[skip:])
    later = _can_finish(tokens, words)
    if not later[0][0]:
        return Explanation(False, shown, (), _failure(tokens, words, skip, budget))
    taken: dict[int, list[str]] = {}
    starts: dict[int, int] = {}
    i = j = 0
    n = len(words)
    while i < len(tokens):
        token = tokens[i]
        owner = owners[i]
        if token is MANY:
            starts.setdefault(owner, j - skip)
            k = j
            while not later[i + 1][k]:
                k += 1  # the shortest take that still lets the rest match
            taken.setdefault(owner, []).extend(words[j:k])
            j = k
        else:
            if token is ONE and owner >= 0:
                starts.setdefault(owner, j - skip)
                taken.setdefault(owner, []).append(words[j])
            j += 1
        i += 1
    assert j == n
    captures = tuple(
        Capture(owner, written[owner], starts[owner], tuple(taken[owner]))
        for owner in sorted(taken)
    )
    return Explanation(True, shown, captures, None)


def _owners(grammar: Dialect, pattern: str, tokens: Tokens) -> tuple[list[int], list[str]]:
    """For each internal token, the index of the pattern word it came from (-1: MQTT's
    marker), and the pattern's words as written."""
    written = pattern.split(grammar.separator) if pattern else []
    owners: list[int] = [-1] if grammar.mqtt_dollar_rule else []
    for index, word in enumerate(written):
        owners.append(index)
        if word == grammar.many and grammar.many_needs_one:
            owners.append(index)  # NATS '>' is ONE then MANY internally
    assert len(owners) == len(tokens)
    return owners, written


def _can_finish(tokens: Tokens, words: list[str]) -> list[list[bool]]:
    """``table[i][j]``: ``tokens[i:]`` can consume exactly ``words[j:]``."""
    m, n = len(tokens), len(words)
    table = [[False] * (n + 1) for _ in range(m + 1)]
    table[m][n] = True
    for i in range(m - 1, -1, -1):
        token, row, below = tokens[i], table[i], table[i + 1]
        if token is MANY:
            row[n] = below[n]
            for j in range(n - 1, -1, -1):
                row[j] = below[j] or row[j + 1]
        else:
            for j in range(n):
                row[j] = below[j + 1] and (token is ONE or token == words[j])
    return table


def _closure(tokens: Tokens, states: set[int]) -> set[int]:
    """``states`` plus every state reached by letting a ``#`` take no word."""
    out = set(states)
    for i in sorted(states):
        while i < len(tokens) and tokens[i] is MANY:
            i += 1
            out.add(i)
    return out


def _failure(tokens: Tokens, words: list[str], skip: int, budget: Budget | None) -> Failure:
    """Run the pattern's automaton until no state survives; the last position some state
    reached is where the pattern failed."""
    m = len(tokens)
    states = _closure(tokens, {0})
    j = 0
    for word in words:
        if budget is not None:
            budget.spend(len(states) + 1)
        following: set[int] = set()
        for i in states:
            if i == m:
                continue
            token = tokens[i]
            if token is MANY:
                following.add(i)
            elif token is ONE or token == word:
                following.add(i + 1)
        if not following:
            break
        states = _closure(tokens, following)
        j += 1
    expected = tuple(sorted({t for i in states if i < m and isinstance(t := tokens[i], str)}))
    if skip and j == 0:
        return Failure(0, "system_topic", ())
    if j == len(words):
        reason: Reason = "too_short"
    else:
        reason = "mismatch" if expected else "too_long"
    return Failure(j - skip, reason, expected)
