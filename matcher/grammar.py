"""The one owner of topic and pattern syntax: dialects, validation and the matching rule.

Every dialect parses into one internal form, so every engine serves every dialect:

* a topic is a list of words (``str``);
* a pattern is a tuple of tokens: a literal word (``str``), ``ONE`` (exactly one word, which
  may be empty) or ``MANY`` (zero or more words).

AMQP 0-9-1 (the default) follows RabbitMQ's topic exchange to the byte: split on every ``.``
keeping empty words, except that ``""`` is zero words; ``*`` and ``#`` are wildcards only as
whole words. MQTT's rule that a filter starting with a wildcard never matches a topic starting
with ``$`` (MQTT 3.1.1 section 4.7.2) is expressed in the same form by a leading marker word,
so the engines need no dialect logic at all.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias

from matcher.errors import InvalidPatternError, InvalidTopicError, MatcherError
from matcher.limits import DEFAULT_LIMITS, Limits


class Wildcard:
    """A wildcard token. Two instances exist, ``ONE`` and ``MANY``; compare with ``is``."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name

    def __reduce__(self) -> str:
        # Pickled tokens (Spark broadcasts) must come back as the same singletons.
        return self.name


ONE: Final = Wildcard("ONE")
MANY: Final = Wildcard("MANY")

Token: TypeAlias = str | Wildcard
Tokens: TypeAlias = tuple[Token, ...]
TopicSplitter: TypeAlias = Callable[[str], list[str]]

# MQTT: first word of every internal topic; filters that start with a wildcard get the
# ordinary mark as first token, filters that start with a literal get ONE.
MQTT_ORDINARY_MARK: Final = ""
MQTT_SYSTEM_MARK: Final = "$"

_WHITESPACE: Final = frozenset(" \t\r\n\f\v")


def pattern_matches(tokens: Sequence[Token], words: Sequence[str]) -> bool:
    """The matching rule, as an executable specification. O(len(tokens) x len(words)).

    ``reach[j]`` is true when the tokens seen so far can consume exactly ``words[:j]``;
    ``MANY`` extends reachability to every later position (prefix OR), so several ``#`` never
    cost more than one pass each, unlike backtracking.
    """
    n = len(words)
    reach = [True] + [False] * n
    for token in tokens:
        if token is MANY:
            seen = False
            for j in range(n + 1):
                seen = seen or reach[j]
                reach[j] = seen
        elif token is ONE:
            reach = [False, *reach[:n]]
        else:
            reach = [False] + [reach[j] and words[j] == token for j in range(n)]
    return reach[n]


def canonical(tokens: Tokens) -> Tokens:
    """An equivalent pattern that is cheaper to index: adjacent ``#`` merge and, inside a run
    of wildcards that holds a ``#``, every ``*`` moves in front of it (``#.*.#`` -> ``*.#``).

    Both rewrites keep the set of matched topics: a run of k ``*`` and at least one ``#``
    matches exactly the sequences of k or more words, whatever the order.
    """
    if MANY not in tokens:
        return tokens  # nothing to merge or reorder (the common case)
    out: list[Token] = []
    i, n = 0, len(tokens)
    while i < n:
        token = tokens[i]
        if isinstance(token, str):
            out.append(token)
            i += 1
            continue
        ones, has_many = 0, False
        while i < n and not isinstance(tokens[i], str):
            if tokens[i] is MANY:
                has_many = True
            else:
                ones += 1
            i += 1
        out.extend([ONE] * ones)
        if has_many:
            out.append(MANY)
    return tuple(out)


#: Whitespace as ``str.isspace`` sees it: Python's ``\s`` on text is the same test.
_UNICODE_WHITESPACE: Final = re.compile(r"\s")


