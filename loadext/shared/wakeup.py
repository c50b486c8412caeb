"""Sleeping until poked: the background loops' one way to wait for an event or a timeout.

`asyncio.wait_for(event.wait(), timeout)` is the obvious way, and on Python 3.11 it loses a
cancellation: when the event is set and the waiting task is cancelled in the same loop step
(a config reload pokes the refresher just as shutdown cancels it), wait_for returns the
event's result instead of raising CancelledError, so a `while True` loop runs on and whoever
awaits the cancelled task waits forever. `asyncio.timeout` has no inner task and lets the
cancellation through.
"""

from __future__ import annotations

import asyncio


async def woken_within(event: asyncio.Event, seconds: float) -> bool:
    """Wait up to `seconds` for `event`: True if it was set, False if the time ran out. A
    cancellation always propagates."""
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        return False
    return True
