"""Awaiting a condition instead of sleeping: tests poll until it holds or a deadline passes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any


async def eventually(check: Callable[[], Awaitable[Any]], within: float = 10.0, interval: float = 0.05) -> Any:
    """Poll an async check until it returns a truthy value or raises no AssertionError."""
    deadline = time.monotonic() + within
    while True:
        try:
            result = await check()
            if result:
                return result
            last: Any = result
        except AssertionError as exc:
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within}s; last: {last}")
        await asyncio.sleep(interval)


def wait_until(condition: Callable[[], bool], message: str, within: float = 20.0) -> None:
    """The same for a plain condition, from a test that is not async."""
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, message
        time.sleep(0.02)
