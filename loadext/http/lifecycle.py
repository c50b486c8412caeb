"""Running the listeners, and stopping them without dropping a request.

On SIGTERM (the kubelet's signal on pod deletion, e.g. in a rolling update):

1. readiness turns false at once, and every response from then on carries
   `Connection: close`, so keep-alive clients reconnect (to another replica) after their
   current request instead of sending the next one here;
2. loadext keeps serving for `--shutdown-delay`: the endpoints controller and kube-proxy need a
   moment before new connections stop arriving, and refusing them would fail scheduling cycles;
3. then it stops listening, closes idle connections, lets the requests in flight finish for up
   to `--shutdown-timeout`, runs the background jobs' cleanup, and returns (exit 0).

A second SIGTERM or a SIGINT skips what is left of the delay. delay + timeout must fit in the
pod's terminationGracePeriodSeconds (the manifests: 5 s + 15 s within 30 s).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import ssl
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from loadext.config.serving import Shutdown
from loadext.http.limits import GuardedSite
from loadext.shared.wakeup import woken_within

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Listener:
    app: web.Application
    host: str
    port: int
    ssl_context: ssl.SSLContext | None = None


async def serve(
    listeners: list[Listener],
    header_timeout: float,
    shutdown: Shutdown,
    on_drain: Callable[[], None],
    on_header_timeout: Callable[[], None],
) -> None:
    """Serve until SIGTERM or SIGINT, then drain as the module docstring says. The first
    listener's runner is cleaned up first: its app owns the background jobs."""
    loop = asyncio.get_running_loop()
    stop, hurry = asyncio.Event(), asyncio.Event()

    def on_signal(name: str) -> None:
        if stop.is_set():
            hurry.set()
            return
        log.info("%s: readiness is false; serving %.0fs more, then draining", name, shutdown.delay)
        on_drain()
        stop.set()
        if name == "SIGINT":
            hurry.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum.name)
    runners: list[web.AppRunner] = []
    try:
        await listen(listeners, header_timeout, shutdown.timeout, on_header_timeout, runners)
        await stop.wait()
        await woken_within(hurry, shutdown.delay)
        log.info("draining: no new connections; waiting up to %.0fs for requests in flight", shutdown.timeout)
    finally:
        for runner in runners:
            await runner.cleanup()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
    log.info("stopped")


async def listen(
    listeners: list[Listener],
    header_timeout: float,
    shutdown_timeout: float,
    on_header_timeout: Callable[[], None],
    runners: list[web.AppRunner],
) -> None:
    """Start serving each listener, appending its runner to `runners` as it starts: whoever
    called cleans up those that started, even when a later one fails (a port in use)."""
    for listener in listeners:
        runner = web.AppRunner(listener.app, access_log=None, shutdown_timeout=shutdown_timeout)
        await runner.setup()
        runners.append(runner)
        site = GuardedSite(
            runner,
            listener.host,
            listener.port,
            header_timeout,
            on_header_timeout,
            ssl_context=listener.ssl_context,
        )
        await site.start()
