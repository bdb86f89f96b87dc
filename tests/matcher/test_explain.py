"""``matcher.explain`` against the matching rule: hand-written cases, then properties over
every dialect (explained iff ``naive`` matches; every explanation re-applies to its topic;
failure positions are sound)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from matcher import create_matcher, get_dialect
from matcher.explain import Explanation, explain
from matcher.grammar import MQTT_SYSTEM_MARK, Dialect, pattern_matches
from tests.matcher.strategies import PATTERNS, TOPICS


def _naive(dialect: str, pattern: str, topic: str) -> bool:
    matcher = create_matcher("naive", dialect)
    matcher.subscribe(1, pattern)
    return bool(matcher.match(topic))


def _captures(e: Explanation) -> list[tuple[str, int, list[str]]]:
    return [(c.wildcard, c.start, list(c.words)) for c in e.captures]


@pytest.mark.parametrize(
    ("dialect", "pattern", "topic", "captures"),
    [
        ("amqp", "a.*.c", "a.b.c", [("*", 1, ["b"])]),
        ("amqp", "a.#", "a", [("#", 1, [])]),
        ("amqp", "#.c", "a.b.c", [("#", 0, ["a", "b"])]),
        ("amqp", "#.#", "a.b", [("#", 0, []), ("#", 0, ["a", "b"])]),
        ("amqp", "*", "", None),
        ("amqp", "", "", []),
        ("amqp", "*.*", ".", [("*", 0, [""]), ("*", 1, [""])]),
        ("mqtt", "a/#", "a", [("#", 1, [])]),
        ("mqtt", "+/b", "$SYS/b", None),
        ("mqtt", "$SYS/+", "$SYS/b", [("+", 1, ["b"])]),
        ("nats", "a.>", "a.b.c", [(">", 1, ["b", "c"])]),
        ("nats", "a.>", "a", None),
    ],
)
def test_examples(
    dialect: str, pattern: str, topic: str, captures: list[tuple[str, int, list[str]]] | None
) -> None:
    e = explain(pattern, topic, dialect)
    assert e.matched is (captures is not None)
    if captures is not None:
        assert _captures(e) == captures


@pytest.mark.parametrize(
    ("dialect", "pattern", "topic", "position", "reason", "expected"),
    [
        ("amqp", "a.b.c", "a.x.c", 1, "mismatch", ("b",)),
        ("amqp", "a.b", "a.b.c", 2, "too_long", ()),
        ("amqp", "a.b.c", "a.b", 2, "too_short", ("c",)),
        ("amqp", "#.x", "a.b", 2, "too_short", ("x",)),
        ("mqtt", "+/b", "$SYS/b", 0, "system_topic", ()),
        ("mqtt", "#", "$SYS", 0, "system_topic", ()),
        ("nats", "a.>", "a", 1, "too_short", ()),
    ],
)
def test_failures(
    dialect: str, pattern: str, topic: str, position: int, reason: str, expected: tuple[str, ...]
) -> None:
    failure = explain(pattern, topic, dialect).failure
    assert failure is not None
    assert (failure.position, failure.reason, failure.expected) == (position, reason, expected)


def _reapply(dialect: str, pattern: str, e: Explanation) -> None:
    """Substituting each wildcard's words for it rebuilds the topic; literals agree."""
    grammar = get_dialect(dialect)
    written = pattern.split(grammar.separator) if pattern else []
    by_token = {c.token: c for c in e.captures}
    rebuilt: list[str] = []
    for index, word in enumerate(written):
        capture = by_token.get(index)
        if word in (grammar.one, grammar.many):
            assert capture is not None and capture.wildcard == word
            assert capture.start == len(rebuilt)
            if word == grammar.one:
                assert len(capture.words) == 1
            elif grammar.many_needs_one:
                assert capture.words  # NATS '>' takes at least one word
            rebuilt.extend(capture.words)
        else:
            assert capture is None
            rebuilt.append(word)
    assert tuple(rebuilt) == e.words


