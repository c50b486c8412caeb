"""The herd guard: pods placed recently count on their node until the metrics can show them.

Metrics lag: a pod's usage reaches Prometheus only after it starts and the rate window fills.
Without a correction, a burst of pods all goes to the node that looked idle when the burst
began. So loadext keeps, per node, the estimated usage of the pods placed there within the
estimation window, and adds it (plus the incoming pod's own estimate) to the measured values
before deciding.

Estimate per resource, Koordinator's rule: max(request, limit x factor), capped at the limit;
a container with neither request nor limit counts a configured BestEffort default. A pod's
total follows Kubernetes' effective-request rule: max(sum over containers, largest init
container) plus overhead.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from cachetools import LRUCache
from immutables import Map

from loadext.config import Config, Pool
from loadext.config.units import quantity
from loadext.core.policy import Verdict, burst_verdict, judge, with_extra_load
from loadext.core.snapshot import Sample

RESOURCES = ("cpu", "memory")  # signals named like these get the estimates


@dataclass(frozen=True, slots=True)
class Usage:
    cpu: float = 0.0  # cores
    memory: float = 0.0  # bytes

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.cpu + other.cpu, self.memory + other.memory)

    def __sub__(self, other: Usage) -> Usage:
        return Usage(self.cpu - other.cpu, self.memory - other.memory)

    def scaled(self, share: float) -> Usage:
        return self if share == 1.0 else Usage(self.cpu * share, self.memory * share)

    def get(self, resource: str) -> float:
        return self.cpu if resource == "cpu" else self.memory if resource == "memory" else 0.0


@dataclass(frozen=True)
class EstimateRule:
    cpu_factor: float = 0.85
    memory_factor: float = 0.7
    best_effort: Usage = Usage(cpu=0.25, memory=200 * 1024 * 1024)


Resources = Mapping[str, object]  # {"cpu": "500m", "memory": "1Gi"}


def container_estimate(requests: Resources, limits: Resources, rule: EstimateRule) -> Usage:
    values = []
    for resource, factor in (("cpu", rule.cpu_factor), ("memory", rule.memory_factor)):
        request, limit = quantity(requests.get(resource)), quantity(limits.get(resource))
        if request is None and limit is None:
            values.append(rule.best_effort.get(resource))
        elif limit is None:
            values.append(request or 0.0)
        else:
            values.append(min(limit, max(request or 0.0, limit * factor)))
    return Usage(values[0], values[1])


def pod_estimate(
    containers: Iterable[tuple[Resources, Resources]],
    init_containers: Iterable[tuple[Resources, Resources]],
    overhead: Resources,
    rule: EstimateRule,
) -> Usage:
    total = Usage()
    for requests, limits in containers:
        total = total + container_estimate(requests, limits, rule)
    for requests, limits in init_containers:
        init = container_estimate(requests, limits, rule)
        total = Usage(max(total.cpu, init.cpu), max(total.memory, init.memory))
    return total + Usage(quantity(overhead.get("cpu")) or 0.0, quantity(overhead.get("memory")) or 0.0)


def allocatable(quantities: Mapping[str, object]) -> dict[str, float]:
    """A Node's status.allocatable as {"cpu": cores, "memory": bytes} (what can be parsed)."""
    out = {}
    for resource in RESOURCES:
        value = quantity(quantities.get(resource))
        if value:
            out[resource] = value
    return out


@dataclass(frozen=True)
class BoundPod:
    """What the herd guard needs of a bound pod from the watch."""

    uid: str
    node: str
    placed_at: float  # PodScheduled's transition time: a restart of loadext does not re-date it
    containers: tuple[tuple[Resources, Resources], ...]
    init_containers: tuple[tuple[Resources, Resources], ...]
    overhead: Resources
    finished: bool
    namespace: str = ""
    name: str = ""
    owner: str = ""  # usage.owner_of: "namespace/Kind/name", or ""


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

    def place(self, uid: str, placement: Placement, now: float) -> None:
        """A pod bound to a node (from the pod watch, or loadext's own bind)."""
        if now >= placement.placed_at + self.window:
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
            if now < placement.placed_at + self.window:
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
    total = Usage()
    for usage in usages.values():
        total = total + usage
    return total, len(usages)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node as the herd correction sees it: its measured verdict and what it is judged on."""

    name: str
    measured: Verdict
    samples: Mapping[str, Sample] | None
    pool: Pool | None


NO_PLACEMENTS: tuple[Usage, int] = (Usage(), 0)


def corrected(
    candidates: Iterable[Candidate],
    in_flight: Mapping[str, tuple[Usage, int]],
    incoming: Usage,
    capacity: Callable[[str], Mapping[str, float] | None],
    config: Config,
    now: float,
    own: Placement | None = None,
) -> list[Verdict]:
    """Each candidate re-judged with the estimates of the pods placed on it within the window,
    plus the incoming pod's own (see corrected_one)."""
    return [
        corrected_one(c, in_flight.get(c.name, NO_PLACEMENTS), incoming, capacity, config, now, own) for c in candidates
    ]


