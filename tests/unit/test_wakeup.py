"""shared/wakeup.py: the background loops sleep until poked or timed out, and a cancellation
that lands in the same loop step as a poke still stops them (asyncio.wait_for on Python 3.11
returned the poke instead, and a shutdown waited forever on the refresher)."""

from __future__ import annotations

import asyncio

from harness.inprocess import STORED_CONFIG
from loadext.config import parse_config
from loadext.core.cluster import Cluster
from loadext.shared.wakeup import woken_within
from loadext.sources.refresher import Refresher
from loadext.telemetry import Telemetry


async def test_woken_within_says_whether_the_event_came() -> None:
    event = asyncio.Event()
    assert await woken_within(event, 0.01) is False
    asyncio.get_running_loop().call_soon(event.set)
    assert await woken_within(event, 5) is True


async def test_a_cancellation_in_the_same_step_as_the_event_is_not_lost() -> None:
    event = asyncio.Event()
    waiting = asyncio.create_task(woken_within(event, 5))
    await asyncio.sleep(0)  # the task now waits on the event
    event.set()
    waiting.cancel()
    await asyncio.wait({waiting}, timeout=5)
    assert waiting.cancelled()


class _QuickRounds(Refresher):
    """The real loop around a round that only counts itself: the test is about the sleep."""

    def __init__(self) -> None:
        telemetry = Telemetry()
        nothing = object()  # refresh_once is replaced: nothing is queried
        super().__init__(Cluster(parse_config(STORED_CONFIG)), nothing, telemetry.refresh, telemetry.herd)  # type: ignore[arg-type]
        self.rounds = 0
        self.a_round_ended = asyncio.Event()

    async def refresh_once(self) -> None:
        self.rounds += 1
        self.a_round_ended.set()


async def test_a_refresher_poked_as_it_is_cancelled_stops() -> None:
    refresher = _QuickRounds()
    running = asyncio.create_task(refresher.run())
    await refresher.a_round_ended.wait()  # and then the loop sleeps for the 15 s interval
    refresher.poke()  # a config reload...
    running.cancel()  # ...as shutdown stops the background tasks
    await asyncio.wait({running}, timeout=5)
    assert running.cancelled() and refresher.rounds == 1
