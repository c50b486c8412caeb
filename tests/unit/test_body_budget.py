"""limits.BodyBudget: large bodies beyond the budget wait in order; one always goes; a wait
given up (its timeout) holds nothing and lets those behind it through."""

from __future__ import annotations

import asyncio

from loadext.http.limits import BodyBudget


async def test_within_the_budget_no_one_waits() -> None:
    budget = BodyBudget(100)
    await budget.acquire(60)
    await budget.acquire(40)
    assert budget.used == 100


async def test_past_the_budget_requests_wait_in_order_and_go_as_bytes_come_back() -> None:
    budget = BodyBudget(100)
    await budget.acquire(80)
    order: list[str] = []

    async def want(name: str, size: int) -> None:
        await budget.acquire(size)
        order.append(name)

    second = asyncio.create_task(want("second", 50))
    third = asyncio.create_task(want("third", 10))  # would fit now, but comes after "second"
    await asyncio.sleep(0)
    assert order == [] and budget.used == 80
    budget.release(80)
    await asyncio.gather(second, third)
    assert order == ["second", "third"] and budget.used == 60


async def test_a_body_larger_than_the_budget_goes_alone() -> None:
    budget = BodyBudget(100)
    await budget.acquire(500)
    waiting = asyncio.create_task(budget.acquire(1))
    await asyncio.sleep(0)
    assert not waiting.done()
    budget.release(500)
    await waiting
    assert budget.used == 1


async def test_a_wait_given_up_holds_nothing_and_lets_the_next_through() -> None:
    budget = BodyBudget(100)
    await budget.acquire(90)
    assert not await budget.wait_turn(50, patience=0.01)
    small = asyncio.create_task(budget.acquire(10))  # fits once the 50 behind which it queued is gone
    await asyncio.wait_for(small, timeout=1)
    assert budget.used == 100
    budget.release(90)
    budget.release(10)
    assert budget.used == 0
