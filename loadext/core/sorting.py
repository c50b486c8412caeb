"""Sorting every known node without holding the interpreter for the whole sort.

`sorted()` is one call into C: at 50 000 names it holds the GIL for tens of milliseconds, and
the event loop that answers the scheduler waits that long even while the sort runs in a worker
thread. Sorted in slices and merged by a generator, the interpreter can switch threads between
slices and between merged items.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

SLICE = 4096  # about a millisecond of sorting


def sorted_in_slices(items: Iterable[str], size: int = SLICE) -> list[str]:
    """sorted(items), in pieces the interpreter can switch between."""
    whole = list(items)
    if len(whole) <= size:
        return sorted(whole)
    return list(heapq.merge(*(sorted(whole[i : i + size]) for i in range(0, len(whole), size))))
