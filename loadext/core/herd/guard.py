"""The herd guard as the verbs see it: one object that corrects verdicts, or one that does nothing.

`ActiveGuard` answers the verbs' questions from the ledger (ledger.py: the pods in flight and
what was learned of pods' usage), each judged pod's estimate and the memo of corrected
verdicts. `NO_GUARD` answers them when `herdGuard.enabled` is false: no correction, no
estimate, so the verbs never ask whether the guard is on. The ledger keeps its state while
the guard is switched off (a ConfigMap edit): the pod watch, not the guard, decides what it holds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from cachetools import LRUCache

from loadext.config import Config
from loadext.core.herd.correction import Candidate, Capacity, corrected, corrected_overload
from loadext.core.herd.inflight import NO_PLACEMENTS, Placement
from loadext.core.herd.learned import Estimate
from loadext.core.herd.ledger import PodLedger
from loadext.core.herd.memo import IncomingVerdicts
from loadext.core.herd.usage import Usage
from loadext.core.policy import DecisionTable, Verdict
from loadext.core.requests import PodRef, Victims
from loadext.core.snapshot import Sample

InFlightSums = Mapping[str, tuple[Usage, int]]  # node -> (summed estimate, pods), immutable


@dataclass(frozen=True, slots=True)
class View:
    """What a correction is judged against, as of one call: the table and the samples it was
    built from, each node's allocatable, and the versions that make a memo entry stale."""

    table: DecisionTable
    samples: Mapping[str, Mapping[str, Sample]]  # identity -> signal -> sample (the snapshot)
    capacity: Capacity
    versions: tuple[int, int]  # (allocatable, identity mapping)
    config: Config
    now: float

    def candidate(self, name: str, identity: str) -> Candidate:
        table = self.table
        return Candidate(name, table.by_identity[identity], self.samples.get(identity), table.pools.get(identity))


# What a guard is handed to build a View when it needs one: NO_GUARD never does, so a call with
# the guard off pays nothing for it (a View costs ~1.4 us).
ViewOf = Callable[[], View]


class Guard(Protocol):
    def incoming(self, pod: PodRef | None) -> tuple[Usage, Placement | None]:
        """The pod's own estimate (recorded for the calls that follow) and where an earlier
        call expected it; nothing while the guard is off."""

    def corrected(
        self, view_of: ViewOf, names: list[str], identities: list[str], incoming: Usage, own: Placement | None
    ) -> list[Verdict] | None:
        """One verdict per name with the pods in flight and the incoming pod counted; None
        when nothing is corrected and the table's verdicts stand."""

    def overloads(
        self, view_of: ViewOf, names: list[str], identities: list[str], measured: list[Verdict], pod: PodRef | None
    ) -> list[float | None]:
        """Each candidate passing by measurement: how full it would be with what is in flight."""

    def preemption(
        self, view_of: ViewOf, names: list[str], identities: list[str], pod: PodRef, victims: Mapping[str, Victims]
    ) -> list[Verdict] | None:
        """Each node judged as it would be after the preemption; None: the table's verdicts."""

    def estimate_of(self, uid: str) -> Estimate | None:
        """The estimate of a pod this guard judged, for stranding and the decision log."""

    def in_flight(self, now: float) -> InFlightSums | None:
        """node -> the pods in flight there, immutable; None while off."""

    def count_now(self, uid: str, node: str) -> None:
        """A judged pod placed (loadext's guess or its own bind): count it there from now."""

    @property
    def soft(self) -> bool:
        """herdGuard.soft: pass the least full when only the guard refuses every candidate."""


