"""How the Python process runs: tuned for a server whose callers wait on every answer.

Two interpreter defaults cost kube-scheduler latency while a large refresh lands:

- The GIL switch interval (5 ms): while the refresher's worker thread stores a round and judges
  every node, a request that arrives waits up to one interval for the GIL. 0.5 ms bounds that
  wait at a small cost in switching.
- Full garbage collections: each refresh leaves a new snapshot and decision table (tens of
  thousands of objects at 5000 nodes) in the oldest generation, and a full collection walks all
  of them (~70 ms measured). After each refresh, the state it built is frozen (gc.freeze: the
  collector skips it; reference counting still frees it when the next refresh replaces it), so
  automatic collections only walk what is new. Cyclic garbage frozen by accident is reclaimed by
  one full collection every `full_every` seconds, a pause per ten minutes instead of one every
  few refreshes.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable

SWITCH_INTERVAL = 0.0005  # seconds


def tune_for_latency() -> None:
    sys.setswitchinterval(SWITCH_INTERVAL)


class LongLivedState:
    def __init__(self, full_every: float = 600.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._full_every = full_every
        self._clock = clock
        self._last_full = clock()

    def settle(self) -> None:
        """After a refresh published its state: freeze it out of the collector's way."""
        now = self._clock()
        if now - self._last_full >= self._full_every:
            gc.unfreeze()
            gc.collect()
            self._last_full = now
        else:
            gc.collect(1)  # young cyclic garbage goes now rather than being frozen
        gc.freeze()
