"""What the verbs decided and how fast: counted per call in bulk, moved into Counters per scrape."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from loadext.core.results import FilterResult, PreemptResult, PrioritizeResult, Rejections

VERBS = ("filter", "prioritize", "preempt", "bind")
# bad_request: 400 or 413; timeout: 408 (body too slow); overloaded: 503 (limits.py);
# aborted: the client closed the connection before its body was in; error: 500 (a bug).
OUTCOMES = ("ok", "bad_request", "timeout", "overloaded", "aborted", "error")
# From 250 us to the scheduler's default 5 s extender timeout.
LATENCY_BUCKETS = (0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
REJECTION_CAUSES = ("threshold", "missing", "degraded")


class VerbMetrics:
    def __init__(self, r: CollectorRegistry) -> None:
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
        self.slow_clients = Counter(
            "loadext_client_read_timeouts",
            "Requests cut because the client sent too slowly, by phase (header: 408 and close; body: 408).",
            ["phase"],
            registry=r,
        )
        self.node_rejections = Counter(
            "loadext_node_rejections",
            "Nodes refused by filter or preempt, by signal and cause (threshold, missing, degraded).",
            ["signal", "cause"],
            registry=r,
        )
        self.filtered_nodes = Counter(
            "loadext_filter_nodes", "Nodes evaluated by filter, by result (passed, rejected).", ["result"], registry=r
        )
        self.no_fit = Counter(
            "loadext_filter_no_fit", "Filter calls in which loadext passed no node at all.", registry=r
        )
        self.scores = Counter(
            "loadext_prioritize_scores", "Scores returned by prioritize, by score (0..10).", ["score"], registry=r
        )
        self.soft_passes = Counter(
            "loadext_filter_soft_passes",
            "Filter calls in which every candidate was refused and soft mode passed the least loaded, by why "
            "they were refused (herd: pods in flight; threshold: filterMode soft).",
            ["reason"],
            registry=r,
        )
        self.preferred = Counter(
            "loadext_node_preferred",
            "Prioritize calls in which the node got loadext's best score (per-node; off with perNodeMetrics).",
            ["node"],
            registry=r,
        )
        for phase in ("header", "body"):
            self.slow_clients.labels(phase)
        for verb in VERBS:
            self.request_duration.labels(verb)
            for outcome in OUTCOMES:
                self.requests.labels(verb, outcome)
        # Children resolved once: labels() costs microseconds, and filter runs on every cycle.
        self._passed, self._rejected = self.filtered_nodes.labels("passed"), self.filtered_nodes.labels("rejected")
        self._score_counters = [self.scores.labels(str(score)) for score in range(11)]
        self._rejection_counters: dict[tuple[str, str], Any] = {}
        self._preferred_counters: dict[str, Any] = {}
        # A verb's counts wait as plain ints until /metrics is scraped (flush): Counter.inc takes
        # a lock and checks its labels each time, and a prioritize call made up to 12 of them.
        self._pending: dict[Any, int] = {}  # Counter (a labelled child) -> count not yet in it

    def handler_counters(self, verb: str) -> tuple[Any, Callable[[str], None]]:
        """The verb handler's duration histogram, and what counts a call's outcome (in bulk,
        as the verbs' own counts are): both resolved once per verb."""
        counters = {outcome: self.requests.labels(verb, outcome) for outcome in OUTCOMES}

        def count_outcome(outcome: str) -> None:
            self._add(counters[outcome], 1)

        return self.request_duration.labels(verb), count_outcome

    def slow_client(self, phase: str) -> None:
        self.slow_clients.labels(phase).inc()

    def watch_in_flight(self, count: Callable[[], float]) -> None:
        self.in_flight.set_function(count)

    def prepare_signals(self, signals: Iterable[str]) -> None:
        """Pre-create per-signal series so dashboards show 0, not nothing."""
        for signal in signals:
            for cause in REJECTION_CAUSES:
                self.node_rejections.labels(signal, cause)

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
        add(self._passed, len(result.passed))
        if result.rejected:
            add(self._rejected, len(result.rejected))
            self._count_rejections(result.rejections)
        if result.names and not result.passed:
            add(self.no_fit, 1)
        if result.soft:
            add(self.soft_passes.labels(result.soft), 1)

    def count_prioritize(self, result: PrioritizeResult, per_node: bool) -> None:
        # Scores are 0..10, so they fit a bytes object, and bytes.count tallies at C speed.
        scores, add = bytes(result.scores), self._add
        for score, counter in enumerate(self._score_counters):
            count = scores.count(score)
            if count:
                add(counter, count)
        if per_node and result.best is not None:
            add(self._preferred_counter(result.names[result.best]), 1)

    def count_preempt(self, result: PreemptResult) -> None:
        self._count_rejections(result.rejections)

    def _count_rejections(self, rejections: Rejections) -> None:
        for signal, cause, nodes in rejections:
            key = (signal, cause)
            counter = self._rejection_counters.get(key)
            if counter is None:
                counter = self._rejection_counters[key] = self.node_rejections.labels(signal, cause)
            self._add(counter, nodes)

    def _preferred_counter(self, node: str) -> Any:
        counter = self._preferred_counters.get(node)
        if counter is None:
            counter = self._preferred_counters[node] = self.preferred.labels(node)
        return counter
