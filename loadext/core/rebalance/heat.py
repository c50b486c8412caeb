"""The nodes' heat as the rebalancer reads it, by node name: built from the streaks, the
snapshot and the decision table of the last refresh."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from loadext.config import Signal
from loadext.core.policy import DecisionTable
from loadext.core.rebalance.streaks import HotStreaks, SignalHeat
from loadext.core.snapshot import Snapshot


@dataclass(frozen=True)
class Heat:
    degraded: bool  # no fresh metrics: the rebalancer pauses
    streaks: Mapping[str, tuple[SignalHeat, ...]]  # node -> its signals with a streak (hot or heating)
    over: Mapping[str, Mapping[str, float]]  # node -> signal -> value - threshold, where above it now
    allocatable: Mapping[str, Mapping[str, float]]  # node -> {"cpu": cores, "memory": bytes}
    refused: frozenset[str] = field(default_factory=frozenset)  # nodes the filter refuses now

    def hot(self) -> dict[str, tuple[SignalHeat, ...]]:
        """node -> its hot signals, for the nodes with one."""
        found = {node: tuple(s for s in signals if s.hot) for node, signals in self.streaks.items()}
        return {node: signals for node, signals in found.items() if signals}


def build_heat(
    streaks: HotStreaks,
    snapshot: Snapshot,
    table: DecisionTable,
    signals_of: Callable[[str], tuple[Signal, ...]],
    node_for: Callable[[str], str | None],
    allocatable: Callable[[str], Mapping[str, float] | None],
    max_age: float,
    now: float,
) -> Heat:
    """`node_for`: identity -> node name (None: no node known for it, left out)."""
    named: dict[str, tuple[SignalHeat, ...]] = {}
    over: dict[str, dict[str, float]] = {}
    for identity, heats in streaks.report(snapshot, signals_of, max_age, now).items():
        node = node_for(identity)
        if node is None:
            continue
        named[node] = tuple(heats)
        samples = snapshot.by_identity.get(identity, {})
        above = {}
        for signal in signals_of(identity):
            sample = samples.get(signal.name)
            if sample is not None and sample.fresh(now, max_age) and signal.over(sample.value):
                above[signal.name] = sample.value - (signal.threshold or 0.0)
        over[node] = above
    refused = frozenset(
        node
        for identity, verdict in table.by_identity.items()
        if not verdict.passed and (node := node_for(identity)) is not None
    )
    return Heat(table.degraded, named, over, {n: allocatable(n) or {} for n in named}, refused)
