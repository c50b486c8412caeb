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
    signal_settings: dict[str, dict[str, Any]] | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """cpu (threshold 0.8) and memory (0.9), weight 1 each, nodes named by the `node` label;
    `signal_settings` add to a signal's entry by name (cpu={"hard": True}); `overrides`
    replace or add top-level keys (herdGuard=..., failurePolicy=...)."""
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
    for signal in config["signals"]:
        signal.update((signal_settings or {}).get(signal["name"], {}))
    config.update(overrides)
    return config


def stored_config(**settings: Any) -> str:
    """The document of a loadext whose data a test stores itself (no Prometheus answers at its
    URL): the same two signals with every timing at loadext's own default; `settings` as for
    loadext_config."""
    return as_yaml(
        loadext_config(
            "http://127.0.0.1:1", "cpu_ratio", "memory_ratio", refresh="15s", max_age="60s", timeout="2s", **settings
        )
    )


def as_yaml(config: dict[str, Any]) -> str:
    return yaml.safe_dump(config, sort_keys=False)
