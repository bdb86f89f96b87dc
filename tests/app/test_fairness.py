"""``app.fairness.FairSlots``: bounded places for long work, granted to tenants in turns."""

from __future__ import annotations

import asyncio

import pytest

from app.fairness import FairSlots


async def _piece(fair: FairSlots, tenant: str, log: list[str], gate: asyncio.Event) -> None:
    async with fair.slot(tenant):
        log.append(tenant)
        await gate.wait()


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_flood_from_one_tenant_waits_its_turn_behind_the_others() -> None:
    """Tenant a queues ten pieces, then b and c one each: with one place, b and c run after
    one more piece of a at most, not after all ten; every piece runs once."""

    async def scenario() -> list[str]:
        fair = FairSlots(1)
        log: list[str] = []
        gates = {name: asyncio.Event() for name in ("a", "b", "c")}
        tasks = [asyncio.create_task(_piece(fair, "a", log, gates["a"])) for _ in range(10)]
        await _settle()
        tasks += [asyncio.create_task(_piece(fair, t, log, gates[t])) for t in ("b", "c")]
        await _settle()
        assert (fair.free, fair.waiting("a"), fair.waiting("b")) == (0, 9, 1)
        for gate in gates.values():
            gate.set()  # every piece now finishes as soon as it runs
        await asyncio.gather(*tasks)
        assert (fair.free, fair.waiting("a")) == (1, 0)
        return log

    log = asyncio.run(scenario())
    assert sorted(log) == ["a"] * 10 + ["b", "c"]
    assert log.index("b") <= 2 and log.index("c") <= 3, log


def test_places_bound_the_pieces_running_at_once() -> None:
    async def scenario() -> int:
        fair = FairSlots(2)
        running = most = 0

        async def piece(tenant: str) -> None:
            nonlocal running, most
            async with fair.slot(tenant):
                running += 1
                most = max(most, running)
                await asyncio.sleep(0.001)
                running -= 1

        await asyncio.gather(*(piece(f"t{k % 3}") for k in range(30)))
        assert fair.free == 2
        return most

    assert asyncio.run(scenario()) == 2


def test_a_cancelled_waiter_gives_up_its_turn_and_a_granted_one_passes_it_on() -> None:
    async def scenario() -> list[str]:
        fair = FairSlots(1)
        log: list[str] = []
        hold = asyncio.Event()
        first = asyncio.create_task(_piece(fair, "a", log, hold))
        await _settle()
        gone = asyncio.create_task(_piece(fair, "b", log, asyncio.Event()))
        later = asyncio.create_task(_piece(fair, "c", log, asyncio.Event()))
        await _settle()
        gone.cancel()  # still waiting: forgotten
        await _settle()
        assert fair.waiting("b") == 0
        hold.set()
        await first
        await _settle()
        assert log == ["a", "c"] and fair.free == 0  # c holds the place
        later.cancel()  # cancelled while holding it: the place comes back
        await asyncio.gather(later, gone, return_exceptions=True)
        assert fair.free == 1
        return log

    asyncio.run(scenario())


def test_needs_a_place() -> None:
    with pytest.raises(ValueError, match="at least one slot"):
        FairSlots(0)
