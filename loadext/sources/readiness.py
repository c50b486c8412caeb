"""Readiness: ready once loadext decides on what the cluster really is.

Until the first refresh round ended, every node would be judged without data; until each watch
loadext runs has its first full list, pods placed moments ago (the pod watch) or Nodes'
allocatable (the Node watch) are missing from its decisions. So, as client-go's informers wait
for cache sync, /readyz waits for all of them. A watch that cannot list at all (RBAC, an API
server away) must not keep every replica out of service: past SYNC_BOUND seconds loadext is
ready anyway, and says which list it went without.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

SYNC_BOUND = 60.0  # seconds a watch's initial list may hold readiness back
SLOW_SYNC = 10.0  # seconds after which a list still under way is logged


class Readiness:
    def __init__(
        self,
        refreshed: Callable[[], bool],
        clock: Callable[[], float] = time.monotonic,
        slow: float = SLOW_SYNC,
        bound: float = SYNC_BOUND,
    ) -> None:
        self._refreshed = refreshed
        self._clock = clock
        self._slow, self._bound = slow, bound
        self._started = clock()
        self._unsynced: set[str] = set()
        self._gave_up = False

    def tracked(self, watch: str, health: Callable[[bool], None]) -> Callable[[bool], None]:
        """The watch's health report, which also marks it synced at its first full list."""
        self._unsynced.add(watch)

        def report(healthy: bool) -> None:
            if healthy and watch in self._unsynced:
                self._unsynced.discard(watch)
                log.info("the %s watch has its initial list after %.1f s", watch, self._clock() - self._started)
            health(healthy)

        return report

    def waiting_for(self) -> list[str]:
        """What readiness still waits for, in words; [] once ready."""
        waiting = [] if self._refreshed() else ["the first refresh round"]
        if not self._gave_up:
            waiting += [f"the {watch} watch's initial list" for watch in sorted(self._unsynced)]
        return waiting

    async def supervise(self) -> None:
        """Log a sync that is slow, and past SYNC_BOUND stop waiting for it."""
        for due in (self._slow, self._bound):
            await asyncio.sleep(max(0.0, self._started + due - self._clock()))
            if not self._unsynced:
                return
            watches = ", ".join(sorted(self._unsynced))
            if due < self._bound:
                log.warning("still waiting for the initial list of the %s watch after %g s", watches, due)
            else:
                self._gave_up = True
                log.warning(
                    "ready without the initial list of the %s watch after %g s: it keeps retrying", watches, due
                )