class ActiveGuard:
    """The herd guard on: each judged pod's estimate, and the verdicts corrected with what the
    ledger counts in flight (see the package's modules for each rule)."""

    def __init__(self, config: Config, ledger: PodLedger) -> None:
        self.config = config
        self.ledger = ledger
        self._estimates: LRUCache[str, Estimate] = LRUCache(maxsize=4096)
        self._memo = IncomingVerdicts()

    def configure(self, config: Config) -> None:
        self.config = config

    @property
    def soft(self) -> bool:
        return self.config.herd_guard.soft

    def incoming(self, pod: PodRef | None) -> tuple[Usage, Placement | None]:
        if pod is None:
            return Usage(), None
        estimate = self._estimates[pod.uid] = self.ledger.estimate(pod)
        return estimate.usage, self.ledger.inflight.get(pod.uid)

    def estimate_of(self, uid: str) -> Estimate | None:
        return self._estimates.get(uid)

    def in_flight(self, now: float) -> InFlightSums:
        return self.ledger.inflight.per_node(now)

    def count_now(self, uid: str, node: str) -> None:
        estimate = self._estimates.get(uid)
        if estimate is not None:
            self.ledger.place(uid, node, self.ledger.clock(), estimate.usage)

    # --- corrections ------------------------------------------------------------------------

    def corrected(
        self, view_of: ViewOf, names: list[str], identities: list[str], incoming: Usage, own: Placement | None
    ) -> list[Verdict] | None:
        """correction.corrected for every name, at C speed per node: verdicts come from a memo
        per pod size (memo.py) that is kept current with what is in flight, so a call judges
        only the nodes that changed since the last one, and reads the table's verdict of those
        only (a pass over all 500 was 6.5 % of loadext's CPU in the 5000-node scheduler
        benchmark: the Verdicts lie scattered in memory). tests/unit/test_herd.py checks it
        against correcting every candidate one by one."""
        view = view_of()
        if view.table.degraded:
            return None  # every node is decided by the failure policy: nothing to add to
        in_flight = self.ledger.inflight.per_node(view.now)  # expires the window first, so the memo sees it
        size = self._memo.for_size(view.table, view.versions, incoming, self.ledger.inflight)
        memo = size.verdicts
        by_name = identities is names
        index = None if by_name else dict(zip(names, identities, strict=True))

        def judge(name: str, identity: str, own: Placement | None = None) -> Verdict:
            candidate = view.candidate(name, identity)
            placed = in_flight.get(name, NO_PLACEMENTS)
            return corrected(candidate, placed, incoming, view.capacity, view.config, view.now, own)

        for name in size.stale:  # the node or two placed on since the last call
            identity = name if index is None else index.get(name)
            if identity is not None:
                memo[name] = judge(name, identity)
        size.stale.clear()
        try:  # one pass when the memo has every name, as it does between refreshes
            guarded = list(map(memo.__getitem__, names))
        except KeyError:  # names not judged since the table changed
            for name, identity in zip(names, identities, strict=True):
                if name not in memo:
                    memo[name] = judge(name, identity)
            guarded = list(map(memo.__getitem__, names))
        if own is not None and own.node in in_flight:
            # The pod judged was expected on this node by an earlier call: judge that node
            # without it (the memo counts it, as it would for any other pod).
            try:
                at = names.index(own.node)
            except ValueError:  # not a candidate this time
                return guarded
            guarded[at] = judge(own.node, identities[at], own)
        return guarded

    def overloads(
        self, view_of: ViewOf, names: list[str], identities: list[str], measured: list[Verdict], pod: PodRef | None
    ) -> list[float | None]:
        """correction.corrected_overload of each candidate under its thresholds by measurement (None
        for the rest), kept in the memo beside the verdicts: when a burst outgrows the
        estimates every call is a soft pass, and each then computes only the nodes changed
        since the last one, not all ~500 (5.7 ms a pod, filter and prioritize, when it did)."""
        view = view_of()
        estimate = self._estimates.get(pod.uid) if pod is not None else None
        incoming = estimate.usage if estimate is not None else Usage()
        own = self.ledger.inflight.get(pod.uid) if pod is not None else None
        in_flight = self.ledger.inflight.per_node(view.now)

        def overload_of(name: str, identity: str, own: Placement | None = None) -> float | None:
            placed = in_flight.get(name, NO_PLACEMENTS)
            return corrected_overload(view.candidate(name, identity), placed, incoming, view.capacity, view.config, own)

        memo = self._memo.for_size(view.table, view.versions, incoming, self.ledger.inflight).overloads
        for name, identity, verdict in zip(names, identities, measured, strict=True):
            if verdict.passed and name not in memo:
                memo[name] = overload_of(name, identity)
        overloads = list(map(memo.get, names))
        if own is not None and own.node in in_flight:  # the pod's expected node, judged without it
            try:
                at = names.index(own.node)
            except ValueError:  # not a candidate this time
                return overloads
            if overloads[at] is not None:
                overloads[at] = overload_of(own.node, identities[at], own)
        return overloads

    def preemption(
        self, view_of: ViewOf, names: list[str], identities: list[str], pod: PodRef, victims: Mapping[str, Victims]
    ) -> list[Verdict] | None:
        """Each node judged as it would be once its victims are gone and the preemptor runs
        there: measured load, plus the pods in flight on it except the victims among them
        (their estimates leave with them), minus the measured usage of the victims placed
        before (herdGuard.podUsage; a victim not measured stays in the load, erring on the
        side of not preempting), plus the preemptor's own estimate."""
        incoming, _ = self.incoming(pod)
        view = view_of()
        if view.table.degraded:
            return None
        in_flight = self.ledger.inflight.per_node(view.now)
        settled_before = view.now - self.config.herd_guard.pod_usage_settle
        verdicts = []
        for name, identity in zip(names, identities, strict=True):
            usage, placements = in_flight.get(name, NO_PLACEMENTS)
            for uid in victims[name].uids:
                placement = self.ledger.inflight.get(uid)
                if placement is not None and placement.node == name:
                    usage, placements = usage - placement.usage, placements - 1
                elif placement is None:
                    usage = usage - self.ledger.learned.measured_by_uid(uid, settled_before)
            candidate = view.candidate(name, identity)
            verdicts.append(corrected(candidate, (usage, placements), incoming, view.capacity, view.config, view.now))
        return verdicts


class NoGuard:
    """The herd guard switched off: nothing in flight, nothing estimated, nothing corrected."""

    @property
    def soft(self) -> bool:
        return False

    def incoming(self, pod: PodRef | None) -> tuple[Usage, Placement | None]:
        return Usage(), None

    def corrected(
        self, view_of: ViewOf, names: list[str], identities: list[str], incoming: Usage, own: Placement | None
    ) -> list[Verdict] | None:
        return None

    def overloads(
        self, view_of: ViewOf, names: list[str], identities: list[str], measured: list[Verdict], pod: PodRef | None
    ) -> list[float | None]:
        return []

    def preemption(
        self, view_of: ViewOf, names: list[str], identities: list[str], pod: PodRef, victims: Mapping[str, Victims]
    ) -> list[Verdict] | None:
        return None

    def estimate_of(self, uid: str) -> Estimate | None:
        return None

    def in_flight(self, now: float) -> InFlightSums | None:
        return None

    def count_now(self, uid: str, node: str) -> None:
        pass


NO_GUARD = NoGuard()
