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
    #: New subscriptions only: the most multi-word wildcard words (``#``) a pattern may hold
    #: (None: any number; 2 is RabbitMQ 4.3.5's rule for topic bindings). Checked where a
    #: subscription is written (``Dialect.check_hash_wildcards``, called by the store's
    #: validation), never by the engines: they stay polynomial with any number, and rows
    #: stored before the limit was set must still load, match and be removable. At least 1,
    #: so MQTT's ``#`` and NATS's ``>`` (one, last) stay valid: only AMQP patterns exceed it.
    max_hash_wildcards: int | None = None

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
        if self.max_hash_wildcards is not None and self.max_hash_wildcards < 1:
            raise ValueError("Limits.max_hash_wildcards must be at least 1 (or None)")


DEFAULT_LIMITS = Limits()
