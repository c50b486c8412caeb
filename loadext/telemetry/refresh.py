"""The refresh loop: each signal's queries, what they returned, and how series map to nodes."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from loadext.core.ingest import EndpointState, MappingReport
from loadext.core.snapshot import Snapshot

QUERY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
ROUND_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class RefreshMetrics:
    def __init__(self, r: CollectorRegistry) -> None:
        self.query_duration = Histogram(
            "loadext_prometheus_query_duration_seconds",
            "Prometheus query time per signal.",
            ["signal"],
            buckets=QUERY_BUCKETS,
            registry=r,
        )
        self.round_duration = Histogram(
            "loadext_refresh_duration_seconds",
            "Whole refresh rounds: every query, the pods' usage, storing and deciding, publishing.",
            buckets=ROUND_BUCKETS,
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
            "loadext_prometheus_invalid_values", "NaN or Inf samples dropped, by signal.", ["signal"], registry=r
        )
        self.series = Gauge(
            "loadext_signal_series", "Series stored per signal after the last refresh.", ["signal"], registry=r
        )
        self.unmapped_nodes = Gauge(
            "loadext_unmapped_nodes", "Nodes known to loadext with no series for the signal.", ["signal"], registry=r
        )
        self.unmatched_series = Gauge(
            "loadext_unmatched_series", "Series whose identity label matches no known node.", ["signal"], registry=r
        )
        self.snapshot_timestamp = Gauge(
            "loadext_snapshot_timestamp_seconds",
            "Time of the newest successful Prometheus query behind the current snapshot.",
            registry=r,
        )
        self.partial = Gauge(
            "loadext_signal_partial",
            "1 while the signal's last answer was partial (the backend warned that data is missing), else 0.",
            ["signal"],
            registry=r,
        )
        self.endpoint_up = Gauge(
            "loadext_prometheus_endpoint_up",
            "1 if the Prometheus endpoint (prometheus.url or one of urls) answered its last query, 0 if it failed.",
            ["url"],
            registry=r,
        )
        self.nodes_forgotten = Counter(
            "loadext_request_nodes_forgotten",
            "Node names learnt only from requests and forgotten because more were named than loadext keeps "
            "(the least recently named first; with --watch-nodes request names are not kept at all).",
            registry=r,
        )
        self.degraded = Gauge(
            "loadext_degraded", "1 while no fresh data exists and the failure policy decides every node.", registry=r
        )

    def watch_degraded(self, degraded: Callable[[], bool]) -> None:
        self.degraded.set_function(lambda: 1 if degraded() else 0)

    def prepare_signals(self, signals: Iterable[str], error_kinds: Iterable[str]) -> None:
        """Pre-create per-signal series (one error series per kind the source reports), so
        dashboards show 0, not nothing."""
        kinds = tuple(error_kinds)
        for signal in signals:
            self.query_duration.labels(signal)
            self.invalid_values.labels(signal)
            for kind in kinds:
                self.query_errors.labels(signal, kind)

    def query_took(self, signal: str, seconds: float) -> None:
        self.query_duration.labels(signal).observe(seconds)

    def query_failed(self, signal: str, kind: str, now: float) -> None:
        self.query_errors.labels(signal, kind).inc()
        self.last_query_error.labels(signal).set(now)

    def answered(self, signal: str, partial: bool) -> None:
        self.partial.labels(signal).set(1 if partial else 0)

    def endpoints_reported(self, states: Iterable[EndpointState]) -> None:
        for state in states:
            self.endpoint_up.labels(state.url).set(1 if state.up else 0)

    def values_dropped(self, signal: str, count: int) -> None:
        self.invalid_values.labels(signal).inc(count)

    def request_nodes_forgotten(self, count: int) -> None:
        if count:
            self.nodes_forgotten.inc(count)

    def round_took(self, seconds: float) -> None:
        self.round_duration.observe(seconds)

    def round_published(self, snapshot: Snapshot, mapping: Mapping[str, MappingReport], signals: Iterable[str]) -> None:
        for name, report in mapping.items():
            self.unmapped_nodes.labels(name).set(len(report.unmapped_nodes))
            self.unmatched_series.labels(name).set(len(report.unmatched_series))
        if snapshot.newest is not None:
            self.snapshot_timestamp.set(snapshot.newest)
        for signal in signals:
            self.series.labels(signal).set(snapshot.series_counts.get(signal, 0))
