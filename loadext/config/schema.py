"""The effective, immutable Config and its parts: what the rest of loadext reads.

Only the loader (loader.py) builds these; everything else treats them as values. `Config.hash`
names one effective config in metrics and logs, so dashboards can show which one is live.

Each setting is written once, here: its YAML key (`setting(key=...)`, a dotted path under its
section where the YAML nests it) and its default. The loader reads keys and defaults from these
fields, and tests check that the chart's values and the config fuzzer know every key
(`setting_keys`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

from loadext.config.promql import settle_time
from loadext.scoring import DEFAULT_STRATEGY, STRATEGIES

MISSING_DATA_POLICIES = ("pass", "reject")
FAILURE_POLICIES = ("open", "closed")
REJECTION_KINDS = ("unresolvable", "unschedulable")
IDENTITY_KINDS = ("name", "address")
FILTER_MODES = ("hard", "soft")
PARTIAL_RESPONSES = ("use", "fail")
REBALANCE_MODES = ("dryRun", "evict")
EVICT_MARGIN = 0.05  # evictAt's default: this far above the filter threshold
SIGNAL_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


# The shape of a value, as JSON Schema (jsonschema.py builds the chart's values schema from these;
# a setting without one takes it from its type: bool, str, int).
DURATION = {"type": "string", "pattern": "^([0-9]+(\\.[0-9]*)?(ns|us|µs|ms|s|m|h))+$"}
RATIO = {"type": "number", "exclusiveMinimum": 0, "maximum": 1}
OPTIONAL_RATIO = {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 1}
NONNEGATIVE = {"type": "number", "minimum": 0}
QUANTITY = {"type": ["string", "number"]}
TEXT_MAP = {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}}
URLS = {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}}
NAMES = {"type": "array", "items": {"type": "string", "minLength": 1}}


def choice(*values: str) -> dict[str, Any]:
    return {"enum": list(values)}


def setting(key: str, default: Any = dataclasses.MISSING, shape: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    """A field with the YAML key SREs write for it; its default is the one default there is, and
    `shape` what a value must look like (JSON Schema, for the chart)."""
    metadata = {"key": key} if shape is None else {"key": key, "shape": shape}
    return field(default=default, metadata=metadata, **kwargs)


def key_of(cls: type, name: str) -> str:
    """The YAML key (a dotted path within its section) of a field of a config dataclass."""
    key: str = cls.__dataclass_fields__[name].metadata["key"]  # type: ignore[attr-defined]
    return key


def default_of(cls: type, name: str) -> Any:
    """A field's default, as the dataclass declares it."""
    found = cls.__dataclass_fields__[name]  # type: ignore[attr-defined]
    if found.default is not dataclasses.MISSING:
        return found.default
    if found.default_factory is not dataclasses.MISSING:
        return found.default_factory()
    raise KeyError(f"{cls.__name__}.{name} has no default")


@dataclass(frozen=True)
class BasicAuth:
    username: str = setting("username")
    password_file: str = setting("passwordFile")  # re-read on every query: rotation needs no reload


@dataclass(frozen=True)
class SigV4:
    """AWS Signature Version 4 on every query (Amazon Managed Service for Prometheus). The
    credentials are the AWS SDK's chain (environment, web identity as IRSA sets it, EKS Pod
    Identity, instance profile); with roleArn, loadext assumes that role with them."""

    region: str = setting("region")
    role_arn: str | None = setting("roleArn", None)


@dataclass(frozen=True)
class PrometheusConfig:
    """How to reach the Prometheus API (config/prometheus.py reads and checks it; the sources'
    connection.py speaks it). Every secret comes from a file, re-read on every query."""

    url: str = setting("url")  # the first endpoint
    urls: tuple[str, ...] = setting("urls", (), URLS)  # equivalent endpoints tried in order; `url` alone is one
    timeout: float = setting("timeout", 2.0, DURATION)
    bearer_token_file: str | None = setting("bearerTokenFile", None)
    basic_auth: BasicAuth | None = setting("basicAuth", None)
    ca_file: str | None = setting("caFile", None)
    cert_file: str | None = setting("certFile", None)  # a client certificate, with keyFile
    key_file: str | None = setting("keyFile", None)
    sigv4: SigV4 | None = setting("sigv4", None)  # needs the aws extra (botocore)
    server_name: str | None = setting("serverName", None)  # the name the server's certificate is checked for
    insecure_skip_verify: bool = setting("insecureSkipVerify", False)
    headers: tuple[tuple[str, str], ...] = setting("headers", (), TEXT_MAP)  # sent with every query (X-Scope-OrgID)
    header_files: tuple[tuple[str, str], ...] = setting("headerFiles", (), TEXT_MAP)  # name -> a file with the value
    query_params: tuple[tuple[str, str], ...] = setting("queryParams", (), TEXT_MAP)  # added to every query (dedup)
    # use | fail: a reply with warnings
    partial_response: str = setting("partialResponse", "use", choice(*PARTIAL_RESPONSES))

    @property
    def endpoints(self) -> tuple[str, ...]:
        return self.urls or (self.url,)


