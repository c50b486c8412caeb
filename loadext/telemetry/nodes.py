"""Per-node gauges, read from the current decision state at scrape time: a deleted node simply
stops appearing, and the family can be switched off (telemetry.perNodeMetrics) for huge clusters."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from loadext.core.policy import NodeState

NodeStates = Callable[[], Iterable[NodeState]]


class _NodeCollector(Collector):
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


class NodeMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry
        self._collector: _NodeCollector | None = None

    def export(self, source: NodeStates | None) -> None:
        """Register (or with None, unregister) the per-node gauge family."""
        if self._collector is not None:
            self._registry.unregister(self._collector)
            self._collector = None
        if source is not None:
            self._collector = _NodeCollector(source)
            self._registry.register(self._collector)
