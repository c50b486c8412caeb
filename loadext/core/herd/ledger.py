"""What the pod watch and Prometheus tell the herd guard: the pods in flight and their usage.

The ledger counts each bound pod at its estimate (usage.py, learned.py) while it is recent,
replaces the estimate with the pod's measured usage once Prometheus has it, and notes how far
off the estimate was (loadext_estimate_error_ratio). The guard (guard.py) reads it to correct
verdicts; the Cluster hands it the pod events.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import NamedTuple

from cachetools import LRUCache

from loadext.config import Config
from loadext.core.herd.inflight import InFlight, Placement
from loadext.core.herd.learned import Estimate, EstimateError, KnownPods, PodKey, UsageHistory
from loadext.core.herd.usage import RESOURCES, EstimateRule, Usage, pod_estimate
from loadext.core.requests import BoundPod, PodRef


class HerdReport(NamedTuple):
    """What explain shows of the herd guard's ledger."""

    in_flight: Mapping[str, tuple[Usage, int]]  # node -> (summed estimate, placements) in the window
    pods_in_flight: int
    owners_learned: int  # owners with measured pods, for learned estimates
    pods_measured: dict[str, int]  # resource -> pods measured in the last round


class PodLedger:
    def __init__(self, config: Config, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.clock = clock
        self._rule = EstimateRule.of(config.herd_guard)
        self.inflight = InFlight(config.herd_guard.window)
        self.learned = UsageHistory()
        self._errors_noted: LRUCache[tuple[str, str], bool] = LRUCache(maxsize=65536)
        self._estimate_errors: list[EstimateError] = []  # until pod_usage_measured hands them out
        self._listing: tuple[dict[str, Placement], KnownPods] | None = None  # a list's pages so far

    def configure(self, config: Config) -> None:
        self.config = config
        self._rule = EstimateRule.of(config.herd_guard)
        self.inflight.window = config.herd_guard.window

    def estimate(self, pod: PodRef) -> Estimate:
        """The pod's usage as learned (learned.py): its owner's recent pods', else the factor
        rule. Once placed and measured, its own usage replaces it (_with_measured)."""
        factor = pod_estimate(pod.containers, pod.init_containers, pod.overhead, self._rule)
        return self.learned.estimate(pod.owner, factor, self.clock())

    def report(self, now: float) -> HerdReport:
        learned = self.learned
        return HerdReport(self.inflight.per_node(now), len(self.inflight), len(learned), learned.measured_counts())

    def place(self, uid: str, node: str, placed_at: float, usage: Usage) -> None:
        self.inflight.place(uid, Placement(node, placed_at, usage), self.clock())

    def pod_bound(self, pod: BoundPod) -> None:
        """A pod from the pod watch: counted while recent, forgotten once finished or deleted."""
        if pod.finished:
            self.pod_gone(pod.uid)
        else:
            self._learn(pod, self.learned.pods)
            now = self.clock()
            if self.inflight.counts(pod.placed_at, now):
                self.inflight.place(pod.uid, self._placement(pod), now)
            else:  # placed long ago (a status update): no estimate to make
                self.inflight.remove(pod.uid)

    def pods_listed(self, pods: list[BoundPod], first: bool = True, last: bool = True) -> None:
        """A page of a full list of bound pods. The first page starts a new list (a list
        restarted midway starts over); the last replaces what the watch told before with it.
        Each page is kept in compact form at once, so a list of 150 000 pods never holds
        them all decoded."""
        if first or self._listing is None:
            self._listing = ({}, KnownPods())
        placements, known = self._listing
        now = self.clock()
        for pod in pods:
            if not pod.finished:
                self._learn(pod, known)
                if self.inflight.counts(pod.placed_at, now):
                    placements[pod.uid] = self._placement(pod)
        if last:
            self._listing = None
            self.learned.pods = known
            self.inflight.replace_all(placements, now)

    def pod_gone(self, uid: str) -> None:
        self.inflight.remove(uid)
        self.learned.pods.remove(uid)

    def pod_usage_measured(self, measured: Mapping[str, Mapping[PodKey, float]]) -> list[EstimateError]:
        """A refresh round's measured usage per pod: it teaches the owners' history, and each
        pod in flight that has it is counted with it from now on instead of its estimate.
        Returns how far off the estimates it replaced (since the last call) were."""
        now = self.clock()
        self.learned.publish(measured, now - self.config.herd_guard.pod_usage_settle)
        if measured:
            for uid, placement in self.inflight.placements():
                self.inflight.place(uid, self._with_measured(uid, placement), now)  # a no-op if unchanged
        errors, self._estimate_errors = self._estimate_errors, []
        return errors

    def _settled(self, placed_at: float) -> bool:
        """Placed long enough ago that its measured usage is its usage (HerdGuard.pod_usage_settle)."""
        return self.clock() - placed_at >= self.config.herd_guard.pod_usage_settle

    @staticmethod
    def _learn(bound: BoundPod, known: KnownPods) -> None:
        pod = bound.pod
        known.add(pod.uid, (pod.namespace, pod.name), pod.owner, bound.placed_at)

    def _placement(self, bound: BoundPod) -> Placement:
        pod = bound.pod
        estimate = self.estimate(pod)
        key = (pod.namespace, pod.name)
        placement = Placement(bound.node, bound.placed_at, estimate.usage, key, estimate.sources)
        return self._with_measured(pod.uid, placement)

    def _with_measured(self, uid: str, placement: Placement) -> Placement:
        """The placement with its pod's measured usage, per resource where Prometheus has it
        and the pod is settled; the first time for a pod, how far off its estimate was is
        noted for loadext_estimate_error_ratio."""
        if placement.pod is None or not self._settled(placement.placed_at):
            return placement  # loadext's own guess (the watch replaces it), or too young to measure
        values, sources = [placement.usage.cpu, placement.usage.memory], list(placement.sources)
        for i, resource in enumerate(RESOURCES):
            value = self.learned.measured(placement.pod, resource)
            if value is None:
                continue
            if sources[i] != "measured" and value > 0 and (uid, resource) not in self._errors_noted:
                self._errors_noted[uid, resource] = True
                self._estimate_errors.append(EstimateError(resource, sources[i], (values[i] - value) / value))
            values[i], sources[i] = value, "measured"
        measured_at = placement.measured_at
        if "measured" in sources and not measured_at:  # it runs: from now its node's metrics take it in
            counted = self.inflight.get(uid)  # a watch event re-estimates a pod measured before
            measured_at = counted.measured_at if counted is not None and counted.measured_at else self.clock()
        return replace(
            placement, usage=Usage(values[0], values[1]), sources=(sources[0], sources[1]), measured_at=measured_at
        )