def unseen_character(text: str) -> tuple[str, str] | None:
    """The rule names (subscribers, groups) follow besides the byte and control rules:
    (code, what it found) for the first character of ``text`` that is whitespace
    (``str.isspace``: U+0020, tab, U+00A0, U+0085, U+2028, U+3000, ...;
    ``whitespace_character``) or a format character (Unicode category Cf: the
    bidirectional overrides and isolates U+202A-202E and U+2066-2069, U+200B-200F,
    U+FEFF, ...; ``format_character``), else None. Either makes a name look like another:
    ``\\u202egnp.exe`` prints as "exe.png", ``w\\u00a01`` as ``w 1``, ``w\\u200b1`` as ``w1``.
    One pass in C for whitespace; a name with non-ASCII text is also read per character."""
    found = _UNICODE_WHITESPACE.search(text)
    if found is not None:
        return "whitespace_character", f"the whitespace character U+{ord(found.group()):04X}"
    if not text.isascii():
        for c in text:
            if unicodedata.category(c) == "Cf":
                return "format_character", f"the format character U+{ord(c):04X}"
    return None


def unseen_characters_class() -> str:
    """The characters ``unseen_character`` refuses in the Basic Multilingual Plane, as the
    body of a regular expression class of ``\\uXXXX`` escapes that ``re`` and JSON Schema
    (ECMA-262) both read (the few format characters past U+FFFF, e.g. the tag characters
    U+E0001-E007F, cannot be written so without the ``u`` flag). O(65,536): for the OpenAPI
    document, not a request."""
    ranges: list[list[int]] = []
    for code in range(0x10000):
        c = chr(code)
        if c.isspace() or unicodedata.category(c) == "Cf":
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1][1] = code
            else:
                ranges.append([code, code])
    return "".join(f"\\u{a:04x}" if a == b else f"\\u{a:04x}-\\u{b:04x}" for a, b in ranges)


def _error(kind: str, code: str, message: str) -> MatcherError:
    cls = InvalidTopicError if kind == "topic" else InvalidPatternError
    return cls(code, message)


def checked_text(value: object, kind: str, max_bytes: int) -> str:
    """``value`` as text, or the error that names the broken rule.

    Rules: text (or bytes that are strict UTF-8), no lone surrogates, no NUL, at most
    ``max_bytes`` UTF-8 bytes. Byte-exact: no Unicode normalization.
    """
    if isinstance(value, bytes | bytearray):
        try:
            text = bytes(value).decode("utf-8", errors="strict")
        except UnicodeDecodeError as e:
            raise _error(kind, "invalid_utf8", f"{kind} is not valid UTF-8: {e.reason}") from e
    elif isinstance(value, str):
        text = value
    else:
        raise _error(kind, "not_text", f"{kind} must be a string, not {type(value).__name__}")
    if text.isascii():
        size = len(text)
    else:
        try:
            size = len(text.encode("utf-8", errors="strict"))
        except UnicodeEncodeError as e:
            raise _error(
                kind, "lone_surrogate", f"{kind} contains a lone surrogate (not valid Unicode)"
            ) from e
    if "\x00" in text:
        raise _error(kind, "nul_byte", f"{kind} contains a NUL character")
    if size > max_bytes:
        raise _error(
            kind, f"{kind}_too_long", f"{kind} is {size} UTF-8 bytes; the limit is {max_bytes}"
        )
    return text


def _check_word_count(kind: str, count: int, max_words: int) -> None:
    if count > max_words:
        raise _error(kind, "too_many_words", f"{kind} has {count} words; the limit is {max_words}")


