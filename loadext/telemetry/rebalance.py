"""The rebalancer: hot nodes, each planned move by result, and whether it acts."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from loadext.core.rebalance.plan import RESULTS

STATES = ("off", "standby", "paused", "active")


class RebalanceMetrics:
    def __init__(self, r: CollectorRegistry) -> None:
        self.hot_nodes = Gauge("loadext_rebalance_hot_nodes", "Nodes hot (at or above evictAt for hotFor).", registry=r)
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
        for result in RESULTS:
            self.evictions.labels(result)
        self.now("off")

    def now(self, state: str) -> None:
        for each in STATES:
            self.state.labels(each).set(1 if each == state else 0)

    def counted(self, result: str) -> None:
        self.evictions.labels(result).inc()
