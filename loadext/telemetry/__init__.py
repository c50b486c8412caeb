"""loadext's own metrics, grouped by the part that records them: what the verbs decided
(verbs.py), the refresh loop (refresh.py), the herd guard (herd.py), the Kubernetes watches
(watches.py), the config in force (reload.py), the per-node gauges (nodes.py) and the
rebalancer (rebalance.py). Each part is
handed its recorder; `Telemetry` holds one process's registry and recorders (tests make their
own). docs/metrics.md lists every metric, and tests/unit/test_metrics_doc.py keeps it true.
"""

from __future__ import annotations

import platform
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Info
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics import MetricWrapperBase

from loadext import __version__
from loadext.config import Config
from loadext.telemetry.herd import HerdMetrics
from loadext.telemetry.nodes import NodeMetrics
from loadext.telemetry.rebalance import RebalanceMetrics
from loadext.telemetry.refresh import RefreshMetrics
from loadext.telemetry.reload import ReloadMetrics
from loadext.telemetry.verbs import VerbMetrics
from loadext.telemetry.watches import WatchMetrics

EOF = b"# EOF\n"  # OpenMetrics' last line


class Telemetry:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.verbs = VerbMetrics(r)
        self.refresh = RefreshMetrics(r)
        self.herd = HerdMetrics(r)
        self.watches = WatchMetrics(r)
        self.reload = ReloadMetrics(r)
        self.nodes = NodeMetrics()
        self.rebalance = RebalanceMetrics(r)
        self.build = Info("loadext_build", "loadext version.", registry=r)
        self.build.info({"version": __version__, "python_version": platform.python_version()})

    def config_applied(self, config: Config, now: float, error_kinds: Iterable[str]) -> None:
        """A config came into force: its signals' series (with one error series per kind the
        metrics source reports), hash and thresholds, and the per-node family on or off."""
        signals = [s.name for s in config.signals]
        self.refresh.prepare_signals(signals, error_kinds)
        self.verbs.prepare_signals(signals)
        self.reload.in_force(config, now)
        self.nodes.export(config.per_node_metrics)

    def exposition(self, accept: str = "") -> tuple[bytes, str]:
        """One scrape's body and content type, in the format the scraper asks for (Prometheus
        asks for OpenMetrics): the registry's families, then the per-node ones as last rendered
        (before OpenMetrics' closing `# EOF`). The verbs' pending counts go into their
        Counters first."""
        self.verbs.flush()
        encode, content_type = choose_encoder(accept)
        text = encode(self.registry)
        if text.endswith(EOF):
            return text[: -len(EOF)] + self.nodes.exposition() + EOF, content_type
        return text + self.nodes.exposition(), content_type

    def metrics(self) -> Iterator[MetricWrapperBase]:
        """Every metric of the recorders (the per-node families are text of their own: nodes.py)."""
        yield self.build
        for recorder in (self.verbs, self.refresh, self.herd, self.watches, self.reload, self.rebalance):
            yield from (m for m in vars(recorder).values() if isinstance(m, MetricWrapperBase))