@dataclass(frozen=True)
class Signal:
    """One PromQL instant query yielding a 0..1 utilisation per node."""

    name: str = setting("name")
    query: str = setting("query")
    # the default depends on the name: presets.DEFAULT_THRESHOLDS
    threshold: float | None = setting("threshold", shape=OPTIONAL_RATIO)
    weight: float = setting("weight", 1.0, NONNEGATIVE)
    hard: bool = setting("hard", False)  # with filterMode soft: still refuse on this signal, even if every node is over
    # the rebalancer's level (above the threshold: the gap is the hysteresis); None: threshold + EVICT_MARGIN
    evict_at: float | None = setting("evictAt", None, OPTIONAL_RATIO)

    @property
    def evict_level(self) -> float | None:
        """The value at or above which a node counts towards hot; None: no threshold, never hot."""
        if self.threshold is None:
            return None
        if self.evict_at is not None:
            return self.evict_at
        return round(self.threshold + EVICT_MARGIN, 9)  # 0.8 + 0.05 is 0.8500000000000001: 85% would not count

    def over(self, value: float) -> bool:
        """The filter's rule: a value above the threshold (not at it) refuses the node."""
        return self.threshold is not None and value > self.threshold


@dataclass(frozen=True)
class NodeIdentity:
    label: str = setting("label", "node")  # a preset may set its own
    # "name": the label holds the node name; "address": IP[:port] of an InternalIP
    kind: str = setting("kind", "name", choice(*IDENTITY_KINDS))


@dataclass(frozen=True)
class Scoring:
    """The strategy and its parameters by config key (loadext/scoring/ declares both, with
    their defaults); the parameters of the strategy in force only."""

    strategy: str = setting("strategy", DEFAULT_STRATEGY, choice(*STRATEGIES))
    params: tuple[tuple[str, float], ...] = ()

    def param(self, key: str) -> float:
        return dict(self.params)[key]


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
    """Count recent placements until metrics show them; see core/herd/ for the estimate rule."""

    enabled: bool = setting("enabled", False)
    # seconds; 0 = derived from the signals' rate windows (derive_window)
    window: float = setting("window", 0.0, DURATION)
    cpu_limit_factor: float = setting("cpuLimitFactor", 0.85, RATIO)
    memory_limit_factor: float = setting("memoryLimitFactor", 0.7, RATIO)
    best_effort_cpu: float = setting("bestEffort.cpu", 0.25, QUANTITY)  # cores
    best_effort_memory: float = setting("bestEffort.memory", 200.0 * 1024 * 1024, QUANTITY)  # bytes
    burst_cap: int = setting("burstCap", 0)  # most placements per node per window; 0 = no cap
    soft: bool = setting("soft", True)  # never refuse every candidate only because of estimates or the burst cap
    # Pods' own usage (core/herd/learned.py), by namespace and pod; "" turns a resource's learning off.
    pod_usage_cpu: str = setting("podUsage.cpu", DEFAULT_POD_USAGE["cpu"])  # cores
    pod_usage_memory: str = setting("podUsage.memory", DEFAULT_POD_USAGE["memory"])  # bytes

    @cached_property
    def pod_usage_settle(self) -> float:
        """Seconds a pod must have been placed before its measured usage is believed."""
        return settle_time(q for q in (self.pod_usage_cpu, self.pod_usage_memory) if q)

    def pod_usage_queries(self) -> dict[str, str]:
        """resource -> PromQL, for the resources whose learning is on."""
        queries = {"cpu": self.pod_usage_cpu, "memory": self.pod_usage_memory}
        return {resource: query for resource, query in queries.items() if query}


@dataclass(frozen=True)
class Rebalance:
    """Moving pods off nodes that run hot after placement (core/rebalance/, docs/rebalancing.md),
    on the signals and thresholds the filter uses."""

    enabled: bool = setting("enabled", False)
    mode: str = setting("mode", "dryRun", choice(*REBALANCE_MODES))  # dryRun: plan, count and tell; evict: act
    hot_for: int = setting("hotFor", 5)  # consecutive refreshes at or above evictAt to be hot
    cool_for: int = setting("coolFor", 3)  # consecutive refreshes within the threshold to be cool again
    # consecutive refreshes over the threshold (under evictAt) to be hot too; 0: only evictAt heats
    over_for: int = setting("overFor", 40)
    cycle: float = setting("cycle", 60.0, DURATION)
    max_per_node_per_cycle: int = setting("maxPerNodePerCycle", 1)
    max_per_cycle: int = setting("maxPerCycle", 5)
    max_unavailable_per_workload: int = setting("maxUnavailablePerWorkload", 1)
    min_pod_age: float = setting("minPodAge", 300.0, DURATION)  # younger pods stay: their usage is not known yet
    excluded_namespaces: tuple[str, ...] = setting("excludedNamespaces", ("kube-system",), NAMES)
    evict_local_storage: bool = setting("evictLocalStorage", False)  # pods with emptyDir or hostPath volumes
    taint_hot: bool = setting("taints.hot", False)  # loadext.io/hot:PreferNoSchedule while a node is hot
    taint_refused: bool = setting("taints.refused", False)  # loadext.io/refused:NoSchedule while loadext refuses it
    # the stop rule (core/rebalance/followup.py): a replacement Pending longer than pendingFor, or on
    # a node the filter refuses within the herd window, pauses moves of its workload for pauseFor
    pending_for: float = setting("stopRule.pendingFor", 120.0, DURATION)
    pause_for: float = setting("stopRule.pauseFor", 1800.0, DURATION)


