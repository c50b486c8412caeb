"""Stranded pods: the ones loadext's filter left with no node, remembered until a node reopens.

kube-scheduler parks a pod that no node fits in its unschedulable pool. Because an extender
removed nodes, the pod carries the pseudo-plugin "Extender" as its rejector, and *any* cluster
event moves it back to the queue (kubernetes#122019, schedule_one.go findNodesThatFitPod);
without an event it waits for the pool's flush, up to 5 minutes. Load falling, the herd
window passing or a config edit are not cluster events. So loadext remembers, per stranded
pod, the nodes it refused and the pod's own estimate; when one of those nodes would pass it
now, actors/requeue.py makes a Node event (an annotation) the scheduler reacts to.

One event requeues every parked pod that loadext refused, so a nudge serves all stranded pods
at once, and one per pod is never needed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cachetools import LRUCache

from loadext.core.herd.usage import Usage

# The scheduler's podMaxInUnschedulablePodsDuration (5 min) plus its 30 s flush period: a pod
# stranded longer than this has been retried by the scheduler itself.
FORGET_AFTER = 330.0
# A nudged pod that was not retried (its filter call did not come back) is nudged again after
# this long: the event may have reached the scheduler while the pod was still in backoff.
RENUDGE_AFTER = 10.0


@dataclass(slots=True)
class Stranded:
    nodes: frozenset[str]  # the candidates loadext refused, every one of them
    incoming: Usage  # the pod's own estimate, which those nodes were judged with
    since: float
    nudged_at: float | None = None


class StrandedPods:
    """uid -> the filter call that left the pod without a node; bounded (LRU), forgotten once
    a filter passes a node for it, it is bound, or FORGET_AFTER passes."""

    def __init__(self, size: int = 10_000) -> None:
        self._pods: LRUCache[str, Stranded] = LRUCache(maxsize=size)

    def strand(self, uid: str, nodes: Iterable[str], incoming: Usage, now: float) -> None:
        self._pods[uid] = Stranded(frozenset(nodes), incoming, now)

    def release(self, uid: str) -> None:
        self._pods.pop(uid, None)

    def due(self, now: float) -> dict[Usage, set[str]]:
        """The nodes to re-judge, grouped by the incoming estimate they were refused with: only
        pods not nudged within RENUDGE_AFTER. Pods of one workload share an estimate, so a burst
        of them is one group, and a node is judged once per group."""
        self._forget(now)
        groups: dict[Usage, set[str]] = {}
        for pod in self._pods.values():
            if pod.nudged_at is None or now - pod.nudged_at >= RENUDGE_AFTER:
                groups.setdefault(pod.incoming, set()).update(pod.nodes)
        return groups

    def nudged(self, now: float) -> int:
        """A Node event was made: the scheduler requeues every pod parked with loadext as its
        rejector, so every stranded pod counts as nudged (a pod it retries and loadext refuses
        again is stranded afresh). Returns how many there are."""
        for pod in self._pods.values():
            pod.nudged_at = now
        return len(self._pods)

    def _forget(self, now: float) -> None:
        for uid in [uid for uid, pod in self._pods.items() if now - pod.since >= FORGET_AFTER]:
            del self._pods[uid]

    def __len__(self) -> int:
        return len(self._pods)
