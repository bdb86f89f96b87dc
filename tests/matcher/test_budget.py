"""``matcher.budget.Budget``: steps counted to an exact limit, a stop seen at the next step
(from another thread too), a deadline read from a clock the test drives; and what the
explanation charges for its table."""

from __future__ import annotations

import threading

import pytest

from matcher.budget import (
    CLIENT_GONE,
    CLOCK_EVERY,
    DEADLINE,
    SHUTTING_DOWN,
    Budget,
    BudgetExceededError,
    StoppedError,
)
from matcher.explain import EXPLAIN_STEPS, explain


def test_steps_are_counted_to_the_limit_exactly() -> None:
    budget = Budget("explain_budget", 10, "ask for less")
    budget.spend(4)
    budget.spend(6)  # exactly the limit: allowed
    assert budget.spent == 10
    with pytest.raises(BudgetExceededError) as refused:
        budget.spend(1)
    error = refused.value
    assert (error.code, error.budget, error.limit) == (
        "explain_budget_exceeded",
        "explain_budget",
        10,
    )
    assert error.message == "this needs more than 10 steps (the explain_budget); ask for less"


def test_no_limit_counts_without_refusing() -> None:
    budget = Budget()
    budget.spend(10**12)
    assert budget.spent == 10**12


def test_a_stop_from_another_thread_ends_the_work_at_its_next_step() -> None:
    budget = Budget("batch")
    steps = 0
    started = threading.Event()

    def work() -> None:
        nonlocal steps
        started.set()
        while True:
            budget.spend(1)
            steps += 1

    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except StoppedError as e:
            errors.append(e)

    worker = threading.Thread(target=run)
    worker.start()
    assert started.wait(10)
    budget.stop()
    budget.stop(SHUTTING_DOWN)  # the first reason stays
    worker.join(10)
    assert not worker.is_alive()
    assert [e.code for e in errors] == [CLIENT_GONE]  # type: ignore[attr-defined]
    done = steps
    with pytest.raises(StoppedError):
        budget.check()
    assert steps == done


def test_the_deadline_is_read_every_so_many_steps_and_by_check() -> None:
    now = [0.0]
    budget = Budget("batch", deadline=5.0, clock=lambda: now[0])
    budget.spend(1)  # the first step reads the clock: in time
    now[0] = 6.0
    budget.spend(CLOCK_EVERY - 1)  # not read again yet
    with pytest.raises(StoppedError) as late:
        budget.spend(1)
    assert late.value.code == DEADLINE
    fresh = Budget("batch", deadline=5.0, clock=lambda: now[0])
    with pytest.raises(StoppedError):
        fresh.check()


@pytest.mark.parametrize(
    ("pattern", "topic"),
    [("a.*.#", "a.b.c.d"), ("#.x.#", "." * 127), ("#", "")],
)
def test_an_explanation_charges_its_table(pattern: str, topic: str) -> None:
    """(tokens + 1) x (words + 1) cells plus the fixed part, and for a failure a step per
    live state per word: the same steps every time; a budget of exactly them allows the
    explanation, one step less refuses it."""
    tokens = len(pattern.split("."))
    words = len(topic.split(".")) if topic else 0
    table = (tokens + 1) * (words + 1) + EXPLAIN_STEPS
    counted = Budget()
    explained = explain(pattern, topic, budget=counted)
    cost = counted.spent
    assert cost == table if explained.matched else cost > table
    again = Budget()
    explain(pattern, topic, budget=again)
    assert again.spent == cost
    assert explain(pattern, topic, budget=Budget("explain_budget", cost)) == explained
    assert explained == explain(pattern, topic)
    with pytest.raises(BudgetExceededError):
        explain(pattern, topic, budget=Budget("explain_budget", cost - 1))
