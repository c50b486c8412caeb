"""What the rebalancer (actors/rebalancer.py) reads of loadext's state, and tells it, and nothing
more: the nodes' heat as of the last refresh, which nodes would take a pod, and what an evicted
pod used (its replacement's estimate). The Cluster implements it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from loadext.config import Config
from loadext.core.herd.usage import Usage
from loadext.core.rebalance.heat import Heat


class RebalanceState(Protocol):
    @property
    def config(self) -> Config: ...

    def clock(self) -> float: ...

    def heat(self) -> Heat: ...

    def passing_with(self, usage: Usage, excluding: str, planned: Mapping[str, Usage]) -> list[str]:
        """The nodes that pass loadext's filter with `usage` added to what they carry and have
        in flight (and, on a node in `planned`, the replacements this cycle already sends
        there), best score first; never `excluding`."""

    def moved(self, workload: str, usage: Usage, until: float) -> None:
        """A pod of `workload` that used `usage` was evicted: the filter counts its replacement
        at that usage until `until` (core/herd/learned.py)."""
