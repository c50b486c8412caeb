"""Learned usage estimates: what a pod will really use, learned from what pods really use.

The factor rule (usage.py) guesses a pod's usage from its spec, and a spec's limit can be far
above use: a 3-core limit counted as 2.55 cores against 0.97 used refuses nodes that have room.
So each resource of an estimate comes from the best source there is, in this order:

1. measured: the pod's own usage, once Prometheus has it (herdGuard.podUsage queries, the
   cAdvisor series by namespace and pod). Only pods already placed have it: it replaces their
   estimate in the node's in-flight correction for the rest of the window.
2. owner: the median of the latest measured usage of the owner's recent pods (the same
   ReplicaSet, StatefulSet, Job, ...; a Deployment's ReplicaSets count as one owner, so a
   rollout keeps its history). The median is the estimate least far off in absolute terms.
3. factor: the factor rule over the pod's requests and limits, when nothing is measured.

Before all of these, for a herd window after the rebalancer evicts a pod: moved, the evicted
pod's own measured usage, for its owner's next pods. The replacement of a pod whose usage
drifted is that pod again; the owner's history, learned before the drift (or from pods that did
not drift), would let the filter pass it onto a node the rebalancer judged too full for it.

Memory: OWNERS owners (LRU) and the PODS_PER_OWNER most recently placed pods each, whatever
the cluster does; and per bound pod one small KnownPods entry, which the pod watch removes
when the pod goes (about 400 bytes a pod: docs/benchmarks.md).
"""

from __future__ import annotations

import heapq
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from statistics import median
from typing import Literal

from cachetools import LRUCache

from loadext.core.herd.usage import RESOURCES, Usage

EstimateSource = Literal["measured", "moved", "owner", "factor"]
PodKey = tuple[str, str]  # (namespace, name): how the cAdvisor series name a pod
OwnerRef = tuple[str, str, bool]  # (kind, name, controller) of one ownerReference


@dataclass(frozen=True, slots=True)
class Estimate:
    usage: Usage
    sources: tuple[EstimateSource, EstimateSource]  # per resource, in RESOURCES order (cpu, memory)


@dataclass(frozen=True, slots=True)
class EstimateError:
    """How far off an estimate was when the pod's own usage became known: (estimated -
    measured) / measured, so 1.0 is twice the real use and -0.5 half of it."""

    resource: str
    source: str  # what the estimate came from: owner or factor
    ratio: float


@dataclass(slots=True)
class _Sample:
    placed_at: float
    usage: dict[str, float]  # resource -> the latest measured value


def owner_of(namespace: str, refs: Iterable[OwnerRef], template_hash: str = "") -> str:
    """The pod's controller as "namespace/Kind/name" ("" without one). A ReplicaSet named
    `<deployment>-<pod-template-hash>` folds into its Deployment, so a new revision starts
    with the history of the old one rather than none."""
    listed = list(refs)
    chosen = next((ref for ref in listed if ref[2]), listed[0] if listed else None)
    if chosen is None or not chosen[1]:
        return ""
    kind, name, _ = chosen
    if kind == "ReplicaSet" and template_hash and name.endswith("-" + template_hash):
        kind, name = "Deployment", name[: -len(template_hash) - 1]
    return f"{namespace}/{kind}/{name}"


class KnownPods:
    """The bound pods the pod watch reports: by UID (preempt's victims) and by (namespace,
    name) (how Prometheus names a pod), with each pod's owner and placement time.

    One entry per bound pod, so kept small (about 300 bytes of objects a pod): one tuple a pod,
    names found per namespace rather than by a tuple key, the namespace and owner strings
    interned (a few hundred owners share them among thousands of pods)."""

    def __init__(self) -> None:
        self._by_uid: dict[str, tuple[str, str, str, float]] = {}  # uid -> (namespace, name, owner, placed_at)
        self._uid_of: dict[str, dict[str, str]] = {}  # namespace -> name -> uid

    def add(self, uid: str, pod: PodKey, owner: str, placed_at: float) -> None:
        namespace, name = sys.intern(pod[0]), pod[1]
        known = self._by_uid.get(uid)
        if known is not None and known[:2] != (namespace, name):
            self.remove(uid)
        self._by_uid[uid] = (namespace, name, sys.intern(owner), placed_at)
        self._uid_of.setdefault(namespace, {})[name] = uid  # a newer pod of the same name (a StatefulSet's) takes it

    def remove(self, uid: str) -> None:
        known = self._by_uid.pop(uid, None)
        if known is None:
            return
        names = self._uid_of.get(known[0])
        if names is not None and names.get(known[1]) == uid:
            del names[known[1]]
            if not names:
                del self._uid_of[known[0]]

    def by_uid(self, uid: str) -> tuple[PodKey, str, float] | None:
        """(pod, owner, placed_at) of a known pod."""
        known = self._by_uid.get(uid)
        return None if known is None else ((known[0], known[1]), known[2], known[3])

    def by_name(self, pod: PodKey) -> tuple[PodKey, str, float] | None:
        uid = self._uid_of.get(pod[0], {}).get(pod[1])
        return self.by_uid(uid) if uid is not None else None

    def __len__(self) -> int:
        return len(self._by_uid)


