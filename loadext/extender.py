"""The extender's state and verbs, free of any web framework.

It owns the live config, the snapshot cache, the node directory and the decision table, and
answers filter, prioritize and preempt from memory. The aiohttp glue (server.py) and the
background refresher (refresher.py) sit on either side of it.
"""

from __future__ import annotations

import logging
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter
from typing import Any

from cachetools import LRUCache

from loadext.config import Config, Pool
from loadext.decisions import Decision, DecisionLog
from loadext.herd import RESOURCES, BoundPod, EstimateRule, InFlight, Placement, Usage, allocatable, pod_estimate
from loadext.nodes import NodeDirectory, normalise_address
from loadext.policy import (
    DecisionTable,
    NodeState,
    Verdict,
    build_table,
    burst_verdict,
    heat,
    judge,
    soft_choice,
    with_extra_load,
)
from loadext.protocol import (
    ExtenderArgs,
    PodRef,
    PreemptionArgs,
    encode_filter_result,
    encode_host_priority_list,
    encode_preemption_result,
)
from loadext.signal_health import SignalHealth
from loadext.snapshot import Snapshot, SnapshotCache
from loadext.telemetry import Telemetry

log = logging.getLogger(__name__)
_PASSED = attrgetter("passed")


@dataclass(frozen=True)
class MappingReport:
    """Per signal: known nodes without a series, and series that match no known node."""

    unmapped_nodes: tuple[str, ...] = ()
    unmatched_series: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Answer:
    """A verb's reply body and what it decided, for the request log line."""

    body: bytes
    summary: dict[str, Any]


