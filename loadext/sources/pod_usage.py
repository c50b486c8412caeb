"""The pods' measured usage, read when the rebalancer needs it: the herd guard's per-pod queries
(`herdGuard.podUsage`), asked now rather than taken from the last refresh, so that a move is
chosen on what its pods use at this cycle. One Prometheus client, rebuilt when its config changes.
Blocking: callers run it in a worker thread.
"""

from __future__ import annotations

from loadext.config import Config, PrometheusConfig
from loadext.core.herd.learned import PodKey
from loadext.sources.prometheus import PrometheusSource


class PodUsageReader:
    def __init__(self) -> None:
        self._source: tuple[PrometheusConfig, PrometheusSource] | None = None

    def read(self, config: Config) -> dict[str, dict[PodKey, float]]:
        """resource -> (namespace, pod) -> measured, for the resources with a query."""
        if self._source is None or self._source[0] != config.prometheus:
            self.close()
            self._source = (config.prometheus, PrometheusSource(config.prometheus))
        source = self._source[1]
        queries = {"cpu": config.herd_guard.pod_usage_cpu, "memory": config.herd_guard.pod_usage_memory}
        return {r: source.query_pods(f"podUsage.{r}", q)[0] for r, q in queries.items() if q}

    def close(self) -> None:
        if self._source is not None:
            self._source[1].close()
            self._source = None