@dataclass(frozen=True)
class Pool:
    """Signal overrides for the nodes whose labels match `node_selector` (all pairs must match)."""

    name: str = setting("name")
    node_selector: tuple[tuple[str, str], ...] = setting("nodeSelector", shape=TEXT_MAP)
    signals: tuple[Signal, ...] = setting("signals")  # the full signal list with this pool's thresholds and weights

    def matches(self, labels: Mapping[str, str]) -> bool:
        return every_label(self.node_selector, labels)


def every_label(pairs: Iterable[tuple[str, str]], labels: Mapping[str, str]) -> bool:
    """A nodeSelector's rule (a pool's, and Kubernetes' nodeSelector and matchLabels alike):
    each key present with exactly this value."""
    return all(labels.get(key) == value for key, value in pairs)


@dataclass(frozen=True)
class Config:
    prometheus: PrometheusConfig = setting("prometheus")
    signals: tuple[Signal, ...] = setting("signals")
    node_identity: NodeIdentity = setting("nodeIdentity", default_factory=NodeIdentity)
    preset: str | None = setting("preset", None)
    refresh_interval: float = setting("refreshInterval", 15.0, DURATION)
    max_data_age: float = setting("maxDataAge", 60.0, DURATION)
    missing_data: str = setting("missingData", "pass", choice(*MISSING_DATA_POLICIES))
    failure_policy: str = setting("failurePolicy", "open", choice(*FAILURE_POLICIES))
    scoring: Scoring = setting("scoring", default_factory=Scoring)
    rejected_nodes: str = setting("rejectedNodes", "unresolvable", choice(*REJECTION_KINDS))
    bind_enabled: bool = setting("bind.enabled", False)
    per_node_metrics: bool = setting("telemetry.perNodeMetrics", True)
    pools: tuple[Pool, ...] = setting("pools", ())
    herd_guard: HerdGuard = setting("herdGuard", default_factory=HerdGuard)
    # soft: when every candidate is over a threshold, pass the least hot
    filter_mode: str = setting("filterMode", "hard", choice(*FILTER_MODES))
    rebalance: Rebalance = setting("rebalance", default_factory=Rebalance)

    def query_for(self, signal: Signal) -> str:
        """The PromQL actually sent: the signal's, in the shape its scoring strategy reads
        (scoring/base.py Strategy.query)."""
        return STRATEGIES[self.scoring.strategy].query(signal.query, dict(self.scoring.params), self.refresh_interval)

    def signals_for(self, pool: Pool | None) -> tuple[Signal, ...]:
        """The signals a node is judged by: its pool's (with the pool's thresholds and
        weights), else the top-level ones."""
        return self.signals if pool is None else pool.signals

    def pool_for(self, labels: Mapping[str, str] | None) -> Pool | None:
        """The first pool, in config order, whose selector matches; None: the top-level signals."""
        if labels is None or not self.pools:
            return None
        return next((pool for pool in self.pools if pool.matches(labels)), None)

    @cached_property
    def hash(self) -> str:
        """A short digest of the effective config, so dashboards can show which one is live."""
        canonical = json.dumps(asdict(self), sort_keys=True).encode()
        return hashlib.sha256(canonical).hexdigest()[:12]


# Which dataclass holds the settings of each section of the document, by its YAML key.
SECTIONS: dict[str, type] = {
    "": Config,
    "prometheus": PrometheusConfig,
    "prometheus.basicAuth": BasicAuth,
    "prometheus.sigv4": SigV4,
    "nodeIdentity": NodeIdentity,
    "signals[]": Signal,
    "scoring": Scoring,
    "herdGuard": HerdGuard,
    "pools[]": Pool,
    "rebalance": Rebalance,
}


def setting_keys() -> Iterator[str]:
    """Every key a config document may hold, as a dotted path (`herdGuard.bestEffort.cpu`,
    `signals[].threshold`, `scoring.riskWindow`): from the fields' keys, and for scoring from
    each strategy's parameters."""
    for section, cls in SECTIONS.items():
        for item in dataclasses.fields(cls):
            if "key" in item.metadata:
                yield f"{section}.{item.metadata['key']}" if section else item.metadata["key"]
    for strategy in STRATEGIES.values():
        for param in strategy.params:
            yield f"scoring.{param.key}"


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
