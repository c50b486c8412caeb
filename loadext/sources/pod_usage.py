"""The pods' measured usage, read when the rebalancer needs it: the herd guard's per-pod queries
(`herdGuard.podUsage`), asked now rather than taken from the last refresh, so that a move is
chosen on what its pods use at this cycle. Blocking: callers run it in a worker thread.
"""

from __future__ import annotations

from loadext.config import Config
from loadext.core.herd.learned import PodKey
from loadext.sources.metrics import MetricsSource


def read_pod_usage(source: MetricsSource, config: Config) -> dict[str, dict[PodKey, float]]:
    """resource -> (namespace, pod) -> measured, for the resources with a query."""
    queries = config.herd_guard.pod_usage_queries()
    return {r: source.query_pods(f"podUsage.{r}", q)[0] for r, q in queries.items()}
