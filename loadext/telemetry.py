"""loadext's own metrics: what it decided, how fast, and whether its data is fresh.

Everything lives in one CollectorRegistry per process (tests make their own). Per-node series
come from a custom collector that reads the current snapshot at scrape time, so a deleted node
disappears from /metrics without bookkeeping, and the whole family can be switched off.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from loadext import __version__
from loadext.config import Config
from loadext.core.policy import NodeState
from loadext.core.results import FilterResult, PreemptResult, PrioritizeResult, Rejections

VERBS = ("filter", "prioritize", "preempt", "bind")
# bad_request: 400 or 413; timeout: 408 (body too slow); overloaded: 503 (limits.py);
# aborted: the client closed the connection before its body was in; error: 500 (a bug).
OUTCOMES = ("ok", "bad_request", "timeout", "overloaded", "aborted", "error")
# From 250 us to the scheduler's default 5 s extender timeout.
LATENCY_BUCKETS = (0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
QUERY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
# -0.5 is half the real use, 1 twice it: the factor rule over a limit far above use lands high.
ESTIMATE_ERROR_BUCKETS = (-0.9, -0.5, -0.3, -0.1, 0.1, 0.3, 0.5, 1, 2, 5, 10)

NodeStates = Callable[[], Iterable[NodeState]]


class _NodeCollector(Collector):
    """Per-node gauges read from the current snapshot at scrape time: a deleted node simply
    stops appearing, and the family can be switched off for huge clusters."""

    def __init__(self, source: NodeStates) -> None:
        self._source = source

    def collect(self) -> Iterable[GaugeMetricFamily]:
        ratio = GaugeMetricFamily(
            "loadext_node_signal_ratio",
            "Utilisation loadext currently believes per node and signal (0..1).",
            labels=["node", "signal"],
        )
        stamp = GaugeMetricFamily(
            "loadext_node_signal_timestamp_seconds",
            "When the value in loadext_node_signal_ratio was evaluated by Prometheus.",
            labels=["node", "signal"],
        )
        schedulable = GaugeMetricFamily(
            "loadext_node_schedulable",
            "1 if loadext's filter passes the node now, 0 if it refuses it.",
            labels=["node"],
        )
        score = GaugeMetricFamily(
            "loadext_node_score", "The score loadext gives the node now (0..10).", labels=["node"]
        )
        for state in self._source():
            for signal, sample in state.samples.items():
                ratio.add_metric([state.node, signal], sample.value)
                stamp.add_metric([state.node, signal], sample.timestamp)
            schedulable.add_metric([state.node], 1 if state.verdict.passed else 0)
            score.add_metric([state.node], state.verdict.score)
        yield from (ratio, stamp, schedulable, score)


class Telemetry:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "loadext_requests", "Extender requests by verb and outcome.", ["verb", "outcome"], registry=r
        )
        self.request_duration = Histogram(
            "loadext_request_duration_seconds",
            "Time to answer an extender request.",
            ["verb"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge(
            "loadext_requests_in_flight", "Extender requests being read or answered now.", registry=r
        )
        self.watch_healthy = Gauge(
            "loadext_kube_watch_healthy",
            "1 while the list/watch of the resource (nodes, pods, configmap) is current, 0 while it retries.",
            ["resource"],
            registry=r,
        )
        self.slow_clients = Counter(
            "loadext_client_read_timeouts",
            "Requests cut because the client sent too slowly, by phase (header: 408 and close; body: 408).",
            ["phase"],
            registry=r,
        )
        for phase in ("header", "body"):
            self.slow_clients.labels(phase)
        self.node_rejections = Counter(
            "loadext_node_rejections",
            "Nodes refused by filter or preempt, by signal and cause (threshold, missing, degraded).",
            ["signal", "cause"],
            registry=r,
        )
        self.filtered_nodes = Counter(
            "loadext_filter_nodes",
            "Nodes evaluated by filter, by result (passed, rejected).",
            ["result"],
            registry=r,
        )
        self.no_fit = Counter(
            "loadext_filter_no_fit", "Filter calls in which loadext passed no node at all.", registry=r
        )
        self.scores = Counter(
            "loadext_prioritize_scores", "Scores returned by prioritize, by score (0..10).", ["score"], registry=r
        )
        self.query_duration = Histogram(
            "loadext_prometheus_query_duration_seconds",
            "Prometheus query time per signal.",
            ["signal"],
            buckets=QUERY_BUCKETS,
            registry=r,
        )
        self.soft_passes = Counter(
            "loadext_filter_soft_passes",
            "Filter calls in which every candidate was refused and soft mode passed the least loaded, by why "
            "they were refused (herd: pods in flight; threshold: filterMode soft).",
            ["reason"],
            registry=r,
        )
        self.stranded = Gauge(
            "loadext_stranded_pods",
            "Pods whose last filter call passed no node (so they wait unschedulable), seen in the last 5.5 minutes.",
            registry=r,
        )
        self.requeue_nudges = Counter(
            "loadext_requeue_nudges",
            "Node annotations made so kube-scheduler retries stranded pods at once, by outcome (ok, error).",
            ["outcome"],
            registry=r,
        )
        self.pod_usage_pods = Gauge(
            "loadext_pod_usage_pods",
            "Pods whose own usage the last herdGuard.podUsage query returned, per resource; 0 means estimates "
            "fall back to owner history and the factor rule.",
            ["resource"],
            registry=r,
        )
        self.pod_usage_errors = Counter(
            "loadext_pod_usage_query_errors",
            "Failed herdGuard.podUsage queries by resource and error kind (as for signals).",
            ["resource", "error"],
            registry=r,
        )
        self.estimate_error = Histogram(
            "loadext_estimate_error_ratio",
            "How far off a pod's estimate was when its own usage became known: (estimated - measured) / "
            "measured, by resource and what the estimate came from (owner history, factor rule).",
            ["resource", "source"],
            buckets=ESTIMATE_ERROR_BUCKETS,
            registry=r,
        )
        self.query_errors = Counter(
            "loadext_prometheus_query_errors",
            "Failed Prometheus queries by signal and error kind.",
            ["signal", "error"],
            registry=r,
        )
        self.last_query_error = Gauge(
            "loadext_prometheus_last_error_timestamp_seconds",
            "When a query for the signal last failed (the kind and message are in /explain and the log).",
            ["signal"],
            registry=r,
        )
        self.invalid_values = Counter(
            "loadext_prometheus_invalid_values",
            "NaN or Inf samples dropped, by signal.",
            ["signal"],
            registry=r,
        )
        self.series = Gauge(
            "loadext_signal_series",
            "Series stored per signal after the last refresh.",
            ["signal"],
            registry=r,
        )
        self.unmapped_nodes = Gauge(
            "loadext_unmapped_nodes",
            "Nodes known to loadext with no series for the signal.",
            ["signal"],
            registry=r,
        )
        self.unmatched_series = Gauge(
            "loadext_unmatched_series",
            "Series whose identity label matches no known node.",
            ["signal"],
            registry=r,
        )
        self.snapshot_timestamp = Gauge(
            "loadext_snapshot_timestamp_seconds",
            "Time of the newest successful Prometheus query behind the current snapshot.",
            registry=r,
        )
        self.degraded = Gauge(
            "loadext_degraded",
            "1 while no fresh data exists and the failure policy decides every node.",
            registry=r,
        )
        self.config_reloads = Counter("loadext_config_reloads", "Config loads by result.", ["result"], registry=r)
        self.config_info = Gauge("loadext_config_info", "The active config's hash (value 1).", ["hash"], registry=r)
        self.config_reload_ok = Gauge(
            "loadext_config_last_reload_successful",
            "1 if the newest config version loadext saw was valid, 0 if it was rejected.",
            registry=r,
        )
        self.config_reload_ok.set(1)
        self.thresholds = Gauge(
            "loadext_signal_threshold_ratio", "The configured filter threshold per signal.", ["signal"], registry=r
        )
        self.preferred = Counter(
            "loadext_node_preferred",
            "Prioritize calls in which the node got loadext's best score (per-node; off with perNodeMetrics).",
            ["node"],
            registry=r,
        )
        self._preferred_counters: dict[str, Any] = {}
        self.config_last_reload = Gauge(
            "loadext_config_last_reload_success_timestamp_seconds",
            "When the active config was loaded.",
            registry=r,
        )
        build = Info("loadext_build", "loadext version.", registry=r)
        build.info({"version": __version__, "python_version": platform.python_version()})
        for verb in VERBS:
            self.request_duration.labels(verb)
            for outcome in OUTCOMES:
                self.requests.labels(verb, outcome)
        for result in ("success", "failure"):
            self.config_reloads.labels(result)
        for result in ("passed", "rejected"):
            self.filtered_nodes.labels(result)
        # Children resolved once: labels() costs microseconds, and filter runs on every cycle.
        self.passed_nodes = self.filtered_nodes.labels("passed")
        self.rejected_nodes = self.filtered_nodes.labels("rejected")
        self.score_counters = [self.scores.labels(str(score)) for score in range(11)]
        self._rejection_counters: dict[tuple[str, str], Any] = {}
        self._node_collector: _NodeCollector | None = None
        self._pending: dict[Any, int] = {}  # Counter (a labelled child) -> count not yet in it

    # --- what the verbs decided (core/extender.py's results) ------------------------------

    # A verb's counts wait as plain ints until /metrics is scraped (flush): Counter.inc takes
    # a lock and checks its labels each time, and a prioritize call made up to 12 of them.

    def _add(self, counter: Any, count: int) -> None:
        pending = self._pending
        pending[counter] = pending.get(counter, 0) + count

    def flush(self) -> None:
        """Move the counts added since the last scrape into their Counters (on the event loop,
        where the verbs add them, before every exposition)."""
        pending, self._pending = self._pending, {}
        for counter, count in pending.items():
            counter.inc(count)

    def count_filter(self, result: FilterResult) -> None:
        add = self._add
        add(self.passed_nodes, len(result.passed))
        if result.rejected:
            add(self.rejected_nodes, len(result.rejected))
            self._count_rejections(result.rejections)
        if result.names and not result.passed:
            add(self.no_fit, 1)
        if result.soft:
            add(self.soft_passes.labels(result.soft), 1)

    def count_prioritize(self, result: PrioritizeResult, per_node: bool) -> None:
        # Scores are 0..10, so they fit a bytes object, and bytes.count tallies at C speed.
        scores, add = bytes(result.scores), self._add
        for score, counter in enumerate(self.score_counters):
            count = scores.count(score)
            if count:
                add(counter, count)
        if per_node and result.best is not None:
            add(self.preferred_counter(result.names[result.best]), 1)

    def count_preempt(self, result: PreemptResult) -> None:
        self._count_rejections(result.rejections)

    def _count_rejections(self, rejections: Rejections) -> None:
        for signal, cause, nodes in rejections:
            self._add(self.rejection_counter(signal, cause), nodes)

    def config_applied(self, config: Config, node_states: NodeStates, now: float, error_kinds: Iterable[str]) -> None:
        """A config came into force: its signals' series (with one error series per kind the
        metrics source reports), hash and thresholds, and the per-node family on or off."""
        self.prepare_signals(((s.name, s.threshold) for s in config.signals), tuple(error_kinds))
        self.set_config_hash(config.hash)
        self.config_last_reload.set(now)
        self.export_nodes(node_states if config.per_node_metrics else None)

    def preferred_counter(self, node: str) -> Any:
        counter = self._preferred_counters.get(node)
        if counter is None:
            counter = self._preferred_counters[node] = self.preferred.labels(node)
        return counter

    def rejection_counter(self, signal: str, cause: str) -> Any:
        key = (signal, cause)
        counter = self._rejection_counters.get(key)
        if counter is None:
            counter = self._rejection_counters[key] = self.node_rejections.labels(signal, cause)
        return counter

    def export_nodes(self, source: NodeStates | None) -> None:
        """Register (or with None, unregister) the per-node gauge family."""
        if self._node_collector is not None:
            self.registry.unregister(self._node_collector)
            self._node_collector = None
        if source is not None:
            self._node_collector = _NodeCollector(source)
            self.registry.register(self._node_collector)

    def prepare_signals(self, signals: Iterable[tuple[str, float | None]], error_kinds: tuple[str, ...]) -> None:
        """Pre-create per-signal series so dashboards show 0, not nothing; publish thresholds."""
        self.thresholds.clear()
        for signal, threshold in signals:
            if threshold is not None:
                self.thresholds.labels(signal).set(threshold)
            self.query_duration.labels(signal)
            self.invalid_values.labels(signal)
            for kind in error_kinds:
                self.query_errors.labels(signal, kind)
            for cause in ("threshold", "missing", "degraded"):
                self.node_rejections.labels(signal, cause)

    def set_config_hash(self, config_hash: str) -> None:
        self.config_info.clear()
        self.config_info.labels(config_hash).set(1)
