"""The config in force: its hash and thresholds, and how reloads went."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from loadext.config import Config


class ReloadMetrics:
    def __init__(self, r: CollectorRegistry) -> None:
        self.config_reloads = Counter("loadext_config_reloads", "Config loads by result.", ["result"], registry=r)
        self.config_info = Gauge("loadext_config_info", "The active config's hash (value 1).", ["hash"], registry=r)
        self.config_reload_ok = Gauge(
            "loadext_config_last_reload_successful",
            "1 if the newest config version loadext saw was valid, 0 if it was rejected.",
            registry=r,
        )
        self.config_last_reload = Gauge(
            "loadext_config_last_reload_success_timestamp_seconds", "When the active config was loaded.", registry=r
        )
        self.thresholds = Gauge(
            "loadext_signal_threshold_ratio", "The configured filter threshold per signal.", ["signal"], registry=r
        )
        for result in ("success", "failure"):
            self.config_reloads.labels(result)
        self.config_reload_ok.set(1)

    def accepted(self) -> None:
        self.config_reloads.labels("success").inc()
        self.config_reload_ok.set(1)

    def rejected(self) -> None:
        self.config_reloads.labels("failure").inc()
        self.config_reload_ok.set(0)

    def in_force(self, config: Config, now: float) -> None:
        self.config_info.clear()
        self.config_info.labels(config.hash).set(1)
        self.config_last_reload.set(now)
        self.thresholds.clear()
        for signal in config.signals:
            if signal.threshold is not None:
                self.thresholds.labels(signal.name).set(signal.threshold)