class UsageHistory:
    """Measured usage per pod, as of the last refresh, and per owner its recent pods' usage."""

    OWNERS = 4096
    PODS_PER_OWNER = 32

    def __init__(self) -> None:
        self._measured: dict[str, Mapping[PodKey, float]] = {}  # resource -> pod -> value
        self.pods = KnownPods()  # the pod watch's, kept by the ledger (a full list replaces it)
        self._by_owner: LRUCache[str, dict[PodKey, _Sample]] = LRUCache(maxsize=self.OWNERS)
        self._moved: dict[str, tuple[Usage, float]] = {}  # owner -> an evicted pod's usage, until when

    def moved(self, owner: str, usage: Usage, now: float, until: float) -> None:
        """The rebalancer evicted a pod of `owner` that used `usage`: its replacement's estimate
        until `until` (the herd window). Expired ones go here, so the map is as small as the
        evictions of one window."""
        self._moved = {o: m for o, m in self._moved.items() if m[1] > now}
        if owner:
            self._moved[owner] = (usage, until)

    def publish(self, measured: Mapping[str, Mapping[PodKey, float]], settled_before: float) -> None:
        """One refresh round's measured usage per resource (a resource absent: its query is off
        or failed, and nothing is known of it this round). Only pods placed before
        `settled_before` teach their owner: a younger pod's series may still read low."""
        self._measured = dict(measured)
        rounds: dict[str, dict[PodKey, _Sample]] = {}  # owner -> its pods measured this round
        for resource, values in measured.items():
            for pod, value in values.items():
                known = self.pods.by_name(pod)
                if known is None or not known[1] or known[2] > settled_before:
                    continue
                _, owner, placed_at = known
                sample = rounds.setdefault(owner, {}).setdefault(pod, _Sample(placed_at, {}))
                sample.usage[resource] = value
        for owner, pods in rounds.items():
            merged = self._by_owner.get(owner, {})
            for pod, sample in pods.items():
                known_sample = merged.get(pod)
                if known_sample is None:
                    merged[pod] = sample
                else:  # this round's values replace the pod's older ones, resource by resource
                    known_sample.usage.update(sample.usage)
            if len(merged) > self.PODS_PER_OWNER:  # the newest pods: what the owner runs now
                newest = heapq.nlargest(self.PODS_PER_OWNER, merged.items(), key=lambda item: item[1].placed_at)
                merged = dict(newest)
            self._by_owner[owner] = merged

    def measured_by_uid(self, uid: str, settled_before: float) -> Usage:
        """A bound pod's measured usage (0 for what is not measured, or not yet believable)."""
        known = self.pods.by_uid(uid)
        if known is None or known[2] > settled_before:
            return Usage()
        pod = known[0]
        return Usage(self.measured(pod, "cpu") or 0.0, self.measured(pod, "memory") or 0.0)

    def measured_counts(self) -> dict[str, int]:
        """resource -> pods measured in the last round."""
        return {resource: len(values) for resource, values in self._measured.items()}

    def measured(self, pod: PodKey, resource: str) -> float | None:
        values = self._measured.get(resource)
        return values.get(pod) if values is not None else None

    def owner_median(self, owner: str, resource: str) -> float | None:
        pods = self._by_owner.get(owner) if owner else None
        if not pods:
            return None
        values = [sample.usage[resource] for sample in pods.values() if resource in sample.usage]
        return median(values) if values else None

    def estimate(self, owner: str, factor: Usage, now: float) -> Estimate:
        """A pod's estimate before its own usage is known: a moved pod's usage, else per
        resource its owner's history, else the factor rule's value. (Measured usage replaces it
        once placed: guard.py.)"""
        moved = self._moved.get(owner) if owner else None
        if moved is not None:
            if moved[1] > now:
                return Estimate(moved[0], ("moved", "moved"))
            del self._moved[owner]
        values: list[float] = []
        sources: list[EstimateSource] = []
        for resource in RESOURCES:
            value = self.owner_median(owner, resource)
            source: EstimateSource = "owner"
            if value is None:
                value, source = factor.get(resource), "factor"
            values.append(value)
            sources.append(source)
        return Estimate(Usage(values[0], values[1]), (sources[0], sources[1]))

    def __len__(self) -> int:
        return len(self._by_owner)
