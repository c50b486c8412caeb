"""A hot node as the plan sees it: which of its pods may move (selection.exclusion, what earlier
cycles learned: a PDB's recent refusal, a workload paused by the stop rule; measured usage),
each with its share of the node, and how far above its thresholds the node is on the signals a
pod's usage is a share of.

No pod moves off a node that is not Ready, is being deleted or is gone: what leaves such a node
is the node lifecycle controller's to decide (its taints and tolerationSeconds), its kubelet
may never confirm a pod's end, and its metrics may be the last it sent (the descheduler, too,
only works on Ready nodes)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from loadext.config.schema import Rebalance
from loadext.core.herd.learned import PodKey
from loadext.core.herd.usage import RESOURCES, Usage
from loadext.core.rebalance.fit.model import NodeFacts
from loadext.core.rebalance.followup import Pause
from loadext.core.rebalance.plan import HotNode
from loadext.core.rebalance.selection import Candidate, PodFacts, exclusion
from loadext.core.rebalance.streaks import SignalHeat


@dataclass(frozen=True)
class Holds:
    """What earlier cycles learned that keeps a pod where it is for a while."""

    backing_off: Collection[str] = ()  # uids whose eviction a PodDisruptionBudget refused within the herd window
    paused: Mapping[str, Pause] = field(default_factory=dict)  # workload -> the stop rule's pause

    def why(self, pod: PodFacts) -> str | None:
        if pod.uid in self.backing_off:
            return "a PodDisruptionBudget refused its eviction; backing off"
        pause = self.paused.get(pod.workload)
        if pause is not None:
            return f"moves of {pod.workload} are paused (stopRule): {pause.why}"
        return None


def unfit_source(node: NodeFacts | None) -> str | None:
    """Why no pod may move off this node at all, if so (`node`: as the API server lists it now)."""
    if node is None:
        return "the node is gone from the API server"
    if node.deleting:
        return "the node is being deleted"
    if not node.ready:
        return "the node is not Ready: the node lifecycle controller decides what leaves it"
    return None


def hot_node(
    name: str,
    node: NodeFacts | None,
    signals: tuple[SignalHeat, ...],
    over: Mapping[str, float],
    allocatable: Mapping[str, float],
    pods: Sequence[PodFacts],
    usage: Mapping[str, Mapping[PodKey, float]],
    policy: Rebalance,
    holds: Holds,
    now: float,
) -> HotNode:
    """`node`: the node as the API server lists it (None: not listed); `over`: signal -> value -
    threshold where above it now; `usage`: resource -> pod -> measured."""
    overshoot = {s: v for s, v in over.items() if s in RESOURCES}
    unfit = unfit_source(node)
    if unfit is not None:
        return HotNode(name, signals, overshoot, (), (("", unfit),))
    candidates: list[Candidate] = []
    excluded: list[tuple[str, str]] = []
    for pod in pods:
        key = (pod.namespace, pod.name)
        why = exclusion(pod, policy, now) or holds.why(pod)
        if why is None and not any(key in usage.get(r, {}) for r in RESOURCES):
            why = "no measured usage (herdGuard.podUsage has no series for it)"
        if why is not None:
            excluded.append((pod.key, why))
            continue
        measured = Usage(usage.get("cpu", {}).get(key, 0.0), usage.get("memory", {}).get(key, 0.0))
        shares = {r: measured.get(r) / allocatable[r] for r in RESOURCES if allocatable.get(r)}
        candidates.append(Candidate(pod, measured, shares))
    if over and not overshoot:
        excluded.insert(0, ("", f"over its threshold on {', '.join(over)} only: no per-pod usage to choose by"))
        candidates.clear()
    return HotNode(name, signals, overshoot, tuple(candidates), tuple(excluded))