@dataclass(frozen=True, slots=True)
class Dialect:
    """Syntax of one protocol family, parsed into the shared token form."""

    name: str
    separator: str
    one: str
    many: str
    #: True when ``many`` may only stand as the last word (MQTT ``#``, NATS ``>``).
    many_last_only: bool
    #: True when ``many`` means one-or-more (NATS ``>``) rather than zero-or-more.
    many_needs_one: bool
    empty_words_allowed: bool
    empty_topic_allowed: bool
    #: A topic word equal to a wildcard is a plain literal (AMQP keys), not an error.
    wildcard_words_in_topics: bool
    #: Wildcard characters inside a longer word are literal (AMQP, NATS), not an error (MQTT).
    wildcard_chars_in_words: bool
    #: NATS: subjects and patterns may not contain whitespace.
    whitespace_forbidden: bool
    mqtt_dollar_rule: bool

    def split_topic(self, topic: str, limits: Limits = DEFAULT_LIMITS) -> list[str]:
        """Validated words of ``topic``; the slow, general path (see ``topic_splitter``)."""
        text = checked_text(topic, "topic", limits.max_topic_bytes)
        if not text:
            if not self.empty_topic_allowed:
                raise InvalidTopicError(
                    "empty_topic", f"an empty topic is not valid in {self.name}"
                )
            return [MQTT_ORDINARY_MARK] if self.mqtt_dollar_rule else []
        words = text.split(self.separator)
        _check_word_count("topic", len(words), limits.max_words)
        if not self.empty_words_allowed and "" in words:
            raise InvalidTopicError(
                "empty_word", f"{self.name} topics may not have empty words ({text!r})"
            )
        if not self.wildcard_words_in_topics:
            for word in words:
                if word in (self.one, self.many) or (
                    not self.wildcard_chars_in_words and (self.one in word or self.many in word)
                ):
                    raise InvalidTopicError(
                        "wildcard_in_topic",
                        f"{self.name} topics may not contain the wildcards "
                        f"{self.one!r} or {self.many!r}",
                    )
        if self.whitespace_forbidden and any(c in _WHITESPACE for c in text):
            raise InvalidTopicError("whitespace", f"{self.name} topics may not contain whitespace")
        if self.mqtt_dollar_rule:
            mark = MQTT_SYSTEM_MARK if text.startswith("$") else MQTT_ORDINARY_MARK
            return [mark, *words]
        return words

    def parse_pattern(self, pattern: str, limits: Limits = DEFAULT_LIMITS) -> Tokens:
        """Tokens of ``pattern`` as written (not canonical; see ``canonical``)."""
        return self.tokens_of(checked_text(pattern, "pattern", limits.max_pattern_bytes), limits)

    def tokens_of(self, text: str, limits: Limits = DEFAULT_LIMITS) -> Tokens:
        """Tokens of pattern ``text`` that already passed ``checked_text`` (bulk loads check
        once, not twice)."""
        if not text:
            if not self.empty_topic_allowed:
                raise InvalidPatternError(
                    "empty_pattern", f"an empty pattern is not valid in {self.name}"
                )
            return ()
        words = text.split(self.separator)
        _check_word_count("pattern", len(words), limits.max_words)
        if self is AMQP:
            # Every word is valid in AMQP: only the two wildcards need translating.
            wildcards = _AMQP_WILDCARDS
            return tuple([wildcards.get(word, word) for word in words])
        tokens: list[Token] = []
        last = len(words) - 1
        for i, word in enumerate(words):
            if word == self.one:
                tokens.append(ONE)
            elif word == self.many:
                if self.many_last_only and i != last:
                    raise InvalidPatternError(
                        "invalid_wildcard",
                        f"{self.name}: {self.many!r} may only be the last word of a pattern",
                    )
                if self.many_needs_one:
                    tokens.append(ONE)
                tokens.append(MANY)
            else:
                if not word and not self.empty_words_allowed:
                    raise InvalidPatternError(
                        "empty_word", f"{self.name} patterns may not have empty words ({text!r})"
                    )
                if not self.wildcard_chars_in_words and (self.one in word or self.many in word):
                    raise InvalidPatternError(
                        "invalid_wildcard",
                        f"{self.name}: {self.one!r} and {self.many!r} must stand as whole words",
                    )
                if self.whitespace_forbidden and any(c in _WHITESPACE for c in word):
                    raise InvalidPatternError(
                        "whitespace", f"{self.name} patterns may not contain whitespace"
                    )
                tokens.append(word)
        if self.mqtt_dollar_rule:
            first = tokens[0]
            tokens.insert(0, ONE if isinstance(first, str) else MQTT_ORDINARY_MARK)
        return tuple(tokens)

    def check_hash_wildcards(self, text: str, limits: Limits) -> None:
        """Refuse a new pattern with more multi-word wildcard words than
        ``limits.max_hash_wildcards`` (None: no limit). RabbitMQ 4.3.5's rule for topic
        binding keys (``rabbit_exchange_type_topic:validate_binding/2``, ``MAX_HASH_WILDCARDS``),
        with its message: only whole words count (``a#`` is a literal). O(len(text)).

        A rule for writes, not part of the grammar: the engines never call it, so a stored
        pattern over the limit still loads, matches and can be removed (as RabbitMQ keeps
        bindings made before the limit)."""
        limit = limits.max_hash_wildcards
        if limit is None or text.count(self.many) <= limit:
            return
        count = text.split(self.separator).count(self.many)
        if count > limit:
            raise InvalidPatternError(
                "too_many_hash_wildcards",
                f"Topic binding key '{text}' uses {count} '{self.many}' wildcards, "
                f"at most {limit} are allowed",
            )

    def topic_splitter(self, limits: Limits = DEFAULT_LIMITS) -> TopicSplitter:
        """A fast ``split_topic`` for the match hot path.

        Plain ASCII AMQP keys that are obviously within the limits are split directly (O(1)
        ``isascii``, one ``memchr`` for NUL); everything else takes the general path, so the
        rules stay in one place.
        """
        general = self.split_topic
        if self.name != "amqp":
            return lambda topic: general(topic, limits)
        # With fewer characters than max_words, the word count cannot exceed the limit.
        fast_len = min(limits.max_topic_bytes, limits.max_words - 1)

        def split_amqp(topic: str) -> list[str]:
            if (
                type(topic) is str
                and topic
                and topic.isascii()
                and len(topic) <= fast_len
                and "\x00" not in topic
            ):
                return topic.split(".")
            return general(topic, limits)

        return split_amqp


