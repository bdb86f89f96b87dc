"""The grammar: dialect parsing, the matching rule, canonical rewriting and the limits."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from matcher import (
    ENGINES,
    InvalidPatternError,
    InvalidTopicError,
    Limits,
    create_matcher,
    get_dialect,
)
from matcher.grammar import (
    AMQP,
    MANY,
    MQTT,
    NATS,
    ONE,
    Tokens,
    canonical,
    compile_predicate,
    pattern_matches,
)
from tests.matcher.strategies import AMQP_PATTERNS, AMQP_TOPICS, PATTERNS, TOPICS


@pytest.mark.parametrize(
    ("topic", "words"),
    [
        ("", []),
        (".", ["", ""]),
        ("a", ["a"]),
        ("a.", ["a", ""]),
        (".a", ["", "a"]),
        ("a..b", ["a", "", "b"]),
        ("a.*.#", ["a", "*", "#"]),  # AMQP keys may carry wildcard characters literally
        ("é.ü", ["é", "ü"]),
    ],
)
def test_amqp_split(topic: str, words: list[str]) -> None:
    assert AMQP.split_topic(topic) == words
    assert AMQP.topic_splitter()(topic) == words


@pytest.mark.parametrize(
    ("pattern", "tokens"),
    [
        ("", ()),
        ("#", (MANY,)),
        ("*", (ONE,)),
        ("a.*.#", ("a", ONE, MANY)),
        ("a*.#b", ("a*", "#b")),  # wildcards only as whole words
        ("..", ("", "", "")),
    ],
)
def test_amqp_parse_pattern(pattern: str, tokens: Tokens) -> None:
    assert AMQP.parse_pattern(pattern) == tokens


def test_mqtt_dollar_rule_and_parent_match() -> None:
    def matches(pattern: str, topic: str) -> bool:
        return pattern_matches(MQTT.parse_pattern(pattern), MQTT.split_topic(topic))

    assert matches("a/#", "a")  # '#' also matches the parent level
    assert matches("a/#", "a/b/c")
    assert matches("a/+", "a/")
    assert not matches("a/+", "a")
    assert matches("+/+", "/")
    assert not matches("#", "$SYS/x")  # wildcard-first filters skip '$' topics
    assert not matches("+/x", "$SYS/x")
    assert matches("$SYS/#", "$SYS/x")
    assert matches("$SYS/+", "$SYS/x")
    assert matches("a/$b", "a/$b")
    assert matches("#", "a/$b")


def test_nats_full_wildcard_needs_one_token() -> None:
    def matches(pattern: str, topic: str) -> bool:
        return pattern_matches(NATS.parse_pattern(pattern), NATS.split_topic(topic))

    assert matches("a.>", "a.b")
    assert matches("a.>", "a.b.c")
    assert not matches("a.>", "a")
    assert matches(">", "a")
    assert matches("a.*", "a.b")
    assert not matches("a.*", "a.b.c")
    assert matches("a*.b", "a*.b")  # partial wildcard is a literal token


@pytest.mark.parametrize(
    ("dialect", "pattern", "code"),
    [
        ("mqtt", "a/#/b", "invalid_wildcard"),
        ("mqtt", "a+", "invalid_wildcard"),
        ("mqtt", "+a", "invalid_wildcard"),
        ("mqtt", "a/b#", "invalid_wildcard"),
        ("mqtt", "", "empty_pattern"),
        ("nats", "a.>.b", "invalid_wildcard"),
        ("nats", "a..b", "empty_word"),
        ("nats", ".a", "empty_word"),
        ("nats", "", "empty_pattern"),
        ("nats", "a b", "whitespace"),
        ("amqp", "a\x00b", "nul_byte"),
        ("amqp", "a\ud800", "lone_surrogate"),
        ("amqp", "x" * 256, "pattern_too_long"),
        ("amqp", "é" * 128, "pattern_too_long"),  # 256 UTF-8 bytes, 128 characters
        ("amqp", 42, "not_text"),
        ("amqp", b"\xff", "invalid_utf8"),
    ],
)
def test_invalid_patterns(dialect: str, pattern: object, code: str) -> None:
    with pytest.raises(InvalidPatternError) as info:
        get_dialect(dialect).parse_pattern(pattern)  # type: ignore[arg-type]
    assert info.value.code == code
    assert info.value.message


@pytest.mark.parametrize(
    ("dialect", "topic", "code"),
    [
        ("mqtt", "", "empty_topic"),
        ("mqtt", "a/+", "wildcard_in_topic"),
        ("mqtt", "a/b#", "wildcard_in_topic"),
        ("nats", "a.*", "wildcard_in_topic"),
        ("nats", "a.>", "wildcard_in_topic"),
        ("nats", "a..b", "empty_word"),
        ("nats", "a\tb", "whitespace"),
        ("amqp", "a\x00", "nul_byte"),
        ("amqp", "\udfff", "lone_surrogate"),
        ("amqp", "y" * 256, "topic_too_long"),
        ("amqp", b"a.\xc3", "invalid_utf8"),
        ("amqp", None, "not_text"),
    ],
)
def test_invalid_topics(dialect: str, topic: object, code: str) -> None:
    d = get_dialect(dialect)
    for split in (d.split_topic, d.topic_splitter()):
        with pytest.raises(InvalidTopicError) as info:
            split(topic)  # type: ignore[arg-type]
        assert info.value.code == code


def test_limits_are_configurable_and_exact() -> None:
    limits = Limits(max_topic_bytes=10, max_pattern_bytes=5, max_words=3)
    assert AMQP.split_topic("a" * 10, limits) == ["a" * 10]
    with pytest.raises(InvalidTopicError, match="limit is 10"):
        AMQP.split_topic("a" * 11, limits)
    with pytest.raises(InvalidTopicError) as info:
        AMQP.topic_splitter(limits)("a.b.c.d")
    assert info.value.code == "too_many_words"
    assert AMQP.topic_splitter(limits)("a.b.c") == ["a", "b", "c"]
    with pytest.raises(InvalidPatternError) as pinfo:
        AMQP.parse_pattern("a.b.c.d", Limits(max_words=3))
    assert pinfo.value.code == "too_many_words"
    with pytest.raises(ValueError, match="max_words"):
        Limits(max_words=0)


@pytest.mark.parametrize(
    ("pattern", "count"),
    [
        ("#.#.#", 3),
        ("a.#.b.#.c.#", 3),
        ("#.#.#.", 3),  # the empty last word is a word, not a '#'
        ("#.#.#.#", 4),
        ("#.#", None),
        ("a#.#.#", None),  # '#' inside a word is a literal: two '#' words
        ("##.#.#", None),
        ("", None),
    ],
)
def test_the_hash_wildcard_limit_counts_whole_words(pattern: str, count: int | None) -> None:
    limits = Limits(max_hash_wildcards=2)
    if count is None:
        AMQP.check_hash_wildcards(pattern, limits)
        return
    with pytest.raises(InvalidPatternError) as info:
        AMQP.check_hash_wildcards(pattern, limits)
    assert info.value.code == "too_many_hash_wildcards"
    # RabbitMQ 4.3.5's words (rabbit_exchange_type_topic:validate_binding/2).
    assert info.value.message == (
        f"Topic binding key '{pattern}' uses {count} '#' wildcards, at most 2 are allowed"
    )


def test_the_hash_wildcard_limit_is_off_by_default_and_never_in_the_engines() -> None:
    many = ".".join(["#"] * 40)
    AMQP.check_hash_wildcards(many, Limits())
    # The engines take any number whatever the limit says: stored rows still load.
    for engine in ENGINES:
        matcher = create_matcher(engine, limits=Limits(max_hash_wildcards=1))
        matcher.subscribe(7, many)
        matcher.subscribe_many([(8, "a.#.b.#.#")])
        assert sorted(matcher.match("a.b")) == [7, 8], engine
        assert matcher.unsubscribe(7) and matcher.unsubscribe(8)
    # MQTT's and NATS's one multi-word wildcard is within any limit the setting allows.
    MQTT.check_hash_wildcards("a/#", Limits(max_hash_wildcards=1))
    NATS.check_hash_wildcards("a.>", Limits(max_hash_wildcards=1))
    with pytest.raises(ValueError, match="max_hash_wildcards"):
        Limits(max_hash_wildcards=0)


def test_default_limits_accept_every_shortstr_key() -> None:
    # 255 dots: the largest key RabbitMQ routes, 256 empty words.
    assert len(AMQP.split_topic("." * 255)) == 256
    assert len(AMQP.topic_splitter()("." * 255)) == 256


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        ((MANY, MANY), (MANY,)),
        ((MANY, ONE, MANY), (ONE, MANY)),
        (("a", MANY, ONE, "b"), ("a", ONE, MANY, "b")),
        ((ONE, ONE), (ONE, ONE)),
        ((MANY, "a", MANY, MANY), (MANY, "a", MANY)),
    ],
)
def test_canonical_examples(tokens: Tokens, expected: Tokens) -> None:
    assert canonical(tokens) == expected


@given(AMQP_PATTERNS, AMQP_TOPICS)
def test_canonical_and_predicate_agree_with_the_rule(pattern: str, topic: str) -> None:
    tokens = AMQP.parse_pattern(pattern)
    words = AMQP.split_topic(topic)
    expected = pattern_matches(tokens, words)
    assert pattern_matches(canonical(tokens), words) == expected
    assert compile_predicate(canonical(tokens))(words) == expected
    assert canonical(canonical(tokens)) == canonical(tokens)


@pytest.mark.parametrize("dialect", ["amqp", "mqtt", "nats"])
@given(data=st.data())
def test_generated_input_is_valid(dialect: str, data: st.DataObject) -> None:
    d = get_dialect(dialect)
    d.parse_pattern(data.draw(PATTERNS[dialect]))
    d.split_topic(data.draw(TOPICS[dialect]))


def _brute_force(tokens: Tokens, words: list[str]) -> bool:
    """Backtracking definition, independent of the table in ``pattern_matches``."""
    if not tokens:
        return not words
    head, rest = tokens[0], tokens[1:]
    if head is MANY:
        return any(_brute_force(rest, words[k:]) for k in range(len(words) + 1))
    if not words:
        return False
    return (head is ONE or head == words[0]) and _brute_force(rest, words[1:])


@given(AMQP_PATTERNS, st.lists(st.sampled_from(["a", "b", ""]), max_size=7))
def test_rule_equals_backtracking_definition(pattern: str, words: list[str]) -> None:
    tokens = AMQP.parse_pattern(pattern)
    if sum(t is MANY for t in tokens) <= 3:
        assert pattern_matches(tokens, words) == _brute_force(tokens, words)
