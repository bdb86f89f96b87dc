"""The token buckets on a clock the test moves by hand (no sleeps, no wall clock): the
burst, the refill, the wait a refusal names, the operator exemption, and the bound no
sequence of requests can exceed (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.ratelimit import ADMIN, BATCH_TOPICS, MATCH, Rate, RateLimitCollector, RateLimiter
from app.refusals import RateLimitedError
from app.settings import Settings


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


ADMIN_RATE = Rate(50, 100)


def _limiter(
    rate: Rate | None = ADMIN_RATE, *, limit_operator: bool = False
) -> tuple[RateLimiter, FakeClock]:
    clock = FakeClock()
    rates = {ADMIN: rate, MATCH: Rate(2, 3), BATCH_TOPICS: Rate(10, 20)}
    return RateLimiter(rates, limit_operator=limit_operator, clock=clock), clock


def _granted(limiter: RateLimiter, kind: str, tenant: str | None, cost: int = 1) -> bool:
    try:
        limiter.charge(kind, tenant, cost)
    except RateLimitedError:
        return False
    return True


def test_a_full_bucket_admits_the_burst_then_refuses_with_the_wait() -> None:
    limiter, clock = _limiter()
    assert all(_granted(limiter, ADMIN, "acme") for _ in range(100))
    with pytest.raises(RateLimitedError) as refused:
        limiter.charge(ADMIN, "acme")
    assert refused.value.status == 429
    assert refused.value.code == "rate_limited"
    # One token refills in 1/50 s: Retry-After says whole seconds, at least 1.
    assert refused.value.extra == {"retry_after": 1}
    clock.now += 0.02
    assert _granted(limiter, ADMIN, "acme")
    assert not _granted(limiter, ADMIN, "acme")
    clock.now += 1.0  # 50 tokens back, not more
    assert sum(_granted(limiter, ADMIN, "acme") for _ in range(60)) == 50


def test_the_wait_is_rounded_up_to_whole_seconds() -> None:
    limiter, clock = _limiter(Rate(0.25, 1))
    limiter.charge(ADMIN, "acme")
    with pytest.raises(RateLimitedError) as refused:
        limiter.charge(ADMIN, "acme")
    assert refused.value.extra == {"retry_after": 4}
    clock.now += 2.5
    with pytest.raises(RateLimitedError) as refused:
        limiter.charge(ADMIN, "acme")
    assert refused.value.extra == {"retry_after": 2}  # 1.5 s left
    clock.now += 1.5
    limiter.charge(ADMIN, "acme")


def test_tenants_and_kinds_have_buckets_of_their_own() -> None:
    limiter, _ = _limiter()
    for _ in range(3):
        limiter.charge(MATCH, "acme")
    assert not _granted(limiter, MATCH, "acme")
    assert _granted(limiter, MATCH, "globex")
    assert _granted(limiter, ADMIN, "acme")
    assert limiter.refused() == {(MATCH, "acme"): 1}


def test_batch_topics_cost_their_count_and_a_batch_over_the_burst_costs_the_burst() -> None:
    limiter, clock = _limiter()
    assert _granted(limiter, BATCH_TOPICS, "acme", 15)
    assert not _granted(limiter, BATCH_TOPICS, "acme", 6)  # 5 left
    assert _granted(limiter, BATCH_TOPICS, "acme", 5)
    clock.now += 2.0  # refilled to the burst, 20
    assert _granted(limiter, BATCH_TOPICS, "acme", 500)  # slowed, not barred
    assert not _granted(limiter, BATCH_TOPICS, "acme", 1)


def test_the_operator_is_unlimited_unless_asked() -> None:
    limiter, _ = _limiter(Rate(1, 1))
    assert all(_granted(limiter, ADMIN, None) for _ in range(1_000))
    limited, _ = _limiter(Rate(1, 1), limit_operator=True)
    assert _granted(limited, ADMIN, None)
    assert not _granted(limited, ADMIN, None)
    assert limited.refused() == {(ADMIN, "(operator)"): 1}


def test_no_rate_is_no_limit_and_a_clock_stepping_back_refills_nothing() -> None:
    limiter, clock = _limiter(None)
    assert all(_granted(limiter, ADMIN, "acme") for _ in range(10_000))
    for _ in range(3):
        limiter.charge(MATCH, "acme")
    clock.now -= 100.0
    assert not _granted(limiter, MATCH, "acme")


def test_the_settings_defaults_and_zero_as_unlimited() -> None:
    rates = Settings(_env_file=None).rates()
    assert rates[ADMIN] == Rate(50.0, 100)
    assert rates[MATCH] == Rate(10_000.0, 20_000)
    assert rates[BATCH_TOPICS] == Rate(200_000.0, 400_000)
    assert Settings(_env_file=None, rate_admin=0).rates()[ADMIN] is None


def test_the_collector_labels_refusals_by_kind_and_tenant() -> None:
    limiter, _ = _limiter(Rate(1, 1))
    for _ in range(3):
        _granted(limiter, ADMIN, "acme")
    (family,) = RateLimitCollector(limiter).collect()
    samples = [(s.name, s.labels, s.value) for s in family.samples]
    assert samples == [("topicstore_rate_limited_total", {"kind": "admin", "tenant": "acme"}, 2)]


Step = tuple[float, int]


@given(
    rate=st.floats(0.5, 100),
    burst=st.integers(1, 50),
    steps=st.lists(st.tuples(st.floats(0, 2), st.integers(1, 60)), max_size=60),
)
def test_granted_tokens_never_exceed_the_burst_plus_the_refill(
    rate: float, burst: int, steps: list[Step]
) -> None:
    """Over any sequence, what was granted fits ``burst + rate * elapsed``, and a refusal
    names a wait after which that very request is granted."""
    limiter, clock = _limiter()
    limiter.rates[ADMIN] = Rate(rate, burst)
    start = clock.now
    granted = 0.0
    for advance, cost in steps:
        clock.now += advance
        try:
            limiter.charge(ADMIN, "acme", cost)
        except RateLimitedError as e:
            wait = e.extra["retry_after"]
            clock.now += wait
            limiter.charge(ADMIN, "acme", cost)  # must fit now
        granted += min(cost, burst)
        assert granted <= burst + rate * (clock.now - start) + 1e-6


def test_a_debit_never_refuses_and_the_next_requests_pay_for_it() -> None:
    """Work counted after it was done (an explain's steps) is taken whatever the bucket
    holds, down to minus the burst; the tenant's next requests wait for the refill."""
    limiter, clock = _limiter(Rate(10, 20))
    limiter.debit(ADMIN, "acme", 25)  # 20 - 25 = -5
    assert not _granted(limiter, ADMIN, "acme")
    clock.now += 0.5  # +5: back at 0
    assert not _granted(limiter, ADMIN, "acme")
    clock.now += 0.1  # +1
    assert _granted(limiter, ADMIN, "acme")
    limiter.debit(ADMIN, "acme", 10**9)  # floored at minus the burst: 4 s to a token again
    clock.now += 2.0
    assert not _granted(limiter, ADMIN, "acme")
    clock.now += 2.1
    assert _granted(limiter, ADMIN, "acme")
    limiter.debit(ADMIN, "globex", 10**9)
    assert _granted(limiter, ADMIN, "acme")  # per tenant
    limiter.debit(ADMIN, None, 10**9)
    assert _granted(limiter, ADMIN, None)  # the operator is not limited
    assert limiter.refused() == {(ADMIN, "acme"): 3}
