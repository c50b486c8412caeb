"""The herd guard's inputs and outcomes: pods measured, how far off estimates were, stranded pods."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from loadext.core.herd.learned import EstimateError

# -0.5 is half the real use, 1 twice it: the factor rule over a limit far above use lands high.
ESTIMATE_ERROR_BUCKETS = (-0.9, -0.5, -0.3, -0.1, 0.1, 0.3, 0.5, 1, 2, 5, 10)


class HerdMetrics:
    def __init__(self, r: CollectorRegistry) -> None:
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

    def watch_stranded(self, count: Callable[[], float]) -> None:
        self.stranded.set_function(count)

    def pods_measured(self, resource: str, pods: int) -> None:
        self.pod_usage_pods.labels(resource).set(pods)

    def pod_usage_failed(self, resource: str, kind: str) -> None:
        self.pod_usage_errors.labels(resource, kind).inc()
        self.pod_usage_pods.labels(resource).set(0)

    def estimates_were_off(self, errors: Iterable[EstimateError]) -> None:
        for error in errors:
            self.estimate_error.labels(error.resource, error.source).observe(error.ratio)

    def nudged(self, ok: bool) -> None:
        self.requeue_nudges.labels("ok" if ok else "error").inc()
