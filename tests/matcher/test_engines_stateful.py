"""Every engine against ``naive`` under random subscribe/unsubscribe/match sequences,
for every dialect (a hypothesis state machine, as pyroaring's own tests pair the fast
structure with a plain reference)."""

from __future__ import annotations

from array import array
from functools import partial

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from matcher import (
    ENGINES,
    BatchIds,
    Limits,
    Matcher,
    MatcherError,
    SubscriptionConflictError,
    create_matcher,
)
from tests.matcher.strategies import PATTERNS, SUB_IDS, TOPICS

FAST_ENGINES = [name for name in ENGINES if name != "naive"]
#: An engine read and written through the base class's defaults of the calls ``native``
#: overrides (``match_ids``, ``subscribe_arrays``), to hold the two to the same answers.
BASE = "native/base"


def _columns(items: list[tuple[int, str]]) -> tuple[array[int], array[int], bytes]:
    """``subscribe_arrays``' arguments for ``items``: int64 ids, int32 offsets, UTF-8."""
    encoded = [pattern.encode() for _, pattern in items]
    offsets = array("i", [0])
    for text in encoded:
        offsets.append(offsets[-1] + len(text))
    return array("q", [sub_id for sub_id, _ in items]), offsets, b"".join(encoded)


def _per_topic(found: BatchIds) -> tuple[list[list[int] | str], int]:
    """``match_ids``' arrays as one list of ids (or an error code) per topic, and the ids
    left over (0 when the counts add up)."""
    counts, ids, errors = found
    out: list[list[int] | str] = []
    at = 0
    for k, count in enumerate(counts):
        if k in errors:
            assert count == 0
            out.append(errors[k].code)
            continue
        out.append(list(ids[at : at + count]))
        at += count
    return out, len(ids) - at


def _machine(dialect: str) -> type[RuleBasedStateMachine]:
    topics, patterns = TOPICS[dialect], PATTERNS[dialect]

    class EnginesAgree(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.model: dict[int, str] = {}
            self.naive = create_matcher("naive", dialect=dialect)
            self.engines: dict[str, Matcher] = {
                name: create_matcher(name, dialect=dialect) for name in FAST_ENGINES
            }
            # Tiny bounds make eviction and flushing happen all the time.
            tiny = Limits(max_compiled_topics=3, max_dfa_states=4)
            for name in ("inverted_bitmap", "dfa"):
                self.engines[f"{name}/tiny"] = create_matcher(name, dialect=dialect, limits=tiny)
            for name in ("trie", "native", "dfa", "optimized_inverted_bitmap"):
                self.engines[f"{name}/cached"] = create_matcher(name, dialect=dialect, cache_size=4)
            self.engines[BASE] = create_matcher("native", dialect=dialect)

        @rule(sub_id=SUB_IDS, pattern=patterns)
        def subscribe(self, sub_id: int, pattern: str) -> None:
            existing = self.model.get(sub_id)
            for m in (self.naive, *self.engines.values()):
                if existing is not None and existing != pattern:
                    with pytest.raises(SubscriptionConflictError):
                        m.subscribe(sub_id, pattern)
                else:
                    m.subscribe(sub_id, pattern)
            self.model.setdefault(sub_id, pattern)

        @rule(batch=st.lists(st.tuples(SUB_IDS, patterns), max_size=6))
        def subscribe_many(self, batch: list[tuple[int, str]]) -> None:
            merged = dict(self.model)
            conflict = False
            for sub_id, pattern in batch:
                if merged.setdefault(sub_id, pattern) != pattern:
                    conflict = True
            for m in (self.naive, *self.engines.values()):
                if conflict:  # all or nothing
                    with pytest.raises(SubscriptionConflictError):
                        m.subscribe_many(batch)
                else:
                    assert m.subscribe_many(batch) == len(merged) - len(self.model)
            if not conflict:
                self.model = merged

        @precondition(lambda self: bool(self.model))
        @rule(data=st.data())
        def resubscribe_is_noop(self, data: st.DataObject) -> None:
            sub_id = data.draw(st.sampled_from(sorted(self.model)))
            for m in (self.naive, *self.engines.values()):
                m.subscribe(sub_id, self.model[sub_id])

        @rule(sub_id=SUB_IDS)
        def unsubscribe(self, sub_id: int) -> None:
            expected = self.model.pop(sub_id, None) is not None
            for m in (self.naive, *self.engines.values()):
                assert m.unsubscribe(sub_id) is expected

        @rule(topic=topics)
        def match(self, topic: str) -> None:
            expected = set(self.naive.match(topic))
            for name, m in self.engines.items():
                got = m.match(topic)
                assert set(got) == expected, (name, topic, self.model)
                assert len(got) == len(expected), (name, topic)  # distinct ids

        @rule(batch=st.lists(st.tuples(SUB_IDS, patterns), max_size=6))
        def subscribe_arrays(self, batch: list[tuple[int, str]]) -> None:
            """The bulk build from an Arrow column's buffers: ``subscribe_many``'s rules."""
            merged = dict(self.model)
            conflict = False
            for sub_id, pattern in batch:
                if merged.setdefault(sub_id, pattern) != pattern:
                    conflict = True
            for name, m in {"naive": self.naive, **self.engines}.items():
                write = partial(Matcher.subscribe_arrays, m) if name == BASE else m.subscribe_arrays
                if conflict:  # all or nothing
                    with pytest.raises(SubscriptionConflictError):
                        write(*_columns(batch))
                else:
                    assert write(*_columns(batch)) == len(merged) - len(self.model), name
            if not conflict:
                self.model = merged

        @rule(batch=st.lists(st.one_of(topics, st.sampled_from(["a\x00b", "x" * 300])), max_size=5))
        def match_ids(self, batch: list[str]) -> None:
            """The batch answer in arrays: per topic, naive's ids in ascending order, or the
            error ``match`` raises; the base class's default gives ``native``'s answer."""
            expected: list[list[int] | str] = []
            for topic in batch:
                try:
                    expected.append(sorted(self.naive.match(topic)))
                except MatcherError as e:
                    expected.append(e.code)
            for name, m in {"naive": self.naive, **self.engines}.items():
                found = Matcher.match_ids(m, batch) if name == BASE else m.match_ids(batch)
                assert _per_topic(found) == (expected, 0), (name, batch, self.model)

        @invariant()
        def sizes_and_structure(self) -> None:
            for m in (self.naive, *self.engines.values()):
                assert len(m) == len(self.model)
                m._check()

    EnginesAgree.__name__ = f"EnginesAgree_{dialect}"
    return EnginesAgree


pytestmark = pytest.mark.slow

_SETTINGS = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

TestAmqpEngines = _machine("amqp").TestCase
TestAmqpEngines.settings = _SETTINGS
TestMqttEngines = _machine("mqtt").TestCase
TestMqttEngines.settings = _SETTINGS
TestNatsEngines = _machine("nats").TestCase
TestNatsEngines.settings = _SETTINGS
