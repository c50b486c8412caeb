"""The one builder of loadext config documents for tests, benchmarks and the demo stack.

Every harness reads the same two signals, cpu and memory, from gauges it controls; only the
metric names, the timings and a few overrides differ.
"""

from __future__ import annotations

from typing import Any

import yaml


def loadext_config(
    prometheus_url: str,
    cpu_query: str,
    memory_query: str,
    *,
    refresh: str = "200ms",
    max_age: str = "30s",
    timeout: str = "500ms",
    **overrides: Any,
) -> dict[str, Any]:
    """cpu (threshold 0.8) and memory (0.9), weight 1 each, nodes named by the `node` label;
    `overrides` replace or add top-level keys (herdGuard=..., failurePolicy=...)."""
    config: dict[str, Any] = {
        "prometheus": {"url": prometheus_url, "timeout": timeout},
        "refreshInterval": refresh,
        "maxDataAge": max_age,
        "nodeIdentity": {"label": "node", "kind": "name"},
        "signals": [
            {"name": "cpu", "query": cpu_query, "threshold": 0.8, "weight": 1},
            {"name": "memory", "query": memory_query, "threshold": 0.9, "weight": 1},
        ],
    }
    config.update(overrides)
    return config


def as_yaml(config: dict[str, Any]) -> str:
    return yaml.safe_dump(config, sort_keys=False)
