"""Explicit, configurable bounds on every matcher input ("Take It to the Limit", the sequel
to "Fast Topic Matching")."""

from __future__ import annotations

from dataclasses import dataclass

#: AMQP 0-9-1 routing keys are shortstr: at most 255 bytes.
AMQP_SHORTSTR_BYTES = 255


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds checked once, where a topic or pattern enters a matcher.

    ``max_words`` defaults to 256 because a 255-byte key made only of dots has 256 (empty)
    words; with non-empty words 255 bytes hold at most 128. Keeping it at 256 means every key
    RabbitMQ accepts is accepted here, and the trie walk stays bounded by nodes x 257 steps.
    """

    max_topic_bytes: int = AMQP_SHORTSTR_BYTES
    max_pattern_bytes: int = AMQP_SHORTSTR_BYTES
    max_words: int = 256
    max_subscriptions: int = 10_000_000
    #: ``inverted_bitmap`` only: concrete topics kept compiled before the least recently used
    #: one is evicted (the OpenAMQ design's table grows with every new topic otherwise).
    max_compiled_topics: int = 65_536
    #: ``dfa`` only: states kept before the automaton is flushed and rebuilt lazily.
    max_dfa_states: int = 262_144
    #: ``dfa`` only: cached word transitions kept before the same flush (every distinct word
    #: seen in a state is cached, named by a pattern or not).
    max_dfa_transitions: int = 1_000_000

    def __post_init__(self) -> None:
        for name in (
            "max_topic_bytes",
            "max_pattern_bytes",
            "max_words",
            "max_subscriptions",
            "max_compiled_topics",
            "max_dfa_states",
            "max_dfa_transitions",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"Limits.{name} must be at least 1")


DEFAULT_LIMITS = Limits()