@dataclass
class Extender:
    config: Config
    telemetry: Telemetry
    clock: Callable[[], float] = time.time
    directory: NodeDirectory = field(default_factory=NodeDirectory)
    cache: SnapshotCache = field(init=False)
    mapping: dict[str, MappingReport] = field(default_factory=dict)
    refreshed_once: bool = False
    decisions: DecisionLog = field(default_factory=DecisionLog)
    inflight: InFlight = field(init=False)
    signal_health: SignalHealth = field(init=False)
    _estimates: LRUCache[str, Usage] = field(default_factory=lambda: LRUCache(maxsize=4096), init=False)
    _table: DecisionTable | None = field(default=None, init=False)
    _soft_logged: dict[str, float] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.cache = SnapshotCache(self.config.max_data_age, clock=self.clock)
        self.inflight = InFlight(self.config.herd_guard.window)
        self.signal_health = SignalHealth(self.clock)
        self._config_applied()

    # --- config ---------------------------------------------------------------------------

    def apply_config(self, config: Config) -> None:
        """Swap in a validated config; the next request decides with it."""
        self.config = config
        self.inflight.window = config.herd_guard.window
        self.cache.set_max_age(config.max_data_age)
        self.cache.forget_signals_except({s.name for s in config.signals})
        self.signal_health.forget_except({s.name for s in config.signals})
        self.cache.rebuild()
        self._config_applied()

    def _config_applied(self) -> None:
        self._table = None
        self.telemetry.prepare_signals((s.name, s.threshold) for s in self.config.signals)
        self.telemetry.set_config_hash(self.config.hash)
        self.telemetry.config_last_reload.set(self.clock())
        self.telemetry.export_nodes(self.node_states if self.config.per_node_metrics else None)

    @property
    def ready(self) -> bool:
        """Ready once a first refresh round ended: with data, or with the failure policy in force."""
        return self.refreshed_once

    # --- decisions ------------------------------------------------------------------------

    def table(self) -> DecisionTable:
        now = self.clock()
        table = self._table
        snapshot = self.cache.snapshot
        pools_version = self.directory.labels_version if self.config.pools else 0
        if (
            table is None
            or table.snapshot_version != snapshot.version
            or table.config_hash != self.config.hash
            or table.pools_version != pools_version
            or now >= table.valid_until
        ):
            table = build_table(snapshot, self.config, now, self._pool_assignment(), pools_version)
            self._table = table
            self.telemetry.degraded.set(1 if table.degraded else 0)
        return table

    def pool_assignment_now(self) -> tuple[dict[str, Pool], int]:
        """The pool assignment and the label state it came from, read on the event loop."""
        pools_version = self.directory.labels_version if self.config.pools else 0
        return self._pool_assignment(), pools_version

    def publish(self, snapshot: Snapshot, table: DecisionTable) -> None:
        """A refresh's snapshot and the table decided from it, in one step."""
        self.cache.publish(snapshot)
        if table.config_hash == self.config.hash:  # else a reload came in meanwhile: decide afresh
            self._table = table
            self.telemetry.degraded.set(1 if table.degraded else 0)

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

    def verdicts(self, names: list[str], args: ExtenderArgs | None = None) -> list[Verdict]:
        """One verdict per name, in order: lookups in the precomputed table, then, with the herd
        guard on, the correction for recent placements and the incoming pod."""
        return self._judged(names, args)[1]

    def _judged(
        self, names: list[str], args: ExtenderArgs | None
    ) -> tuple[list[Verdict], list[Verdict], list[str | None], DecisionTable]:
        """(measured, guarded, identities, table): the table's verdicts on measured load alone,
        and the same corrected by the herd guard (the same list when it does not apply)."""
        addresses = args.addresses if args is not None else {}
        if args is not None:
            for name, node_labels in args.labels.items():
                self.directory.set_labels(name, node_labels)
            for name, quantities in args.allocatable.items():
                self.directory.set_allocatable(name, allocatable(quantities))
        self.directory.observe(names, addresses)
        table = self.table()
        if self.config.node_identity.kind == "name":
            identities: list[str | None] = list(names)
            measured = list(map(table.by_identity.__getitem__, names))
        else:
            identities = [self.identity(name, addresses.get(name, ()), table) for name in names]
            measured = list(map(table.verdict, identities))
        if not self.config.herd_guard.enabled or table.degraded:
            return measured, measured, identities, table
        incoming, own = Usage(), None
        if args is not None and args.pod is not None:
            incoming = self._estimates[args.pod.uid] = self.estimate(args.pod)
            own = self.inflight.get(args.pod.uid)
        return measured, self._guarded(names, identities, measured, table, incoming, own), identities, table

    def estimate(self, pod: PodRef | BoundPod) -> Usage:
        guard = self.config.herd_guard
        rule = EstimateRule(
            guard.cpu_limit_factor, guard.memory_limit_factor, Usage(guard.best_effort_cpu, guard.best_effort_memory)
        )
        return pod_estimate(pod.containers, pod.init_containers, pod.overhead, rule)

    def record_placement(self, uid: str, node: str, placed_at: float, usage: Usage) -> None:
        self.inflight.place(uid, Placement(node, placed_at, usage), self.clock())

    def record_bound_pod(self, pod: BoundPod) -> None:
        """A pod from the pod watch: counted while recent, forgotten once finished or deleted."""
        if pod.finished:
            self.inflight.remove(pod.uid)
        else:
            self.record_placement(pod.uid, pod.node, pod.placed_at, self.estimate(pod))

    def replace_bound_pods(self, pods: list[BoundPod]) -> None:
        placements = {p.uid: Placement(p.node, p.placed_at, self.estimate(p)) for p in pods if not p.finished}
        self.inflight.replace_all(placements, self.clock())

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
        usage = self._estimates.get(uid)
        if usage is not None and self.config.herd_guard.enabled:
            self.record_placement(uid, node, self.clock(), usage)

    def _guarded(
        self,
        names: list[str],
        identities: list[str | None],
        measured: list[Verdict],
        table: DecisionTable,
        incoming: Usage,
        own: Placement | None = None,
    ) -> list[Verdict]:
        """`own` is the incoming pod's own expected placement from an earlier attempt: it is the
        pod being judged, so it must not count against its own node a second time."""
        now, guard = self.clock(), self.config.herd_guard
        in_flight = self.inflight.per_node(now)
        snapshot = self.cache.snapshot
        out = []
        for name, identity, verdict in zip(names, identities, measured, strict=True):
            usage, placements = in_flight.get(name, (Usage(), 0))
            if own is not None and name == own.node and placements:
                usage, placements = usage - own.usage, placements - 1
            if guard.burst_cap and placements >= guard.burst_cap:
                out.append(burst_verdict(placements, guard.window))
                continue
            capacity = self.directory.allocatable(name)
            extra = usage + incoming
            samples = snapshot.by_identity.get(identity) if identity else None
            if not capacity or not samples or (extra.cpu == 0 and extra.memory == 0):
                out.append(verdict)  # nothing to add, or nothing to add it to
                continue
            ratios = {r: extra.get(r) / capacity[r] for r in RESOURCES if capacity.get(r)}
            pool = table.pools.get(identity) if identity else None
            out.append(judge(with_extra_load(samples, ratios), self.config, now, pool))
        return out

    def _count_rejections(self, reasons: Tally[str], verdicts: Iterable[Verdict] = ()) -> None:
        causes = self.table().causes
        for reason, nodes in reasons.items():
            pairs = causes.get(reason)
            if pairs is None:  # a reason made per request (herd guard): read it off its verdict
                pairs = next((v.rejected_by for v in verdicts if v.reason == reason), ())
            for signal, cause in pairs:
                self.telemetry.rejection_counter(signal, cause).inc(nodes)

    def _remember(self, verb: str, args: ExtenderArgs, verdicts: list[Verdict]) -> None:
        if args.pod is None or not args.pod.name:
            return
        identities = None
        if self.config.node_identity.kind != "name":
            table = self.table()
            identities = [self.identity(n, args.addresses.get(n, ()), table) for n in args.names]
        decision = Decision(verb, self.clock(), args.names, identities, verdicts, self.cache.snapshot, self.config)
        self.decisions.record(args.pod.key, decision)

    def filter(self, args: ExtenderArgs) -> Answer:
        measured, verdicts, identities, table = self._judged(args.names, args)
        self._remember("filter", args, verdicts)
        soft = ""
        if args.pod is not None and args.pod.is_daemonset:
            flags = [True] * len(args.names)
        else:
            flags = list(map(_PASSED, verdicts))
        passed = list(compress(range(len(flags)), flags))
        if args.names and not passed:
            passed, soft = self._soft_pass(args, measured, identities, table)
            for index in passed:
                flags[index] = True
        rejected = {name: v.reason for name, v, ok in zip(args.names, verdicts, flags, strict=True) if not ok}
        reasons = Tally(rejected.values())
        if rejected:
            self._count_rejections(reasons, verdicts)
        self.telemetry.passed_nodes.inc(len(passed))
        if rejected:
            self.telemetry.rejected_nodes.inc(len(rejected))
        if args.names and not passed:
            self.telemetry.no_fit.inc()
        unresolvable = self.config.rejected_nodes == "unresolvable"
        body = encode_filter_result(
            args, passed, failed={} if unresolvable else rejected, unresolvable=rejected if unresolvable else {}
        )
        summary = {"nodes": len(args.names), "passed": len(passed), "rejected": dict(reasons)}
        if soft:
            summary["soft"] = soft
        return Answer(body, summary)

    def _soft_pass(
        self, args: ExtenderArgs, measured: list[Verdict], identities: list[str | None], table: DecisionTable
    ) -> tuple[list[int], str]:
        """Every candidate refused: soft mode may pass the least loaded instead (policy.soft_choice)."""
        herd_soft = self.config.herd_guard.enabled and self.config.herd_guard.soft
        threshold_soft = self.config.filter_mode == "soft"
        heats: list[float | None] = []
        if threshold_soft:
            snapshot = self.cache.snapshot
            for identity, verdict in zip(identities, measured, strict=True):
                samples = snapshot.by_identity.get(identity) if identity else None
                pool = table.pools.get(identity) if identity else None
                heats.append(heat(samples, self.config, pool, verdict) if samples else None)
        chosen, why = soft_choice(measured, heats, herd_soft, threshold_soft)
        if chosen:
            self.telemetry.soft_passes.labels(why).inc()
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

    def prioritize(self, args: ExtenderArgs) -> Answer:
        verdicts = self.verdicts(args.names, args)
        self._remember("prioritize", args, verdicts)
        scores = [verdict.score for verdict in verdicts]
        for score, count in Tally(scores).items():
            self.telemetry.score_counters[score].inc(count)
        summary: dict[str, Any] = {"nodes": len(args.names)}
        if scores:
            best = scores.index(max(scores))
            summary["best"] = {"node": args.names[best], "score": scores[best]}
            if self.config.per_node_metrics:
                self.telemetry.preferred_counter(args.names[best]).inc()
            if args.pod is not None and args.pod.uid:
                self.expect_placement(args.pod.uid, args.names[best])
        return Answer(encode_host_priority_list(list(zip(args.names, scores, strict=True))), summary)

    def preempt(self, args: PreemptionArgs) -> Answer:
        """Keep the scheduler's victims, but only on nodes loadext's filter would accept."""
        if args.pod is not None and args.pod.is_daemonset:
            kept = args.victims
        else:
            names = list(args.victims)
            verdicts = self.verdicts(names)
            self._count_rejections(Tally(v.reason for v in verdicts if not v.passed), verdicts)
            kept = {name: args.victims[name] for name, verdict in zip(names, verdicts, strict=True) if verdict.passed}
        return Answer(encode_preemption_result(kept), {"nodes": len(args.victims), "passed": len(kept)})

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

    def update_mapping(self) -> None:
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
            self.telemetry.unmapped_nodes.labels(signal.name).set(len(report.unmapped_nodes))
            self.telemetry.unmatched_series.labels(signal.name).set(len(report.unmatched_series))
        self.mapping = reports

    def explain_pod(self, pod: str) -> dict[str, Any] | None:
        """The last filter and prioritize decisions for NAMESPACE/NAME, node by node: the values
        and their age at decision time, the thresholds that applied (and the pool they came
        from), the verdict, the score and the reason."""
        decisions = self.decisions.get(pod)
        if decisions is None:
            return None
        out: dict[str, Any] = {"pod": pod}
        for verb, decision in decisions.items():
            rows = []
            for i, (name, verdict) in enumerate(zip(decision.names, decision.verdicts, strict=True)):
                identity = decision.identities[i] if decision.identities is not None else name
                samples = decision.snapshot.by_identity.get(identity, {}) if identity else {}
                pool = decision.config.pool_for(self.directory.labelled().get(name))
                thresholds = {s.name: s.threshold for s in (pool.signals if pool else decision.config.signals)}
                rows.append(
                    {
                        "node": name,
                        "pool": pool.name if pool else None,
                        "signals": {
                            s: {
                                "value": round(v.value, 4),
                                "age": round(decision.time - v.timestamp, 1),
                                "threshold": thresholds.get(s),
                            }
                            for s, v in samples.items()
                        },
                        "verdict": "pass" if verdict.passed else "reject",
                        "score": verdict.score,
                        "reason": verdict.reason,
                    }
                )
            out[verb] = {"time": decision.time, "configHash": decision.config.hash, "nodes": rows}
        return out

    def explain(self) -> dict[str, Any]:
        """Everything behind the current decisions, node by node: the "why not this node" view."""
        table = self.table()
        now = self.clock()
        snapshot = self.cache.snapshot
        in_flight = self.inflight.per_node(now)
        rows = [
            {
                "node": state.node,
                "identity": state.identity,
                "signals": {
                    s: {"value": round(v.value, 4), "age": round(now - v.timestamp, 1)}
                    for s, v in state.samples.items()
                },
                "pool": state.pool,
                "inFlight": _in_flight_row(in_flight.get(state.node)),
                "verdict": "pass" if state.verdict.passed else "reject",
                "score": state.verdict.score,
                "reason": state.verdict.reason,
            }
            for state in self.node_states()
        ]
        return {
            "time": now,
            "configHash": self.config.hash,
            "degraded": table.degraded,
            "failurePolicy": self.config.failure_policy,
            "filterMode": self.config.filter_mode,
            "missingData": self.config.missing_data,
            "strategy": self.config.scoring.strategy,
            "herdGuard": {
                "enabled": self.config.herd_guard.enabled,
                "window": self.config.herd_guard.window,
                "podsInFlight": len(self.inflight),
                "soft": self.config.herd_guard.soft,
            },
            "signals": [
                {
                    "name": s.name,
                    "threshold": s.threshold,
                    "weight": s.weight,
                    "lastSuccessAge": _age(now, snapshot.last_success.get(s.name)),
                    **self.signal_health.report(s.name, now),
                    "series": snapshot.series_counts.get(s.name, 0),
                    "unmappedNodes": list(self.mapping.get(s.name, MappingReport()).unmapped_nodes),
                    "unmatchedSeries": list(self.mapping.get(s.name, MappingReport()).unmatched_series),
                }
                for s in self.config.signals
            ],
            "nodes": rows,
        }


def _in_flight_row(entry: tuple[Usage, int] | None) -> dict[str, float] | None:
    """Pods placed on the node within the herd guard's window, and their estimated usage."""
    if entry is None:
        return None
    usage, pods = entry
    return {"pods": pods, "cpuCores": round(usage.cpu, 3), "memoryBytes": round(usage.memory)}


def _age(now: float, then: float | None) -> float | None:
    return None if then is None else round(now - then, 1)


def _sample(items: tuple[str, ...], limit: int = 5) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")
