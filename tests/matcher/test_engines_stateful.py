"""Every engine against ``naive`` under random subscribe/unsubscribe/match sequences,
for every dialect (a hypothesis state machine, as pyroaring's own tests pair the fast
structure with a plain reference)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from matcher import ENGINES, Limits, Matcher, SubscriptionConflictError, create_matcher
from matcher._native import NativeMatcher
from tests.matcher.strategies import PATTERNS, SUB_IDS, TOPICS

FAST_ENGINES = [name for name in ENGINES if name != "naive"]


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

        @rule(batch=st.lists(topics, max_size=5))
        def match_ids(self, batch: list[str]) -> None:
            """``native``'s batch answer: per topic, naive's ids in ascending order."""
            expected = [sorted(self.naive.match(topic)) for topic in batch]
            for name, m in self.engines.items():
                if not isinstance(m, NativeMatcher):
                    continue
                counts, ids, errors = m.match_ids(batch)
                assert not errors
                got, at = [], 0
                for count in counts:
                    got.append(list(ids[at : at + count]))
                    at += count
                assert (got, at) == (expected, len(ids)), (name, batch, self.model)

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
