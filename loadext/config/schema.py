"""The effective, immutable Config and its parts: what the rest of loadext reads.

Only the loader (loader.py) builds these; everything else treats them as values. `Config.hash`
names one effective config in metrics and logs, so dashboards can show which one is live.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from functools import cached_property

MISSING_DATA_POLICIES = ("pass", "reject")
FAILURE_POLICIES = ("open", "closed")
STRATEGIES = ("leastLoaded", "targetUtilization", "riskAware")
REJECTION_KINDS = ("unresolvable", "unschedulable")
IDENTITY_KINDS = ("name", "address")
SIGNAL_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


@dataclass(frozen=True)
class PrometheusConfig:
    url: str
    timeout: float = 2.0
    bearer_token_file: str | None = None
    ca_file: str | None = None
    insecure_skip_verify: bool = False


@dataclass(frozen=True)
class Signal:
    """One PromQL instant query yielding a 0..1 utilisation per node."""

    name: str
    query: str
    threshold: float | None
    weight: float
    hard: bool = False  # with filterMode soft: still refuse on this signal, even if every node is over


@dataclass(frozen=True)
class NodeIdentity:
    label: str
    kind: str  # "name": the label holds the node name; "address": IP[:port] of an InternalIP


@dataclass(frozen=True)
class Scoring:
    strategy: str = "leastLoaded"
    target_utilization: float = 0.6
    risk_window: float = 600.0  # riskAware: the window of the mean and standard deviation
    risk_k: float = 1.0  # riskAware: how many standard deviations count as risk


# cAdvisor's series as the kubelet serves them (kube-prometheus-stack scrapes them as is):
# container="" is the pod-level cgroup and "POD" the pause container, both left out of the sum.
# irate, as kube-prometheus' own per-pod recording rule: right after two scrapes, where rate()
# under-reads a new pod until its range has filled (see settle_time).
DEFAULT_POD_USAGE = {
    "cpu": 'sum by (namespace, pod) (irate(container_cpu_usage_seconds_total{container!="", container!="POD"}[5m]))',
    "memory": 'sum by (namespace, pod) (container_memory_working_set_bytes{container!="", container!="POD"})',
}


@dataclass(frozen=True)
class HerdGuard:
    """Count recent placements until metrics show them; see herd.py for the estimate rule."""

    enabled: bool = False
    window: float = 0.0  # seconds; 0 = derived from the signals' rate windows (see derive_window)
    cpu_limit_factor: float = 0.85
    memory_limit_factor: float = 0.7
    best_effort_cpu: float = 0.25  # cores
    best_effort_memory: float = 200.0 * 1024 * 1024  # bytes
    burst_cap: int = 0  # most placements per node per window; 0 = no cap
    soft: bool = True  # never refuse every candidate only because of estimates or the burst cap
    # Pods' own usage (core/usage.py), by namespace and pod; "" turns a resource's learning off.
    pod_usage_cpu: str = DEFAULT_POD_USAGE["cpu"]  # cores
    pod_usage_memory: str = DEFAULT_POD_USAGE["memory"]  # bytes

    @cached_property
    def pod_usage_settle(self) -> float:
        """Seconds a pod must have been placed before its measured usage is believed."""
        return settle_time(q for q in (self.pod_usage_cpu, self.pod_usage_memory) if q)

    def pod_usage_queries(self) -> dict[str, str]:
        """resource -> PromQL, for the resources whose learning is on."""
        queries = {"cpu": self.pod_usage_cpu, "memory": self.pod_usage_memory}
        return {resource: query for resource, query in queries.items() if query}


_RANGE = re.compile(r"\[(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)(?::[^\]]*)?\]")
_PROMQL_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


# rate(), increase(), deriv() and the *_over_time() functions average over their whole range, so
# a series younger than the range reads low (rate's extrapolation is capped); irate() and plain
# gauges do not. \b keeps irate( from matching rate(.
_AVERAGING_RANGE = re.compile(
    r"\b(?:rate|increase|deriv|\w+_over_time)\s*\([^\[]*\[(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)(?::[^\]]*)?\]"
)


def settle_time(queries: Iterable[str]) -> float:
    """The longest range an averaging function in the queries reads over: until a new pod's
    series is that old, its value is an under-read, not its usage."""
    ranges = [float(n) * _PROMQL_UNITS[unit] for query in queries for n, unit in _AVERAGING_RANGE.findall(query)]
    return max(ranges, default=0.0)


def derive_window(queries: Iterable[str], refresh_interval: float) -> float:
    """The longest range in the signals' PromQL (the rate window: how long until a new pod's
    usage is fully visible), plus a refresh and a scrape; 5 minutes if no query has a range."""
    ranges = [float(n) * _PROMQL_UNITS[unit] for query in queries for n, unit in _RANGE.findall(query)]
    return max(ranges, default=300.0) + refresh_interval + 30.0


@dataclass(frozen=True)
class Pool:
    """Signal overrides for the nodes whose labels match `node_selector` (all pairs must match)."""

    name: str
    node_selector: tuple[tuple[str, str], ...]
    signals: tuple[Signal, ...]  # the full signal list with this pool's thresholds and weights

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(key) == value for key, value in self.node_selector)


@dataclass(frozen=True)
class Config:
    prometheus: PrometheusConfig
    signals: tuple[Signal, ...]
    node_identity: NodeIdentity
    preset: str | None = None
    refresh_interval: float = 15.0
    max_data_age: float = 60.0
    missing_data: str = "pass"
    failure_policy: str = "open"
    scoring: Scoring = field(default_factory=Scoring)
    rejected_nodes: str = "unresolvable"
    bind_enabled: bool = False
    per_node_metrics: bool = True
    pools: tuple[Pool, ...] = ()
    herd_guard: HerdGuard = field(default_factory=HerdGuard)
    filter_mode: str = "hard"  # soft: when every candidate is over a threshold, pass the least hot

    def query_for(self, signal: Signal) -> str:
        """The PromQL actually sent. riskAware adds the window's mean and standard deviation to
        the current value in the same query (a `loadext_stat` label tells them apart), so it
        stays one query per signal per refresh."""
        if self.scoring.strategy != "riskAware":
            return signal.query
        window = f"{max(int(self.scoring.risk_window), 1)}s:{max(int(self.refresh_interval), 1)}s"
        stat = 'label_replace({expr}, "loadext_stat", "{name}", "", "")'
        return " or ".join(
            [
                stat.format(expr=f"({signal.query})", name="current"),
                stat.format(expr=f"avg_over_time(({signal.query})[{window}])", name="mean"),
                stat.format(expr=f"stddev_over_time(({signal.query})[{window}])", name="stddev"),
            ]
        )

    def pool_for(self, labels: Mapping[str, str] | None) -> Pool | None:
        """The first pool, in config order, whose selector matches; None: the top-level signals."""
        if labels is None:
            return None
        return next((pool for pool in self.pools if pool.matches(labels)), None)

    @cached_property
    def hash(self) -> str:
        """A short digest of the effective config, so dashboards can show which one is live."""
        canonical = json.dumps(asdict(self), sort_keys=True).encode()
        return hashlib.sha256(canonical).hexdigest()[:12]


@dataclass(frozen=True)
class FieldError:
    path: str
    line: int | None
    message: str
    column: int | None = None

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line else ""
        if self.line and self.column:
            where = f"line {self.line}, column {self.column}: "
        return f"{where}{self.path}: {self.message}"


class ConfigError(ValueError):
    """Every problem found in one config document, each naming its field and line."""

    def __init__(self, errors: list[FieldError], source: str = "config") -> None:
        self.errors = errors
        self.source = source
        super().__init__(f"{source}: " + "; ".join(str(e) for e in errors))
