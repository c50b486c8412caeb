"""The rebalancer: hot nodes, each planned move by result, what came of each eviction's
replacement and the workloads paused by it, and whether it acts."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from loadext.core.rebalance.followup import OUTCOMES
from loadext.core.rebalance.plan import RESULTS

STATES = ("off", "standby", "paused", "active")


class RebalanceMetrics:
    def __init__(self, r: CollectorRegistry) -> None:
        self.hot_nodes = Gauge(
            "loadext_rebalance_hot_nodes",
            "Nodes hot (at or above evictAt for hotFor, or over the threshold for overFor).",
            registry=r,
        )
        self.evictions = Counter(
            "loadext_rebalance_evictions",
            "Moves the rebalancer planned, by what came of them (evicted, pdb_blocked, dry_run, failed, "
            "no_target, rate_limited, no_candidate).",
            ["result"],
            registry=r,
        )
        self.state = Gauge(
            "loadext_rebalance_state",
            "1 for the rebalancer's state: off, standby (another replica holds the Lease), paused "
            "(no fresh metrics) or active.",
            ["state"],
            registry=r,
        )
        self.taint_errors = Counter("loadext_rebalance_taint_errors", "Node taint updates that failed.", registry=r)
        self.replacements = Counter(
            "loadext_rebalance_replacements",
            "Evicted pods' replacements by what came of them: on_target, elsewhere (bound, its node within "
            "the thresholds for a herd window), pending (not bound within stopRule.pendingFor), hot (bound "
            "to a node the filter refuses within the herd window). pending and hot pause the workload.",
            ["outcome"],
            registry=r,
        )
        self.paused_workloads = Gauge(
            "loadext_rebalance_paused_workloads", "Workloads whose moves the stop rule pauses now.", registry=r
        )
        self.daemon_pods_held_back = Gauge(
            "loadext_rebalance_daemon_pods_held_back",
            "DaemonSet pods missing from a node only because of loadext's refused taint (taints.refused): "
            "the DaemonSet controller does not create them there until the taint goes.",
            registry=r,
        )
        for result in RESULTS:
            self.evictions.labels(result)
        for outcome in OUTCOMES:
            self.replacements.labels(outcome)
        self.now("off")

    def now(self, state: str) -> None:
        for each in STATES:
            self.state.labels(each).set(1 if each == state else 0)

    def counted(self, result: str) -> None:
        self.evictions.labels(result).inc()
