"""Before there is a config: loadext alive on its ports, saying what it waits for.

With its config in a ConfigMap, loadext can build nothing until the API server answers. Exiting
would hand the retry to the kubelet's CrashLoopBackOff, whose delays grow to five minutes: a
replica started during a control-plane outage would stay down long after the API server is back.
So while the read fails in a way waiting can cure (the caller's `worth_waiting`), loadext
listens where it will serve: /healthz answers 200 (it is alive and doing its job, and the liveness probe must not kill
it), /readyz 503 with the cause, every other path 503 with a JSON error saying the same. The read
is tried again 1 s later, the wait doubling to 8 s. A failure is raised, to end the process with
its message, once it has lasted longer than waiting is worth for its kind (the caller's
`worth_waiting`: an API server's refusal is waited out briefly, a missing key not at all).

The ports close before serving starts on them again: a probe in that gap of milliseconds is
refused, once.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable
from typing import TypeVar

import orjson
from aiohttp import web

from loadext.http.lifecycle import Listener, listen

log = logging.getLogger(__name__)

T = TypeVar("T")

FIRST_WAIT, LONGEST_WAIT = 1.0, 8.0

Address = tuple[str, int, ssl.SSLContext | None]


async def read_when_answered(
    read: Callable[[], T],
    worth_waiting: Callable[[Exception], float],
    addresses: list[Address],
    header_timeout: float,
) -> T:
    """`read()` (blocking, run in a worker thread) once it succeeds. A failure is tried again
    for as long as `worth_waiting` says failures of its kind are worth it, counted from the
    first of the run; meanwhile the ports answer as the module docstring says."""
    failing_since = time.monotonic()
    try:
        return await asyncio.to_thread(read)
    except Exception as exc:
        budget = worth_waiting(exc)
        cause = _judged(exc, budget, failing_since)

    async def not_ready(_: web.Request) -> web.Response:
        return web.Response(status=503, text=f"waiting for the config: {cause}\n")

    async def not_yet(_: web.Request) -> web.Response:
        body = orjson.dumps({"error": f"loadext is starting, waiting for its config: {cause}"})
        return web.Response(status=503, body=body, content_type="application/json")

    app = web.Application()
    app.router.add_get("/healthz", _alive)
    app.router.add_get("/readyz", not_ready)
    app.router.add_route("*", "/{path:.*}", not_yet)
    runners: list[web.AppRunner] = []
    try:
        await listen([Listener(app, *address) for address in addresses], header_timeout, 0, _no_count, runners)
        wait = FIRST_WAIT
        while True:
            log.warning("waiting for the config: %s; trying again in %gs", cause, wait)
            await asyncio.sleep(wait)
            try:
                result = await asyncio.to_thread(read)
            except Exception as exc:
                if (kind_budget := worth_waiting(exc)) != budget:  # another kind of failure: its own count
                    failing_since, budget = time.monotonic(), kind_budget
                cause = _judged(exc, budget, failing_since)
                wait = min(2 * wait, LONGEST_WAIT)
            else:
                log.info("config read after waiting; starting")
                return result
    finally:
        for runner in runners:
            await runner.cleanup()


def _judged(exc: Exception, budget: float, since: float) -> str:
    """The failure's cause while its kind has failed for less than its budget; raised once not."""
    if time.monotonic() - since >= budget:
        raise exc
    return str(exc)


async def _alive(_: web.Request) -> web.Response:
    return web.Response(text="ok\n")


def _no_count() -> None:
    """A slow client's header timeout while waiting: closed, not counted (no metrics yet)."""
