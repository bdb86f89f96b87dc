"""Hypothesis strategies for topics and patterns of every dialect.

Small alphabets make collisions (and so matches) common; empty words, the empty topic,
``#`` anywhere and several ``#`` are all reachable, as are long topics.
"""

from __future__ import annotations

from hypothesis import strategies as st

from matcher.base import SUB_ID_LIMIT

# Ids near the edges the engines care about (roaring containers split at 2**16).
SUB_IDS = st.one_of(
    st.integers(0, 12),
    st.sampled_from([2**16 - 1, 2**16, 2**16 + 1, SUB_ID_LIMIT - 2, SUB_ID_LIMIT - 1]),
)

_AMQP_WORDS = st.sampled_from(["a", "b", "c", "", "é", "*x", "A"])
# AMQP keys may carry '*' and '#' as plain literal words.
_AMQP_TOPIC_WORDS = st.one_of(_AMQP_WORDS, st.sampled_from(["*", "#"]))
_AMQP_PATTERN_WORDS = st.one_of(_AMQP_WORDS, st.sampled_from(["*", "#", "#", "*"]))


def _joined(words: st.SearchStrategy[str], sep: str, max_size: int) -> st.SearchStrategy[str]:
    short = st.lists(words, max_size=max_size)
    long = st.lists(words, min_size=20, max_size=60)
    return st.one_of(short, short, short, long).map(sep.join)


AMQP_TOPICS = _joined(_AMQP_TOPIC_WORDS, ".", 6)
AMQP_PATTERNS = _joined(_AMQP_PATTERN_WORDS, ".", 6)

_MQTT_LEVELS = st.sampled_from(["a", "b", "", "$x", "é"])
MQTT_TOPICS = st.one_of(
    st.lists(_MQTT_LEVELS, min_size=1, max_size=6).map("/".join).filter(bool),
    st.lists(st.sampled_from(["a", "b", ""]), min_size=20, max_size=60).map("/".join),
)


@st.composite
def mqtt_filters(draw: st.DrawFn) -> str:
    levels = draw(st.lists(st.one_of(_MQTT_LEVELS, st.just("+")), max_size=5))
    if draw(st.booleans()) or not levels:
        levels.append("#")
    text = "/".join(levels)
    return text or "#"


MQTT_PATTERNS = mqtt_filters()

_NATS_TOKENS = st.sampled_from(["a", "b", "c", "a*", "b>"])
NATS_TOPICS = st.one_of(
    st.lists(_NATS_TOKENS, min_size=1, max_size=6).map(".".join),
    st.lists(st.sampled_from(["a", "b"]), min_size=20, max_size=60).map(".".join),
)


@st.composite
def nats_patterns(draw: st.DrawFn) -> str:
    tokens = draw(st.lists(st.one_of(_NATS_TOKENS, st.just("*")), max_size=5))
    if draw(st.booleans()) or not tokens:
        tokens.append(">")
    return ".".join(tokens)


NATS_PATTERNS = nats_patterns()

TOPICS = {"amqp": AMQP_TOPICS, "mqtt": MQTT_TOPICS, "nats": NATS_TOPICS}
PATTERNS = {"amqp": AMQP_PATTERNS, "mqtt": MQTT_PATTERNS, "nats": NATS_PATTERNS}
