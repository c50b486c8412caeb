"""What the rebalancer (sources/rebalancer.py) reads of loadext's state, and nothing more: the
nodes' heat as of the last refresh, and which nodes would take a pod. The Cluster implements it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from loadext.config import Config
from loadext.core.herd.usage import Usage
from loadext.core.rebalance.heat import Heat


@dataclass(frozen=True)
class Room:
    """A node that would take a pod, by loadext's filter; whether its requests fit is the API's
    to say (the pods on it)."""

    node: str
    allocatable: Mapping[str, float]  # {"cpu": cores, "memory": bytes}
    labels: Mapping[str, str]  # what a pod's nodeSelector must match


class RebalanceState(Protocol):
    @property
    def config(self) -> Config: ...

    def clock(self) -> float: ...

    def heat(self) -> Heat: ...

    def passing_with(self, usage: Usage, excluding: str) -> list[Room]:
        """The nodes that pass loadext's filter with `usage` added to what they carry and have
        in flight, best score first; never `excluding`."""
