"""Which pods of a hot node may move, and the fewest that bring it back within its thresholds.

A pod never moves when it is (the reason is what the plan and `explain` print):
a DaemonSet's (it would come back to the same node), a mirror or static pod, a bare pod (no
controller recreates it), annotated `loadext.io/evict: "false"`, in an excluded namespace
(default kube-system), at or above system-cluster-critical priority, using local storage
(emptyDir, hostPath) unless `evictLocalStorage`, younger than `minPodAge` (its usage is not
known yet), not running, already being deleted, or asking the scheduler for what the fit cannot
judge (a claim on a volume, a resource claim: `cannot verify ...`, fit/verifiable.py).

The choice, among the pods that may move, is the fewest whose measured usage brings every
signal of the node within its filter threshold, not just under evictAt: moving less would
leave the node hot for the next cycle. Of the sets that small, the one whose pods have the
lowest priorities, then the one that overshoots least (the pods that best cover what is too
much). Every set of each size is tried while there are few enough (`SEARCH_BUDGET`); past that,
greedily the pod that covers most of what is left. When even every movable pod together is
not enough, the choice is all of them, best first, and says so.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from loadext.config.schema import Rebalance
from loadext.core.herd.usage import Usage
from loadext.core.rebalance.fit import unverifiable
from loadext.core.rebalance.fit.model import PodConstraints

SYSTEM_CLUSTER_CRITICAL = 2_000_000_000  # the priority of the system-cluster-critical class
EVICT_ANNOTATION = "loadext.io/evict"
SEARCH_BUDGET = 20_000  # sets of one size tried exhaustively, at most
_ROUNDING = 1e-9  # shares are sums of floats: 0.29 + 0.35 + 0.35 must cover 0.99


@dataclass(frozen=True)
class PodFacts:
    """What the rebalancer knows of a pod on a hot node (actors/rebalancer.py maps it)."""

    namespace: str
    name: str
    uid: str
    controller_kind: str  # the kind of its controller owner reference; "" for none
    workload: str  # its owner as the herd guard keys it: the unit of maxUnavailablePerWorkload
    priority: int
    evict_annotation: str | None
    mirror: bool  # a static pod's mirror (kubernetes.io/config.mirror)
    local_storage: bool  # an emptyDir or hostPath volume
    created: float
    phase: str
    deleting: bool
    requests: Usage
    constraints: PodConstraints  # what the scheduler will ask of its replacement's node

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def exclusion(pod: PodFacts, policy: Rebalance, now: float) -> str | None:
    """Why this pod must stay, or None when it may move."""
    if pod.deleting:
        return "already being deleted"
    if pod.phase != "Running":
        return f"not running ({pod.phase or 'no phase'})"
    if pod.mirror:
        return "a static pod"
    if pod.controller_kind == "DaemonSet":
        return "a DaemonSet's pod"
    if not pod.controller_kind:
        return "a bare pod: no controller would recreate it"
    if pod.evict_annotation is not None and pod.evict_annotation.strip().lower() == "false":
        return f'annotated {EVICT_ANNOTATION}: "false"'
    if pod.namespace in policy.excluded_namespaces:
        return f"namespace {pod.namespace} is excluded"
    if pod.priority >= SYSTEM_CLUSTER_CRITICAL:
        return f"priority {pod.priority} is system-critical"
    if pod.local_storage and not policy.evict_local_storage:
        return "uses local storage (emptyDir or hostPath)"
    if now - pod.created < policy.min_pod_age:
        return f"younger than minPodAge ({now - pod.created:.0f}s)"
    return unverifiable(pod.constraints)


@dataclass(frozen=True)
class Candidate:
    pod: PodFacts
    usage: Usage  # measured
    shares: Mapping[str, float]  # signal -> the share of the node's capacity this usage is


@dataclass(frozen=True)
class Choice:
    pods: tuple[Candidate, ...]  # in the order to move them
    enough: bool  # whether moving them all brings the node within its thresholds


def choose(candidates: Sequence[Candidate], overshoot: Mapping[str, float]) -> Choice:
    """`overshoot`: signal -> how far above its threshold the node is (only signals above)."""
    useful = [c for c in candidates if any(c.shares.get(s, 0.0) > 0 for s in overshoot)]
    if not overshoot or not useful:
        return Choice((), not overshoot)
    for size in range(1, len(useful) + 1):
        if math.comb(len(useful), size) > SEARCH_BUDGET:
            break
        covering = [group for group in itertools.combinations(useful, size) if _covers(group, overshoot)]
        if covering:
            return Choice(_in_order(min(covering, key=lambda group: _rank(group, overshoot)), overshoot), True)
    return _greedy(useful, overshoot)


def _covers(group: Sequence[Candidate], overshoot: Mapping[str, float]) -> bool:
    return all(sum(c.shares.get(s, 0.0) for c in group) >= need - _ROUNDING for s, need in overshoot.items())


def _rank(group: Sequence[Candidate], overshoot: Mapping[str, float]) -> tuple[tuple[int, ...], float]:
    surplus = sum(sum(c.shares.get(s, 0.0) for c in group) - need for s, need in overshoot.items())
    return tuple(sorted(c.pod.priority for c in group)), surplus


def _coverage(candidate: Candidate, left: Mapping[str, float]) -> float:
    """How much of what is left above the thresholds this pod takes away (0..number of signals)."""
    return sum(min(candidate.shares.get(s, 0.0), need) / need for s, need in left.items() if need > _ROUNDING)


def _in_order(group: Sequence[Candidate], overshoot: Mapping[str, float]) -> tuple[Candidate, ...]:
    return tuple(sorted(group, key=lambda c: (c.pod.priority, -_coverage(c, overshoot), c.pod.key)))


def _greedy(useful: Sequence[Candidate], overshoot: Mapping[str, float]) -> Choice:
    left, chosen, pool = dict(overshoot), [], list(useful)
    while pool and any(need > _ROUNDING for need in left.values()):
        best = max(pool, key=lambda c: (_coverage(c, left), -c.pod.priority))
        pool.remove(best)
        chosen.append(best)
        left = {s: need - best.shares.get(s, 0.0) for s, need in left.items()}
    enough = all(need <= _ROUNDING for need in left.values())
    return Choice(_in_order(chosen, overshoot), enough)