def corrected_one(
    candidate: Candidate,
    placed: tuple[Usage, int],
    incoming: Usage,
    capacity: Callable[[str], Mapping[str, float] | None],
    config: Config,
    now: float,
    own: Placement | None = None,
) -> Verdict:
    """A node re-judged with `placed` (the summed estimate and count of the pods placed on it
    within the window) plus the incoming pod's estimate, as ratios of its allocatable; a node at
    burstCap placements is refused outright. `own` is the incoming pod's expected placement
    from an earlier attempt: it is the pod being judged, so it must not count against its node
    twice."""
    usage, placements = _without_own(candidate.name, placed, own)
    burst_cap = config.herd_guard.burst_cap
    if burst_cap and placements >= burst_cap:
        return burst_verdict(placements, config.herd_guard.window)
    ratios = _extra_ratios(candidate.name, usage + incoming, capacity)
    if not ratios or not candidate.samples:
        return candidate.measured  # nothing to add, or nothing to add it to
    return judge(with_extra_load(candidate.samples, ratios), config, now, candidate.pool)


def corrected_heat(
    candidate: Candidate,
    placed: tuple[Usage, int],
    incoming: Usage,
    capacity: Callable[[str], Mapping[str, float] | None],
    config: Config,
    own: Placement | None = None,
) -> float | None:
    """How full a node would be with the pods in flight on it and the incoming pod: its worst
    (measured + estimated) / threshold over the signals with thresholds, not capped at 1 (so
    nodes past their thresholds still rank). None without samples. Soft mode passes the nodes
    lowest by it when the herd guard refused every candidate."""
    if not candidate.samples:
        return None
    usage, _ = _without_own(candidate.name, placed, own)
    ratios = _extra_ratios(candidate.name, usage + incoming, capacity) or {}
    signals = candidate.pool.signals if candidate.pool is not None else config.signals
    fullness = [
        (sample.value + ratios.get(signal.name, 0.0)) / signal.threshold
        for signal in signals
        if signal.threshold and (sample := candidate.samples.get(signal.name)) is not None
    ]
    return max(fullness, default=None)


def _without_own(node: str, placed: tuple[Usage, int], own: Placement | None) -> tuple[Usage, int]:
    usage, placements = placed
    if own is not None and node == own.node and placements:
        return usage - own.usage, placements - 1
    return usage, placements


def _extra_ratios(
    node: str, extra: Usage, capacity: Callable[[str], Mapping[str, float] | None]
) -> dict[str, float] | None:
    """`extra` as ratios of the node's allocatable, per resource; None when there is nothing to
    add or nothing to divide by."""
    node_capacity = capacity(node)
    if not node_capacity or (extra.cpu == 0 and extra.memory == 0):
        return None
    return {r: extra.get(r) / node_capacity[r] for r in RESOURCES if node_capacity.get(r)}


class IncomingVerdicts:
    """The herd guard's verdicts for one incoming pod size, kept current per node: with the
    estimates in flight on each node plus the incoming pod's, as corrected_one decides them.

    A burst is mostly pods of one size (a ReplicaSet's). Between calls only a few nodes change
    (a placement or two), so a call re-judges the nodes InFlight reports changed and looks the
    rest up: a dict lookup per candidate, not a judge. The memo is dropped when the decision
    table or any node's allocatable changes."""

    def __init__(self, sizes: int = 16) -> None:
        self._key: tuple[object, int] | None = None
        self._by_size: LRUCache[Usage, SizeMemo] = LRUCache(maxsize=sizes)

    def for_size(self, table: object, capacity_version: int, incoming: Usage, inflight: InFlight) -> SizeMemo:
        """The memo for this pod size, with the nodes changed in flight since the last call
        dropped (those it had a verdict for are listed in `stale`); the caller judges what is
        missing."""
        if self._key is None or self._key[0] is not table or self._key[1] != capacity_version:
            self._key = (table, capacity_version)
            self._by_size.clear()
        memo = self._by_size.get(incoming)
        if memo is None:
            memo = self._by_size[incoming] = SizeMemo(inflight.version, {}, {}, set())
            return memo
        changed = inflight.changed_since(memo.version)
        if changed is None:
            memo.verdicts.clear()
            memo.heats.clear()
            memo.stale.clear()
        else:
            for node in changed:
                if memo.verdicts.pop(node, None) is not None:
                    memo.stale.add(node)
                memo.heats.pop(node, None)
        memo.version = inflight.version
        return memo


@dataclass(slots=True)
class SizeMemo:
    version: int  # InFlight.version the entries are current with
    verdicts: dict[str, Verdict]  # corrected_one per node
    heats: dict[str, float | None]  # corrected_heat per node, filled only when soft mode asks
    stale: set[str]  # nodes whose verdict was dropped for a change in flight: re-judge before reading
