"""The pods placed on each node within the herd window, summed per node as the metrics do not show them yet.

Metrics lag: a pod's usage reaches Prometheus only after it starts and the rate window fills.
Without a correction, a burst of pods all goes to the node that looked idle when the burst
began. So loadext keeps, per node, the estimated usage of the pods placed there within the
window; correction.py adds it (plus the incoming pod's own estimate) to the measured values.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass

from immutables import Map

from loadext.core.herd.usage import Usage


@dataclass(frozen=True, slots=True)
class Placement:
    node: str
    placed_at: float  # wall time from the pod's PodScheduled condition, so restarts do not re-date
    usage: Usage
    pod: tuple[str, str] | None = None  # (namespace, name): where its measured usage is found
    sources: tuple[str, str] = ("factor", "factor")  # of usage, per resource (usage.Estimate)
    measured_at: float = 0.0  # wall time Prometheus first had the pod's own usage; 0 = not yet


# How a placement stops counting. Until Prometheus has the pod's own usage, nothing says it
# runs, so it counts in full for the whole window. Once it is measured it runs, and the node's
# signals, averages over a range (rate(x[5m])), take it in a little more each second: counting it
# in full until the window ends counted it twice for most of the window (the kwok closed loop,
# docs/benchmarks.md: every candidate refused in a burst while the cluster had room). So from
# then its share falls linearly to nothing at the window's end, in FADE_STEPS steps, each
# rounded up (the error is on the side of counting). Steps, not a slope, so that a node's sum
# changes at a few known moments and the herd memo re-judges only that node then.
FADE_STEPS = 4


def unseen_share(placement: Placement, window: float, now: float) -> float:
    """The share of a placed pod's usage its node's metrics do not show yet (see FADE_STEPS)."""
    if not placement.measured_at:
        return 1.0
    span = placement.placed_at + window - placement.measured_at
    if span <= 0:
        return 0.0
    steps = math.floor((now - placement.measured_at) / span * FADE_STEPS)
    return 1.0 - min(FADE_STEPS, max(0, steps)) / FADE_STEPS


def next_change(placement: Placement, window: float, now: float) -> float:
    """When unseen_share next changes: the next fade step, or the window's end."""
    end = placement.placed_at + window
    span = end - placement.measured_at
    if not placement.measured_at or span <= 0:
        return end
    step = span / FADE_STEPS
    steps = math.floor((now - placement.measured_at) / step) + 1
    due = placement.measured_at + steps * step
    if due <= now:  # rounding put `now` just short of a step it has reached
        due += step
    return min(end, due)