AMQP: Final = Dialect(
    name="amqp",
    separator=".",
    one="*",
    many="#",
    many_last_only=False,
    many_needs_one=False,
    empty_words_allowed=True,
    empty_topic_allowed=True,
    wildcard_words_in_topics=True,
    wildcard_chars_in_words=True,
    whitespace_forbidden=False,
    mqtt_dollar_rule=False,
)
MQTT: Final = Dialect(
    name="mqtt",
    separator="/",
    one="+",
    many="#",
    many_last_only=True,
    many_needs_one=False,
    empty_words_allowed=True,
    empty_topic_allowed=False,
    wildcard_words_in_topics=False,
    wildcard_chars_in_words=False,
    whitespace_forbidden=False,
    mqtt_dollar_rule=True,
)
NATS: Final = Dialect(
    name="nats",
    separator=".",
    one="*",
    many=">",
    many_last_only=True,
    many_needs_one=True,
    empty_words_allowed=False,
    empty_topic_allowed=False,
    wildcard_words_in_topics=False,
    wildcard_chars_in_words=True,
    whitespace_forbidden=True,
    mqtt_dollar_rule=False,
)

_AMQP_WILDCARDS: Final[dict[str, Token]] = {"*": ONE, "#": MANY}

DIALECTS: Final[dict[str, Dialect]] = {d.name: d for d in (AMQP, MQTT, NATS)}


def get_dialect(name: str) -> Dialect:
    """The dialect called ``name``; ``ValueError`` naming the known ones otherwise."""
    try:
        return DIALECTS[name]
    except KeyError:
        raise ValueError(f"unknown dialect {name!r}; known: {', '.join(DIALECTS)}") from None


def compile_predicate(tokens: Tokens) -> Callable[[Sequence[str]], bool]:
    """A test equivalent to ``pattern_matches(tokens, words)``, faster for ``#``-free patterns
    (length check and one pass, no table)."""
    if any(token is MANY for token in tokens):
        return lambda words: pattern_matches(tokens, words)
    size = len(tokens)

    def fixed_length(words: Sequence[str]) -> bool:
        if len(words) != size:
            return False
        for token, word in zip(tokens, words, strict=True):
            if token is not ONE and token != word:
                return False
        return True

    return fixed_length