@st.composite
def _cases(draw: st.DrawFn) -> tuple[str, str, str]:
    dialect = draw(st.sampled_from(["amqp", "mqtt", "nats"]))
    return dialect, draw(PATTERNS[dialect]), draw(TOPICS[dialect])


@settings(max_examples=400, deadline=None)
@given(_cases())
def test_explained_iff_matched_and_reapplies(case: tuple[str, str, str]) -> None:
    dialect, pattern, topic = case
    e = explain(pattern, topic, dialect)
    assert e.matched is _naive(dialect, pattern, topic)
    if e.matched:
        assert e.failure is None
        _reapply(dialect, pattern, e)
    else:
        assert e.failure is not None and not e.captures


_FILLERS = {"amqp": ["a", "b", "", "zz"], "mqtt": ["a", "b", "", "zz"], "nats": ["a", "b", "zz"]}


@settings(max_examples=300, deadline=None)
@given(_cases(), st.data())
def test_failure_positions_are_sound(case: tuple[str, str, str], data: st.DataObject) -> None:
    """Before ``position`` the topic can still be completed into a match (an extension of
    its first ``position`` words matches); with word ``position`` itself, no topic matches,
    whatever follows (checked on random continuations)."""
    dialect, pattern, topic = case
    e = explain(pattern, topic, dialect)
    if e.matched:
        return
    failure = e.failure
    assert failure is not None
    grammar = get_dialect(dialect)
    tokens = grammar.parse_pattern(pattern)
    words = list(e.words)
    p = failure.position
    assert 0 <= p <= len(words)
    if failure.reason == "system_topic":
        assert words[0].startswith("$") and pattern[:1] in ("+", "#")
        return
    fillers = st.lists(st.sampled_from(_FILLERS[dialect]), max_size=4)
    if p < len(words):
        for _ in range(5):
            longer = [*words[: p + 1], *data.draw(fillers)]
            if longer != [""]:  # one empty word is no topic (AMQP's "" is zero words)
                assert not pattern_matches(tokens, _internal(grammar, longer))
    else:
        assert failure.reason == "too_short"
    # Some completion of the first p words matches, unless those words are one empty word:
    # AMQP's "" is zero words and MQTT's "" no topic, so that sequence is none to complete.
    if words[:p] == [""]:
        return
    assert _complete(dialect, pattern, words[:p]) is not None


def _complete(dialect: str, pattern: str, head: list[str]) -> list[str] | None:
    """Words of a topic starting with ``head`` that ``pattern`` matches, by trying, for every
    split of the pattern's words, ``head`` followed by the rest of the pattern instantiated
    (``#`` taking no word or one: MQTT ``/#`` needs one to make ``/``, not the empty topic).
    Checked with the matching rule on word lists, so no length limit gets in the way."""
    grammar = get_dialect(dialect)
    tokens = grammar.parse_pattern(pattern)
    written = pattern.split(grammar.separator) if pattern else []
    plain = "zz"
    for cut, many_takes in itertools.product(range(len(written) + 1), (0, 1)):
        rest: list[str] = []
        for word in written[cut:]:
            if word == grammar.one:
                rest.append(plain)
            elif word == grammar.many:
                rest.extend([plain] * max(many_takes, int(grammar.many_needs_one)))
            else:
                rest.append(word)
        for extra in ([], [plain]):
            words = [*head, *extra, *rest]
            if words == [""] or (not words and not grammar.empty_topic_allowed):
                continue  # no topic has these words
            if pattern_matches(tokens, _internal(grammar, words)):
                return words
    return None


def _internal(grammar: Dialect, words: list[str]) -> list[str]:
    """Topic words as the matching rule reads them (MQTT: after its ``$`` marker word)."""
    if grammar.mqtt_dollar_rule:
        return [MQTT_SYSTEM_MARK if words[0].startswith("$") else "", *words]
    return words
