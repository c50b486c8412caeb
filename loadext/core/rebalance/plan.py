"""One cycle's moves: per hot node the chosen pods (selection.py), each with a target, within
the limits.

- A node moves at most `maxPerNodePerCycle` pods per cycle, and after an eviction waits until
  the herd window has passed, so that its metrics show the effect before the next one.
- At most `maxPerCycle` pods move per cycle in all, hottest nodes first.
- A workload (a pod's owner) has at most `maxUnavailablePerWorkload` pods moving: evicted
  within the herd window.
- A pod moves only to a node that passes loadext's own filter with the pod's measured usage
  added and that the real scheduler would accept for its replacement (targets.py); otherwise the
  plan says `no target`, and why, and leaves it.

Each step says why in words an Event can carry: `node cpu 93% >= 90% for 5m`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from loadext.config.schema import Rebalance
from loadext.core.herd.usage import Usage
from loadext.core.rebalance.selection import Candidate, choose
from loadext.core.rebalance.streaks import SignalHeat
from loadext.core.rebalance.targets import TargetFor

# Results of a step, the label values of loadext_rebalance_evictions_total (the executor turns
# "planned" into evicted, pdb_blocked, dry_run or failed).
RESULTS = ("evicted", "pdb_blocked", "dry_run", "failed", "no_target", "rate_limited", "no_candidate")


@dataclass(frozen=True)
class HotNode:
    name: str
    signals: tuple[SignalHeat, ...]  # the hot ones
    overshoot: dict[str, float]  # signal -> value - threshold, for the signals above it now
    candidates: tuple[Candidate, ...]  # its pods that may move
    excluded: tuple[tuple[str, str], ...] = ()  # (pod, why it stays)

    def reason(self, now: float) -> str:
        parts = []
        for heat in self.signals:
            value = "no data" if heat.value is None else f"{heat.value:.0%}"
            level = f"> {heat.threshold:.0%} (overFor)" if heat.lingered else f">= {heat.evict_at:.0%}"
            parts.append(f"{heat.signal} {value} {level} for {_duration(now - heat.since)}")
        return "node " + ", ".join(parts)

    @property
    def worst_overshoot(self) -> float:
        return max(self.overshoot.values(), default=0.0)


@dataclass(frozen=True)
class Step:
    node: str
    pod: str  # namespace/name; "" when the whole node is skipped
    reason: str
    result: str = "planned"  # or a RESULTS value
    target: str = ""
    skipped: str = ""  # why it does not move
    uid: str = ""
    workload: str = ""
    usage: Usage = field(default_factory=Usage)  # measured: what its replacement will use, for the herd guard


@dataclass
class Pacing:
    """What earlier cycles did that limits this one: nodes waiting out the herd window after an
    eviction, and each workload's recent evictions."""

    node_until: dict[str, float] = field(default_factory=dict)
    workload_evictions: dict[str, list[float]] = field(default_factory=dict)

    def evicted(self, node: str, workload: str, now: float, window: float) -> None:
        self.node_until[node] = now + window
        self.workload_evictions.setdefault(workload, []).append(now)

    def moving(self, workload: str, now: float, window: float) -> int:
        recent = [t for t in self.workload_evictions.get(workload, ()) if now - t < window]
        if recent:
            self.workload_evictions[workload] = recent
        else:
            self.workload_evictions.pop(workload, None)
        return len(recent)

    def cooling(self, node: str, now: float) -> float | None:
        until = self.node_until.get(node)
        if until is None or until <= now:
            self.node_until.pop(node, None)
            return None
        return until


def plan(
    nodes: Sequence[HotNode],
    policy: Rebalance,
    pacing: Pacing,
    window: float,
    now: float,
    target_for: TargetFor,
) -> list[Step]:
    steps: list[Step] = []
    moves = 0
    moving: dict[str, int] = {}
    for node in sorted(nodes, key=lambda n: (-n.worst_overshoot, n.name)):
        reason = node.reason(now)
        until = pacing.cooling(node.name, now)
        if until is not None:
            wait = f"waiting {until - now:.0f}s more for the herd window after its last eviction"
            steps.append(Step(node.name, "", reason, "rate_limited", skipped=wait))
            continue
        choice = choose(node.candidates, node.overshoot)
        if not choice.pods:
            why = "; ".join(f"{pod}: {cause}" for pod, cause in node.excluded[:5]) or "it runs no pods"
            steps.append(Step(node.name, "", reason, "no_candidate", skipped=f"no pod may move ({why})"))
            continue
        on_node = 0
        for candidate in choice.pods:
            pod = candidate.pod
            if on_node >= policy.max_per_node_per_cycle:
                break
            if moves >= policy.max_per_cycle:
                limit = f"maxPerCycle ({policy.max_per_cycle}) reached"
                steps.append(Step(node.name, pod.key, reason, "rate_limited", skipped=limit, uid=pod.uid))
                break
            in_flight = pacing.moving(pod.workload, now, window) + moving.get(pod.workload, 0)
            if in_flight >= policy.max_unavailable_per_workload:
                limit = f"{pod.workload} has {in_flight} pod(s) moving (maxUnavailablePerWorkload)"
                steps.append(Step(node.name, pod.key, reason, "rate_limited", skipped=limit, uid=pod.uid))
                continue
            target = target_for(candidate, node.name)
            if not target.node:
                skipped = f"no target: {target.refused}"
                steps.append(Step(node.name, pod.key, reason, "no_target", skipped=skipped, uid=pod.uid))
                continue
            steps.append(
                Step(
                    node.name,
                    pod.key,
                    reason,
                    target=target.node,
                    uid=pod.uid,
                    workload=pod.workload,
                    usage=candidate.usage,
                )
            )
            moves += 1
            on_node += 1
            moving[pod.workload] = moving.get(pod.workload, 0) + 1
    return steps


def _duration(seconds: float) -> str:
    if seconds >= 90:
        return f"{seconds / 60:.0f}m"
    return f"{max(seconds, 0):.0f}s"
