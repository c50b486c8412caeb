"""The metrics source every reader of metrics receives: the refresher (each signal, each pod's
usage), the rebalancer (the pods' usage at its cycle), replay (history) and check-config.

app.py builds one (`metrics_source`, the one line that names the backend) and hands it to them;
another backend (a remote-read or an OTLP source) is a module implementing `MetricsSource`
and that line. `LiveSource` keeps the serving process on the backend its config in force
names: a reload that changes `prometheus:` replaces it for every reader at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from loadext.config import NodeIdentity, PrometheusConfig
from loadext.core.herd.learned import PodKey
from loadext.core.ingest import EndpointState
from loadext.sources.prometheus import QueryResult


class MetricsSource(Protocol):
    """Blocking calls: run them in worker threads, never on the event loop. Each raises
    QueryError (query_error.py) with the kind of failure."""

    def query(self, signal: str, promql: str, identity: NodeIdentity) -> QueryResult:
        """An instant query's per-node ratios, by identity."""

    def query_pods(self, name: str, promql: str) -> tuple[dict[PodKey, float], list[str]]:
        """An instant per-pod query's (namespace, pod) -> value, and the reply's warnings."""

    def query_range(
        self, promql: str, start: float, end: float, step: float, identity: NodeIdentity
    ) -> dict[float, QueryResult]:
        """A range query as one result per step, by the instant query's rules."""

    def status(self) -> list[EndpointState]:
        """Each endpoint's last outcome."""

    def close(self) -> None: ...


SourceFactory = Callable[[PrometheusConfig], MetricsSource]


class LiveSource:
    """The source for the `prometheus:` settings in force, built once and shared: rebuilt (and
    the old one closed) only when a reload changes those settings."""

    def __init__(self, build: SourceFactory, settings: Callable[[], PrometheusConfig]) -> None:
        self._build, self._settings = build, settings
        self._lock = threading.Lock()  # the refresher and the rebalancer call from worker threads
        self._current: tuple[PrometheusConfig, MetricsSource] | None = None

    def _source(self) -> MetricsSource:
        wanted = self._settings()
        with self._lock:
            current = self._current
            if current is not None and current[0] == wanted:
                return current[1]
            built = self._build(wanted)
            self._current = (wanted, built)
        if current is not None:
            current[1].close()  # a query in flight on it still ends: its connection is not pooled now
        return built  # not self._current: a close() from another thread may have cleared it since

    def query(self, signal: str, promql: str, identity: NodeIdentity) -> QueryResult:
        return self._source().query(signal, promql, identity)

    def query_pods(self, name: str, promql: str) -> tuple[dict[PodKey, float], list[str]]:
        return self._source().query_pods(name, promql)

    def query_range(
        self, promql: str, start: float, end: float, step: float, identity: NodeIdentity
    ) -> dict[float, QueryResult]:
        return self._source().query_range(promql, start, end, step, identity)

    def status(self) -> list[EndpointState]:
        return self._source().status()

    def close(self) -> None:
        with self._lock:
            current, self._current = self._current, None
        if current is not None:
            current[1].close()
