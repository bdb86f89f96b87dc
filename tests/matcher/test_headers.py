"""The headers engine against a plain scan, plus the worked example of OpenAMQ's
"Field Matching"."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from matcher import HeaderLimits, HeadersMatcher, InvalidHeadersError, SubscriptionConflictError
from matcher.headers import Criterion, Mode


def _satisfies(criteria: frozenset[Criterion], mode: Mode, headers: Mapping[str, str]) -> bool:
    def holds(criterion: Criterion) -> bool:
        field, value = criterion
        return field in headers and (value is None or headers[field] == value)

    results = [holds(c) for c in criteria]
    return all(results) if mode == "all" else any(results)


def test_seed_002_field_matching_example() -> None:
    m = HeadersMatcher()
    m.subscribe(0, [("currency", "USD"), ("urgent", None)], "all")
    m.subscribe(1, [("currency", "EUR")], "all")
    m.subscribe(2, [("market", "forex"), ("currency", "EUR")], "all")
    m.subscribe(3, [("urgent", None)], "all")
    assert set(m.match({"currency": "JPY", "market": "forex", "slow": ""})) == set()
    assert set(m.match({"currency": "JPY", "urgent": ""})) == {3}
    assert set(m.match({"market": "forex", "currency": "EUR"})) == {1, 2}
    m.subscribe(4, {"market": "forex", "currency": "USD"}, "any")
    assert set(m.match({"currency": "JPY", "market": "forex", "slow": ""})) == {4}


def test_rules_and_limits() -> None:
    m = HeadersMatcher(HeaderLimits(max_criteria=2, max_fields=2))
    m.subscribe(1, {"a": "1"})
    m.subscribe(1, [("a", "1")])  # same criteria: no-op
    with pytest.raises(SubscriptionConflictError):
        m.subscribe(1, {"a": "2"})
    bad: list[tuple[object, object, str]] = [
        ({}, "all", "no_criteria"),
        ({"a": "1", "b": "2", "c": "3"}, "all", "too_many_criteria"),
        ({"a": "1"}, "some", "invalid_mode"),
        ([("a",)], "all", "invalid_criterion"),
        ({"a\x00": "1"}, "all", "nul_byte"),
        ({"a": 5}, "all", "not_text"),
    ]
    for criteria, mode, code in bad:
        with pytest.raises(InvalidHeadersError) as info:
            m.subscribe(2, criteria, mode)  # type: ignore[arg-type]
        assert info.value.code == code, (criteria, mode)
    with pytest.raises(InvalidHeadersError) as info:
        m.match({"a": "1", "b": "2", "c": "3"})
    assert info.value.code == "too_many_fields"
    assert len(m) == 1
    assert m.unsubscribe(1) and not m.unsubscribe(1)


_FIELDS = st.sampled_from(["a", "b", "c"])
_VALUES = st.sampled_from(["1", "2", ""])
_CRITERIA = st.lists(st.tuples(_FIELDS, st.one_of(st.none(), _VALUES)), min_size=1, max_size=4)
_HEADERS = st.dictionaries(_FIELDS, _VALUES, max_size=3)


class HeadersAgree(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.model: dict[int, tuple[frozenset[Criterion], Mode]] = {}
        self.m = HeadersMatcher()

    @rule(sub_id=st.integers(0, 8), criteria=_CRITERIA, mode=st.sampled_from(["all", "any"]))
    def subscribe(self, sub_id: int, criteria: list[Criterion], mode: Mode) -> None:
        wanted = (frozenset(criteria), mode)
        if sub_id in self.model and self.model[sub_id] != wanted:
            with pytest.raises(SubscriptionConflictError):
                self.m.subscribe(sub_id, criteria, mode)
            return
        self.m.subscribe(sub_id, criteria, mode)
        self.model[sub_id] = wanted

    @rule(sub_id=st.integers(0, 8))
    def unsubscribe(self, sub_id: int) -> None:
        assert self.m.unsubscribe(sub_id) is (self.model.pop(sub_id, None) is not None)

    @rule(headers=_HEADERS)
    def match(self, headers: dict[str, str]) -> None:
        expected = {i for i, (c, mode) in self.model.items() if _satisfies(c, mode, headers)}
        assert set(self.m.match(headers)) == expected

    @invariant()
    def structure(self) -> None:
        assert len(self.m) == len(self.model)
        self.m._check()


TestHeadersAgree = HeadersAgree.TestCase
TestHeadersAgree.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
