"""The extender's state and verbs: requests in, typed results out, no wire format, no metrics.

It owns the live config, the snapshot cache, the node directory, the in-flight placements and
the decision table, and answers filter, prioritize and preempt from memory. http/ decodes the
requests and encodes these results; telemetry.py counts them; sources/ feed the state (the
refresher publishes each refresh through `publish_refresh`, the watches feed the directory and
the in-flight set).
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from itertools import compress
from operator import attrgetter, not_
from typing import Any

from cachetools import LRUCache

from loadext.config import Config, Pool
from loadext.core.decisions import Decision, DecisionLog
from loadext.core.herd import (
    NO_PLACEMENTS,
    RESOURCES,
    BoundPod,
    Candidate,
    EstimateRule,
    IncomingVerdicts,
    InFlight,
    Placement,
    Usage,
    allocatable,
    corrected,
    corrected_heat,
    corrected_one,
)
from loadext.core.herd import pod_estimate as estimate_from_spec
from loadext.core.nodes import NodeDirectory, normalise_address
from loadext.core.policy import DecisionTable, NodeState, Verdict, build_table, heat, soft_choice
from loadext.core.requests import ExtenderArgs, PodRef, PreemptionArgs, Victims
from loadext.core.requeue import StrandedPods
from loadext.core.signal_health import SignalHealth
from loadext.core.snapshot import Snapshot, SnapshotCache
from loadext.core.usage import Estimate, EstimateError, PodKey, UsageHistory

log = logging.getLogger(__name__)
_PASSED, _REASON, _SCORE = attrgetter("passed"), attrgetter("reason"), attrgetter("score")

Rejections = tuple[tuple[str, str, int], ...]  # (signal, cause, nodes refused)


@dataclass(frozen=True)
class MappingReport:
    """Per signal: known nodes without a series, and series that match no known node."""

    unmapped_nodes: tuple[str, ...] = ()
    unmatched_series: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class FilterResult:
    names: list[str]
    passed: list[str]  # the names that pass, in the request's order
    flags: list[bool] | None  # passed or not, aligned with names; None when every name passed
    rejected: dict[str, str]  # node -> reason
    unresolvable: bool  # rejectedNodes: unresolvable (FailedAndUnresolvableNodes), else FailedNodes
    rejections: Rejections
    soft: str = ""  # "" or why soft mode passed nodes every verdict refused (herd, threshold)

    def summary(self) -> dict[str, Any]:
        summary: dict[str, Any] = {
            "nodes": len(self.names),
            "passed": len(self.passed),
            "rejected": dict(Tally(self.rejected.values())),
        }
        if self.soft:
            summary["soft"] = self.soft
        return summary


@dataclass(frozen=True, slots=True)
class PrioritizeResult:
    names: list[str]
    scores: list[int]  # 0..10, aligned with names
    best: int | None  # index of a top score (ties: see top_pick); None for no candidates

    def summary(self) -> dict[str, Any]:
        summary: dict[str, Any] = {"nodes": len(self.names)}
        if self.best is not None:
            summary["best"] = {"node": self.names[self.best], "score": self.scores[self.best]}
        return summary


@dataclass(frozen=True, slots=True)
class PreemptResult:
    candidates: int
    kept: dict[str, Victims]
    rejections: Rejections

    def summary(self) -> dict[str, Any]:
        return {"nodes": self.candidates, "passed": len(self.kept)}


@dataclass
class Extender:
    config: Config
    clock: Callable[[], float] = time.time
    directory: NodeDirectory = field(default_factory=NodeDirectory)
    cache: SnapshotCache = field(init=False)
    mapping: dict[str, MappingReport] = field(default_factory=dict)
    refreshed_once: bool = False
    decisions: DecisionLog = field(default_factory=DecisionLog)
    inflight: InFlight = field(init=False)
    signal_health: SignalHealth = field(init=False)
    stranded: StrandedPods = field(default_factory=StrandedPods)
    usage: UsageHistory = field(default_factory=UsageHistory)
    _estimates: LRUCache[str, Estimate] = field(default_factory=lambda: LRUCache(maxsize=4096), init=False)
    _estimate_errors: list[EstimateError] = field(default_factory=list, init=False)  # until publish_pod_usage
    _errors_noted: LRUCache[tuple[str, str], bool] = field(default_factory=lambda: LRUCache(maxsize=65536), init=False)
    _table: DecisionTable | None = field(default=None, init=False)
    _soft_logged: dict[str, float] = field(default_factory=dict, init=False)
    _incoming: IncomingVerdicts = field(default_factory=IncomingVerdicts, init=False)
    _rng: random.Random = field(default_factory=random.Random, init=False)

    def __post_init__(self) -> None:
        self.cache = SnapshotCache(self.config.max_data_age, clock=self.clock)
        self.inflight = InFlight(self.config.herd_guard.window)
        self.signal_health = SignalHealth(self.clock)

    # --- config ---------------------------------------------------------------------------

    def apply_config(self, config: Config) -> None:
        """Swap in a validated config; the next request decides with it."""
        self.config = config
        self.inflight.window = config.herd_guard.window
        self.cache.set_max_age(config.max_data_age)
        self.cache.forget_signals_except({s.name for s in config.signals})
        self.signal_health.forget_except({s.name for s in config.signals})
        self.cache.rebuild()
        self._table = None

    @property
    def ready(self) -> bool:
        """Ready once a first refresh round ended: with data, or with the failure policy in force."""
        return self.refreshed_once

    # --- state ----------------------------------------------------------------------------

    def table_builder(self) -> Callable[[Snapshot], DecisionTable]:
        """The one way a decision table is built: bound to the config and pool labels of now
        (read here, on the event loop), so the refresher can run it in a worker thread."""
        config = self.config
        pools_version = self.directory.labels_version if config.pools else 0
        assignment = self._pool_assignment()
        return lambda snapshot: build_table(snapshot, config, self.clock(), assignment, pools_version)

    def table(self) -> DecisionTable:
        """The current table, rebuilt when the snapshot, config or pool labels changed, or
        when its earliest sample crossed maxDataAge."""
        table = self._table
        pools_version = self.directory.labels_version if self.config.pools else 0
        if (
            table is None
            or table.snapshot_version != self.cache.snapshot.version
            or table.config_hash != self.config.hash
            or table.pools_version != pools_version
            or self.clock() >= table.valid_until
        ):
            table = self._table = self.table_builder()(self.cache.snapshot)
        return table

    def publish_refresh(self, snapshot: Snapshot, table: DecisionTable) -> dict[str, MappingReport]:
        """A refresh round's snapshot and the table decided from it, in one step: requests see
        both or neither. Returns the recounted series-to-node mapping."""
        self.cache.publish(snapshot)
        if table.config_hash == self.config.hash:  # else a reload came in meanwhile: decide afresh
            self._table = table
        self.inflight.expire(self.clock())
        self.refreshed_once = True
        return self._update_mapping()

    def _pool_assignment(self) -> dict[str, Pool]:
        """identity -> pool, from the labels of the nodes loadext has seen (watch or requests)."""
        assignment: dict[str, Pool] = {}
        for name, labels in self.directory.labelled().items():
            pool = self.config.pool_for(labels)
            if pool is None:
                continue
            if self.config.node_identity.kind == "name":
                assignment[name] = pool
            else:
                assignment.update(dict.fromkeys(self.directory.addresses(name), pool))
        return assignment

    def pool_of(self, name: str) -> str | None:
        pool = self.config.pool_for(self.directory.labelled().get(name))
        return pool.name if pool is not None else None

    def identity(self, name: str, addresses: tuple[str, ...], table: DecisionTable) -> str | None:
        """The key of a node's series: its name, or the first of its IPs that has data."""
        if self.config.node_identity.kind == "name":
            return name
        ips = [ip for ip in (normalise_address(a) for a in addresses) if ip] or list(self.directory.addresses(name))
        for ip in ips:
            if ip in table.by_identity:
                return ip
        return ips[0] if ips else None

    # --- the herd guard's inputs ----------------------------------------------------------

    def estimate(self, pod: PodRef | BoundPod) -> Estimate:
        """The pod's usage as learned (core/usage.py): its owner's recent pods', else the
        factor rule. Once placed and measured, its own usage replaces it (_with_measured)."""
        guard = self.config.herd_guard
        rule = EstimateRule(
            guard.cpu_limit_factor, guard.memory_limit_factor, Usage(guard.best_effort_cpu, guard.best_effort_memory)
        )
        factor = estimate_from_spec(pod.containers, pod.init_containers, pod.overhead, rule)
        return self.usage.estimate(pod.owner, factor)

    def _settled(self, placed_at: float) -> bool:
        """Placed long enough ago that its measured usage is its usage (HerdGuard.pod_usage_settle)."""
        return self.clock() - placed_at >= self.config.herd_guard.pod_usage_settle

    def record_placement(self, uid: str, node: str, placed_at: float, usage: Usage) -> None:
        self.inflight.place(uid, Placement(node, placed_at, usage), self.clock())

    def _placement(self, pod: BoundPod) -> Placement:
        key = (pod.namespace, pod.name)
        self.usage.learn_pod(pod.uid, key, pod.owner, pod.placed_at)
        estimate = self.estimate(pod)
        return self._with_measured(pod.uid, Placement(pod.node, pod.placed_at, estimate.usage, key, estimate.sources))

    def record_bound_pod(self, pod: BoundPod) -> None:
        """A pod from the pod watch: counted while recent, forgotten once finished or deleted."""
        self.stranded.release(pod.uid)
        if pod.finished:
            self.inflight.remove(pod.uid)
        else:
            self.inflight.place(pod.uid, self._placement(pod), self.clock())

    def replace_bound_pods(self, pods: list[BoundPod]) -> None:
        for pod in pods:
            self.stranded.release(pod.uid)
        placements = {p.uid: self._placement(p) for p in pods if not p.finished}
        self.inflight.replace_all(placements, self.clock())

    def publish_pod_usage(self, measured: Mapping[str, Mapping[PodKey, float]]) -> list[EstimateError]:
        """A refresh round's measured usage per pod: it teaches the owners' history, and each
        pod in flight that has it is counted with it from now on instead of its estimate.
        Returns how far off the estimates it replaced (since the last call) were."""
        now = self.clock()
        self.usage.publish(measured, now - self.config.herd_guard.pod_usage_settle)
        if measured:
            for uid, placement in self.inflight.placements():
                self.inflight.place(uid, self._with_measured(uid, placement), now)  # a no-op if unchanged
        errors, self._estimate_errors = self._estimate_errors, []
        return errors

    def _with_measured(self, uid: str, placement: Placement) -> Placement:
        """The placement with its pod's measured usage, per resource where Prometheus has it
        and the pod is settled; the first time for a pod, how far off its estimate was is
        noted for loadext_estimate_error_ratio."""
        if placement.pod is None or not self._settled(placement.placed_at):
            return placement  # loadext's own guess (the watch replaces it), or too young to measure
        values, sources = [placement.usage.cpu, placement.usage.memory], list(placement.sources)
        for i, resource in enumerate(RESOURCES):
            value = self.usage.measured(placement.pod, resource)
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

    def record_binding(self, uid: str, node: str) -> None:
        """loadext bound the pod itself: count it now, before the watch reports it."""
        self._count_now(uid, node)

    def expect_placement(self, uid: str, node: str) -> None:
        """The node loadext scored best for a pod: count the pod there at once, as the likely
        placement. In a burst kube-scheduler places the next pod before the pod watch (or no
        watch at all, without an API server) could show this one; the watch's binding, when it
        comes, replaces the guess with the node really chosen."""
        self._count_now(uid, node)

    def _count_now(self, uid: str, node: str) -> None:
        """Place a pod loadext has judged (so its estimate is known) on a node from now."""
        estimate = self._estimates.get(uid)
        if estimate is not None and self.config.herd_guard.enabled:
            self.record_placement(uid, node, self.clock(), estimate.usage)

    # --- verbs ----------------------------------------------------------------------------

    def verdicts(self, names: list[str], args: ExtenderArgs | None = None) -> list[Verdict]:
        """One verdict per name, in order: lookups in the precomputed table, then, with the herd
        guard on, the correction for recent placements and the incoming pod."""
        return self._judged(names, args)[0]

    def _judged(self, names: list[str], args: ExtenderArgs | None) -> tuple[list[Verdict], DecisionTable]:
        """(verdicts, table): the table's verdicts, corrected by the herd guard where it
        applies. The verdicts on measured load alone are only built where they are needed
        (_measured: soft mode, preempt, identities other than names)."""
        addresses = args.addresses if args is not None else {}
        self._note_nodes(names, args)
        incoming, own = Usage(), None
        if args is not None and args.pod is not None and self.config.herd_guard.enabled:
            estimate = self._estimates[args.pod.uid] = self.estimate(args.pod)
            incoming, own = estimate.usage, self.inflight.get(args.pod.uid)
        return self._judged_with(names, addresses, incoming, own)

    def _note_nodes(self, names: list[str], args: ExtenderArgs | None) -> None:
        """What a request tells about nodes: their names, and in non-cache mode their labels,
        IPs and allocatable."""
        if args is not None:
            for name, node_labels in args.labels.items():
                self.directory.set_labels(name, node_labels)
            for name, quantities in args.allocatable.items():
                self.directory.set_allocatable(name, allocatable(quantities))
        self.directory.observe(names, args.addresses if args is not None else {})

    def _deciding_table(self, args: ExtenderArgs) -> DecisionTable | None:
        """The table, when it alone decides this call: nodes named by name and no herd guard
        (which corrects per pod). The verbs then read its per-name reasons or scores in one
        pass and never build the Verdict list (_judged's path does, for everything else)."""
        if self.config.herd_guard.enabled or self.config.node_identity.kind != "name":
            return None
        self._note_nodes(args.names, args)
        return self.table()

    def _judged_with(
        self, names: list[str], addresses: Mapping[str, tuple[str, ...]], incoming: Usage, own: Placement | None
    ) -> tuple[list[Verdict], DecisionTable]:
        """_judged for a pod of estimate `incoming` (expected on `own` by an earlier call)."""
        table = self.table()
        herd_guard = self.config.herd_guard.enabled and not table.degraded
        if herd_guard and self.config.node_identity.kind == "name":
            return self._herd_by_name(names, table, incoming, own, self.clock()), table
        measured, identities = self._measured(names, addresses, table)
        if not herd_guard:
            return measured, table
        now = self.clock()
        candidates = self._candidates(names, identities, measured, table)
        guarded = corrected(
            candidates, self.inflight.per_node(now), incoming, self.directory.allocatable, self.config, now, own
        )
        return guarded, table

    def _measured(
        self, names: list[str], addresses: Mapping[str, tuple[str, ...]], table: DecisionTable
    ) -> tuple[list[Verdict], list[str | None]]:
        """(verdicts on measured load alone, identities): lookups in the table."""
        if self.config.node_identity.kind == "name":
            return list(map(table.by_identity.__getitem__, names)), list(names)
        identities = [self.identity(name, addresses.get(name, ()), table) for name in names]
        return list(map(table.verdict, identities)), identities

    def _herd_by_name(
        self, names: list[str], table: DecisionTable, incoming: Usage, own: Placement | None, now: float
    ) -> list[Verdict]:
        """The herd correction when nodes are named by name, at C speed per node: verdicts come
        from a memo per pod size (IncomingVerdicts) that is kept current with what is in flight,
        so a call judges only the nodes that changed since the last one, and reads the table's
        verdict of those only (a pass over all 500 was 6.5 % of loadext's CPU in the 5000-node
        scheduler benchmark: the Verdicts lie scattered in memory). The same corrected_one
        decides, so the verdicts equal corrected()'s (tests/unit/test_herd.py checks it)."""
        in_flight = self.inflight.per_node(now)  # expires the window first, so the memo sees it
        capacity, config = self.directory.allocatable, self.config
        size = self._incoming.for_size(table, self.directory.allocatable_version, incoming, self.inflight)
        memo = size.verdicts

        def judge(name: str) -> Verdict:
            candidate = self._candidate(name, name, table.by_identity[name], table)
            return corrected_one(candidate, in_flight.get(name, NO_PLACEMENTS), incoming, capacity, config, now)

        for name in size.stale:  # the node or two placed on since the last call
            memo[name] = judge(name)
        size.stale.clear()
        try:  # one pass when the memo has every name, as it does between refreshes
            guarded = list(map(memo.__getitem__, names))
        except KeyError:  # names not judged since the table changed
            for name in set(names).difference(memo):
                memo[name] = judge(name)
            guarded = list(map(memo.__getitem__, names))
        if own is not None and own.node in in_flight:
            # The pod judged was expected on this node by an earlier call: judge that node
            # without it (the memo counts it, as it would for any other pod).
            try:
                index = names.index(own.node)
            except ValueError:  # not a candidate this time
                return guarded
            candidate = self._candidate(own.node, own.node, table.by_identity[own.node], table)
            guarded[index] = corrected_one(candidate, in_flight[own.node], incoming, capacity, config, now, own)
        return guarded

    def _candidate(self, name: str, identity: str | None, measured: Verdict, table: DecisionTable) -> Candidate:
        """A node with what it is judged on (its samples and pool), for the herd correction
        and soft mode, which both re-judge nodes beyond the table's verdict."""
        if not identity:
            return Candidate(name, measured, None, None)
        return Candidate(name, measured, self.cache.snapshot.by_identity.get(identity), table.pools.get(identity))

    def _candidates(
        self, names: list[str], identities: list[str | None], measured: list[Verdict], table: DecisionTable
    ) -> Iterator[Candidate]:
        for name, identity, verdict in zip(names, identities, measured, strict=True):
            yield self._candidate(name, identity, verdict, table)

    def _rejections(self, reasons: Tally[str], verdicts: Iterable[Verdict] = ()) -> Rejections:
        """Refused-node counts by (signal, cause), from the reasons' tally (see policy._causes)."""
        causes = self.table().causes
        out: list[tuple[str, str, int]] = []
        for reason, nodes in reasons.items():
            pairs = causes.get(reason)
            if pairs is None:  # a reason made per request (herd guard): read it off its verdict
                pairs = next((v.rejected_by for v in verdicts if v.reason == reason), ())
            out.extend((signal, cause, nodes) for signal, cause in pairs)
        return tuple(out)

    def _remember(self, verb: str, args: ExtenderArgs, verdicts: list[Verdict] | Mapping[str, Verdict]) -> None:
        if args.pod is None or not args.pod.name:
            return
        identities = None
        if self.config.node_identity.kind != "name":
            table = self.table()
            identities = [self.identity(n, args.addresses.get(n, ()), table) for n in args.names]
        now, estimate, in_flight = self.clock(), None, None
        if self.config.herd_guard.enabled:
            # The sums as they are now (InFlight.per_node is immutable: kept, not copied).
            estimate, in_flight = self._estimates.get(args.pod.uid), self.inflight.per_node(now)
        decision = Decision(
            verb, now, args.names, identities, verdicts, self.cache.snapshot, self.config, estimate, in_flight
        )
        self.decisions.record(args.pod.key, decision)

    def filter(self, args: ExtenderArgs) -> FilterResult:
        table = self._deciding_table(args)
        verdicts: list[Verdict] | None = None  # built only where the table alone does not decide
        if table is None:
            verdicts, table = self._judged(args.names, args)
            self._remember("filter", args, verdicts)
            reasons = list(map(_REASON, verdicts))
        else:
            self._remember("filter", args, table.by_identity)
            reasons = list(map(table.reason_of.__getitem__, args.names))
        soft = ""
        # Per node only C-level steps (map, all, compress, zip), as few as the answer allows:
        # each is a pass over ~500 names, and each costs 5 to 20 us live.
        flags: list[bool] | None = None  # every node passes: a DaemonSet's pod, or all under load
        if args.pod is None or not args.pod.is_daemonset:
            flags = list(map(not_, reasons))  # a refused node has a reason, a passed one ""
            if all(flags):
                flags = None
        if flags is not None and args.names and not any(flags):
            measured, identities = self._measured(args.names, args.addresses, table)  # soft mode: rare
            verdicts = verdicts or measured
            chosen, soft = self._soft_pass(args, measured, identities, table)
            for index in chosen:
                flags[index] = True
        if flags is None:
            passed, rejected = args.names, {}
        else:
            passed = list(compress(args.names, flags))
            if soft:  # the nodes soft mode passed keep their reasons, but are not refused
                reasons = ["" if flag else reason for flag, reason in zip(flags, reasons, strict=True)]
            rejected = dict(zip(compress(args.names, reasons), filter(None, reasons), strict=True))  # "": passed
        rejections = self._rejections(Tally(rejected.values()), verdicts or ()) if rejected else ()
        unresolvable = self.config.rejected_nodes == "unresolvable"
        self._track_stranding(args, bool(passed))
        return FilterResult(args.names, passed, flags, rejected, unresolvable, rejections, soft)

    def _track_stranding(self, args: ExtenderArgs, passed_any: bool) -> None:
        """A filter that passes no node leaves the pod unschedulable (the extenders filter
        last): remember it, so that it is retried once a node would take it (reopened)."""
        pod = args.pod
        if pod is None or not pod.uid:
            return
        if passed_any or not args.names:
            self.stranded.release(pod.uid)
        else:
            estimate = self._estimates.get(pod.uid)
            self.stranded.strand(pod.uid, args.names, estimate.usage if estimate else Usage(), self.clock())

    def reopened(self) -> str | None:
        """A node that some stranded pod was refused on and that would pass it now (load fell,
        the herd window passed, the config changed), or None. Judged as filter would judge the
        pod: measured load plus the herd guard's estimates and the pod's own."""
        for incoming, nodes in self.stranded.due(self.clock()).items():
            names = sorted(nodes)
            verdicts, _ = self._judged_with(names, {}, incoming, None)
            for name, verdict in zip(names, verdicts, strict=True):
                if verdict.passed:
                    return name
        return None

    def _soft_pass(
        self, args: ExtenderArgs, measured: list[Verdict], identities: list[str | None], table: DecisionTable
    ) -> tuple[list[int], str]:
        """Every candidate refused: soft mode may pass the least loaded instead (policy.soft_choice)."""
        herd_soft = self.config.herd_guard.enabled and self.config.herd_guard.soft
        threshold_soft = self.config.filter_mode == "soft"
        heats: list[float | None] = []
        if threshold_soft:
            for candidate in self._candidates(args.names, identities, measured, table):
                samples = candidate.samples
                heats.append(heat(samples, self.config, candidate.pool, candidate.measured) if samples else None)
        herd_heats = self._herd_heats(args, measured, identities, table) if herd_soft else []
        chosen, why = soft_choice(measured, heats, herd_heats, herd_soft, threshold_soft)
        if chosen:
            now = self.clock()
            if now - self._soft_logged.get(why, 0.0) >= 10:
                self._soft_logged[why] = now
                pod = args.pod.key if args.pod is not None else "-"
                log.info(
                    "filter for %s: every candidate refused (%s); soft mode passes %d of %d, the least loaded "
                    "(logged at most every 10s; loadext_filter_soft_passes_total counts each)",
                    pod,
                    "pods in flight" if why == "herd" else "over thresholds",
                    len(chosen),
                    len(measured),
                )
        return chosen, why

    def _herd_heats(
        self, args: ExtenderArgs, measured: list[Verdict], identities: list[str | None], table: DecisionTable
    ) -> list[float | None]:
        """herd.corrected_heat of each candidate under its thresholds by measurement (None for
        the rest). By name they are kept in the herd memo beside the verdicts: when a burst
        outgrows the estimates every call is a soft pass, and each then computes only the nodes
        changed since the last one, not all ~500 (5.7 ms a pod, filter and prioritize, when it did)."""
        estimate = self._estimates.get(args.pod.uid) if args.pod is not None else None
        incoming = estimate.usage if estimate is not None else Usage()
        own = self.inflight.get(args.pod.uid) if args.pod is not None else None
        in_flight, capacity = self.inflight.per_node(self.clock()), self.directory.allocatable

        def heat_of(candidate: Candidate, own: Placement | None = None) -> float | None:
            placed = in_flight.get(candidate.name, NO_PLACEMENTS)
            return corrected_heat(candidate, placed, incoming, capacity, self.config, own)

        if self.config.node_identity.kind != "name":
            candidates = self._candidates(args.names, identities, measured, table)
            return [heat_of(c) if c.measured.passed else None for c in candidates]
        memo = self._incoming.for_size(table, self.directory.allocatable_version, incoming, self.inflight).heats
        for name, verdict in zip(args.names, measured, strict=True):
            if verdict.passed and name not in memo:
                memo[name] = heat_of(self._candidate(name, name, verdict, table))
        heats = list(map(memo.get, args.names))
        if own is not None and own.node in in_flight:  # the pod's expected node, judged without it
            try:
                index = args.names.index(own.node)
            except ValueError:  # not a candidate this time
                return heats
            if heats[index] is not None:
                heats[index] = heat_of(self._candidate(own.node, own.node, measured[index], table), own)
        return heats

    def prioritize(self, args: ExtenderArgs) -> PrioritizeResult:
        table = self._deciding_table(args)
        if table is None:
            verdicts = self.verdicts(args.names, args)
            self._remember("prioritize", args, verdicts)
            scores = list(map(_SCORE, verdicts))
        else:
            self._remember("prioritize", args, table.by_identity)
            scores = list(map(table.score_of.__getitem__, args.names))
        best = top_pick(scores, self._rng.randrange(len(scores))) if scores else None
        if best is not None and args.pod is not None and args.pod.uid:
            self.expect_placement(args.pod.uid, args.names[best])
        return PrioritizeResult(args.names, scores, best)

    def preempt(self, args: PreemptionArgs) -> PreemptResult:
        """Keep the scheduler's victims, but only on nodes loadext's filter would accept."""
        if args.pod is not None and args.pod.is_daemonset:
            return PreemptResult(len(args.victims), args.victims, ())
        names = list(args.victims)
        if args.pod is not None and self.config.herd_guard.enabled:
            verdicts = self._preemption_verdicts(names, args.pod, args.victims)
        else:
            verdicts = self.verdicts(names)
        kept = {name: args.victims[name] for name, verdict in zip(names, verdicts, strict=True) if verdict.passed}
        rejections = self._rejections(Tally(v.reason for v in verdicts if not v.passed), verdicts)
        return PreemptResult(len(args.victims), kept, rejections)

    def _preemption_verdicts(self, names: list[str], pod: PodRef, victims: dict[str, Victims]) -> list[Verdict]:
        """Each node judged as it would be once its victims are gone and the preemptor runs
        there: measured load, plus the pods in flight on it except the victims among them
        (their estimates leave with them), minus the measured usage of the victims placed
        before (herdGuard.podUsage; a victim not measured stays in the load, erring on the
        side of not preempting), plus the preemptor's own estimate."""
        estimate = self._estimates[pod.uid] = self.estimate(pod)
        incoming = estimate.usage
        table = self.table()
        measured, identities = self._measured(names, {}, table)
        if table.degraded:
            return measured
        now = self.clock()
        in_flight = self.inflight.per_node(now)
        settled_before = now - self.config.herd_guard.pod_usage_settle
        verdicts = []
        for name, identity, verdict in zip(names, identities, measured, strict=True):
            usage, placements = in_flight.get(name, NO_PLACEMENTS)
            for uid in victims[name].uids:
                placement = self.inflight.get(uid)
                if placement is not None and placement.node == name:
                    usage, placements = usage - placement.usage, placements - 1
                elif placement is None:
                    usage = usage - self.usage.measured_by_uid(uid, settled_before)
            candidate = self._candidate(name, identity, verdict, table)
            placed = (usage, placements)
            verdicts.append(corrected_one(candidate, placed, incoming, self.directory.allocatable, self.config, now))
        return verdicts

    # --- observability --------------------------------------------------------------------

    def node_states(self) -> list[NodeState]:
        """Every node loadext knows (and, with name identities, every node a series names)."""
        table, snapshot = self.table(), self.cache.snapshot
        names = self.directory.names()
        if self.config.node_identity.kind == "name":
            names |= set(snapshot.by_identity)
        states = []
        for name in sorted(names):
            identity = self.identity(name, (), table)
            samples = snapshot.by_identity.get(identity, {}) if identity else {}
            states.append(NodeState(name, identity, samples, table.verdict(identity), self.pool_of(name)))
        return states

    def _update_mapping(self) -> dict[str, MappingReport]:
        """Recount which known nodes lack series and which series name no node; log changes."""
        kind = self.config.node_identity.kind
        known = self.directory.names()
        snapshot = self.cache.snapshot
        reports = {}
        for signal in self.config.signals:
            identities = {i for i, s in snapshot.by_identity.items() if signal.name in s}
            mapped = {self.directory.node_for_identity(i, kind) for i in identities}
            unmatched = sorted(i for i in identities if self.directory.node_for_identity(i, kind) is None)
            report = MappingReport(
                unmapped_nodes=tuple(sorted(known - {m for m in mapped if m})),
                unmatched_series=tuple(unmatched) if known else (),
            )
            previous = self.mapping.get(signal.name)
            # While the signal's queries fail, its series are missing for that reason (logged
            # by SignalHealth): pointing at nodeIdentity then would point away from the cause.
            failing = self.signal_health.failing(signal.name) is not None
            if previous != report and (report.unmapped_nodes or report.unmatched_series) and not failing:
                log.warning(
                    "signal %s: %d known nodes have no series (%s); %d series match no node (%s); "
                    "check nodeIdentity (label %r, kind %s)",
                    signal.name,
                    len(report.unmapped_nodes),
                    _sample(report.unmapped_nodes),
                    len(report.unmatched_series),
                    _sample(report.unmatched_series),
                    self.config.node_identity.label,
                    kind,
                )
            reports[signal.name] = report
        self.mapping = reports
        return reports


def _sample(items: tuple[str, ...], limit: int = 5) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def top_pick(scores: list[int], start: int) -> int:
    """The index of the first top score at or after `start`, wrapping around.

    The top node is loadext's guess of where the pod goes (expect_placement). kube-scheduler
    breaks ties at random (selectHost), so a guess that always took the first tied node would
    keep counting the pod on that one node, which would then look a pod busier than its peers
    at every moment of a burst and be starved. A random start spreads the guess over the ties;
    it costs two C-level scans, not a Python loop over the names."""
    top = max(scores)
    try:
        return scores.index(top, start)
    except ValueError:
        return scores.index(top)