class InFlight:
    """Pods placed within the window, by UID, and their summed estimates per node, each counted
    at its unseen share (FADE_STEPS).

    Kept incrementally: a placement changes its node's sum only, and the nodes changed since a
    version can be asked for (changed_since), so the herd correction re-judges only those
    nodes, not every node with a pod in flight (in a burst, that is every node).

    The sums are an immutable map (a HAMT): every decision keeps the sums it was made with for
    explain --pod, and holding a reference costs nothing, where copying a dict cost each
    request time in proportion to the nodes in flight (80 us at 4444 nodes). A change costs
    about 0.3 us more than a dict's, and a read about 30 ns more."""

    _LOG_SIZE = 4096  # changes remembered for changed_since; older readers rebuild

    def __init__(self, window: float) -> None:
        self.window = window
        self._pods: dict[str, Placement] = {}
        self._by_node: dict[str, dict[str, Usage]] = {}  # node -> uid -> usage x unseen share
        self._per_node: Map[str, tuple[Usage, int]] = Map()
        self._due: dict[str, float] = {}  # uid -> when its share next changes
        self._changes: list[tuple[float, str]] = []  # (due, uid), a heap; entries not in _due are stale
        self._log: list[str] = []  # nodes changed, in order; _log[i] is change _log_base + i + 1
        self._log_base = 0
        self.version = 0  # bumps on every change: decisions depending on it are stale

    def counts(self, placed_at: float, now: float) -> bool:
        """Whether a pod placed then is within the window now (else the metrics show it)."""
        return now < placed_at + self.window

    def place(self, uid: str, placement: Placement, now: float) -> None:
        """A pod bound to a node (from the pod watch, or loadext's own bind)."""
        if not self.counts(placement.placed_at, now):
            self.remove(uid)  # placed long ago: the metrics show it already
            return
        old = self._pods.get(uid)
        if old == placement:
            return
        self._pods[uid] = placement
        if old is not None and old.node != placement.node:
            del self._by_node[old.node][uid]
            self._resum(old.node)
        self._count(uid, placement, now)

    def _count(self, uid: str, placement: Placement, now: float) -> None:
        """Count the placement at its share now, and schedule its next change."""
        self._by_node.setdefault(placement.node, {})[uid] = placement.usage.scaled(
            unseen_share(placement, self.window, now)
        )
        self._resum(placement.node)
        self._schedule(uid, placement, now)

    def _schedule(self, uid: str, placement: Placement, now: float) -> None:
        due = next_change(placement, self.window, now)
        self._due[uid] = due
        heapq.heappush(self._changes, (due, uid))

    def remove(self, uid: str) -> None:
        placement = self._pods.pop(uid, None)
        if placement is not None:
            self._due.pop(uid, None)
            del self._by_node[placement.node][uid]
            self._resum(placement.node)

    def get(self, uid: str) -> Placement | None:
        return self._pods.get(uid)

    def placements(self) -> list[tuple[str, Placement]]:
        """(uid, placement) of every pod in flight, a copy: safe to place() while iterating."""
        return list(self._pods.items())

    def replace_all(self, placements: Mapping[str, Placement], now: float) -> None:
        self._pods, self._by_node, self._due, self._changes = {}, {}, {}, []
        for uid, placement in placements.items():
            if self.counts(placement.placed_at, now):
                self._pods[uid] = placement
                share = unseen_share(placement, self.window, now)
                self._by_node.setdefault(placement.node, {})[uid] = placement.usage.scaled(share)
                self._due[uid] = next_change(placement, self.window, now)
                self._changes.append((self._due[uid], uid))
        heapq.heapify(self._changes)
        self._per_node = Map({node: _summed(pods) for node, pods in self._by_node.items()})
        self.version += 1
        self._log, self._log_base = [], self.version  # readers from before rebuild

    def expire(self, now: float) -> None:
        """Apply the changes due by now: shares that fell a step, and pods placed before the
        window, which the metrics show by now."""
        changes = self._changes
        while changes and changes[0][0] <= now:
            due, uid = heapq.heappop(changes)
            if self._due.get(uid) != due:
                continue  # rescheduled or removed since
            placement = self._pods[uid]
            if now >= placement.placed_at + self.window:  # next_change's `end`, to the bit
                self.remove(uid)
            else:
                self._count(uid, placement, now)

    def _resum(self, node: str) -> None:
        pods = self._by_node[node]
        if pods:
            self._per_node = self._per_node.set(node, _summed(pods))
        else:
            del self._by_node[node]
            if node in self._per_node:
                self._per_node = self._per_node.delete(node)
        self.version += 1
        self._log.append(node)
        if len(self._log) > self._LOG_SIZE:
            drop = len(self._log) - self._LOG_SIZE // 2
            del self._log[:drop]
            self._log_base += drop

    def changed_since(self, version: int) -> list[str] | None:
        """The nodes whose sums changed after `version` (repeats possible), or None when that
        is further back than the log reaches: then everything may have changed."""
        if version < self._log_base:
            return None
        return self._log[version - self._log_base :]

    def per_node(self, now: float) -> Map[str, tuple[Usage, int]]:
        """node -> (summed estimate, number of placements) within the window; immutable, so a
        caller may keep it as it is now."""
        self.expire(now)
        return self._per_node

    def __len__(self) -> int:
        return len(self._pods)


def _summed(usages: Mapping[str, Usage]) -> tuple[Usage, int]:
    """The node's pods summed (in the order they came, as Usage.__add__ would): summed again
    on each change, it is one pass of float additions, not a Usage built per pod."""
    cpu = memory = 0.0
    for usage in usages.values():
        cpu += usage.cpu
        memory += usage.memory
    return Usage(cpu, memory), len(usages)


NO_PLACEMENTS: tuple[Usage, int] = (Usage(), 0)
