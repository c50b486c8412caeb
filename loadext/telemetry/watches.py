"""The Kubernetes list/watches: whether each is current."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Gauge


class WatchMetrics:
    def __init__(self, r: CollectorRegistry) -> None:
        self.watch_healthy = Gauge(
            "loadext_kube_watch_healthy",
            "1 while the list/watch of the resource (nodes, pods, configmap) is current, 0 while it retries.",
            ["resource"],
            registry=r,
        )

    def health_of(self, resource: str) -> Callable[[bool], None]:
        """What a watch calls with True while it is current, False while it retries. The child
        is looked up on each call, not kept: once `unwatched` removed the series, a restarted
        watch must bring it back."""

        def report(healthy: bool) -> None:
            self.watch_healthy.labels(resource).set(1 if healthy else 0)

        return report

    def unwatched(self, resource: str) -> Callable[[], None]:
        """What a stopped watch calls: its series goes (a stopped watch is neither current nor failing)."""

        def forget() -> None:
            with contextlib.suppress(KeyError):
                self.watch_healthy.remove(resource)

        return forget
