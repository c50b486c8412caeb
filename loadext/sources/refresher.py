"""The background loop that keeps the snapshot fresh: one query per signal per interval.

Queries run in worker threads (the client is blocking) and concurrently across signals, so a
slow signal delays neither the others nor, ever, a scheduling request. Each round ends in one
call, `Extender.publish_refresh`: the new snapshot and its decision table become visible
together.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from loadext.config import PrometheusConfig
from loadext.core.extender import Extender
from loadext.core.policy import DecisionTable
from loadext.core.snapshot import SignalValues, Snapshot, SnapshotCache
from loadext.core.usage import PodKey
from loadext.sources.prometheus import PrometheusSource, QueryError, QueryResult
from loadext.telemetry import Telemetry

log = logging.getLogger(__name__)


class Refresher:
    def __init__(self, extender: Extender, telemetry: Telemetry) -> None:
        self.extender = extender
        self.telemetry = telemetry
        self._source: PrometheusSource | None = None
        self._source_config: PrometheusConfig | None = None
        self._wake = asyncio.Event()
        self._pod_usage_problems: dict[str, str] = {}  # resource -> what is wrong ("" = fine)

    def _current_source(self) -> PrometheusSource:
        wanted = self.extender.config.prometheus
        if self._source is None or self._source_config != wanted:
            if self._source is not None:
                self._source.close()
            self._source, self._source_config = PrometheusSource(wanted), wanted
        return self._source

    def poke(self) -> None:
        """Refresh now instead of at the next tick (after a config change)."""
        self._wake.set()

    async def refresh_once(self) -> None:
        config = self.extender.config
        source = self._current_source()
        signals = asyncio.gather(*(self._query(source, s.name, config.query_for(s)) for s in config.signals))
        results, _ = await asyncio.gather(signals, self._refresh_pod_usage(source))
        stored = [
            SignalValues(signal.name, result.values, result.timestamp, result.means, result.stddevs)
            for signal, result in zip(config.signals, results, strict=True)
            if result is not None
        ]
        # Storing thousands of values and judging every node takes tens of milliseconds at 5000
        # nodes: do it in a worker thread, so the event loop keeps answering the scheduler.
        decide = self.extender.table_builder()
        snapshot, table = await asyncio.to_thread(_store_and_decide, self.extender.cache, stored, decide)
        mapping = self.extender.publish_refresh(snapshot, table)
        telemetry = self.telemetry
        for name, report in mapping.items():
            telemetry.unmapped_nodes.labels(name).set(len(report.unmapped_nodes))
            telemetry.unmatched_series.labels(name).set(len(report.unmatched_series))
        if snapshot.newest is not None:
            telemetry.snapshot_timestamp.set(snapshot.newest)
        for signal in config.signals:
            telemetry.series.labels(signal.name).set(snapshot.series_counts.get(signal.name, 0))

    async def _refresh_pod_usage(self, source: PrometheusSource) -> None:
        """With the herd guard on: each pod's own usage, for learned estimates (core/usage.py)."""
        guard = self.extender.config.herd_guard
        queries = guard.pod_usage_queries() if guard.enabled else {}
        if not queries:
            return
        found = await asyncio.gather(*(self._query_pods(source, r, q) for r, q in queries.items()))
        measured = {resource: pods for resource, pods in zip(queries, found, strict=True) if pods is not None}
        for error in self.extender.publish_pod_usage(measured):
            self.telemetry.estimate_error.labels(error.resource, error.source).observe(error.ratio)

    async def _query_pods(self, source: PrometheusSource, resource: str, promql: str) -> dict[PodKey, float] | None:
        try:
            pods, warnings = await asyncio.to_thread(source.query_pods, f"podUsage.{resource}", promql)
        except QueryError as exc:
            self.telemetry.pod_usage_errors.labels(resource, exc.kind).inc()
            self.telemetry.pod_usage_pods.labels(resource).set(0)
            self._pod_usage_state(resource, f"the query failed ({exc})")
            return None
        for warning in warnings:
            log.warning("prometheus warning for herdGuard.podUsage.%s: %s", resource, warning)
        self.telemetry.pod_usage_pods.labels(resource).set(len(pods))
        self._pod_usage_state(resource, "" if pods else "the query returned no pod with namespace and pod labels")
        return pods

    def _pod_usage_state(self, resource: str, problem: str) -> None:
        """One log line per change: a query that fails every round says so once, not every round."""
        if self._pod_usage_problems.get(resource, "") == problem:
            return
        self._pod_usage_problems[resource] = problem
        if problem:
            log.warning(
                "herdGuard.podUsage.%s: %s; %s estimates fall back to owner history and the factor rule "
                "(loadext_pod_usage_pods shows when pods are measured again)",
                resource,
                problem,
                resource,
            )
        else:
            log.info("herdGuard.podUsage.%s: pods are measured; their estimates learn from it", resource)

    async def _query(self, source: PrometheusSource, signal: str, promql: str) -> QueryResult | None:
        identity = self.extender.config.node_identity
        telemetry = self.telemetry
        health = self.extender.signal_health
        started = time.perf_counter()
        try:
            result = await asyncio.to_thread(source.query, signal, promql, identity.label, identity.kind)
        except QueryError as exc:
            telemetry.query_errors.labels(signal, exc.kind).inc()
            telemetry.last_query_error.labels(signal).set(self.extender.clock())
            health.failed(signal, exc.kind, exc.detail)
            return None
        finally:
            telemetry.query_duration.labels(signal).observe(time.perf_counter() - started)
        health.succeeded(signal)
        if result.invalid:
            telemetry.invalid_values.labels(signal).inc(result.invalid)
        for warning in result.warnings:
            log.warning("prometheus warning for signal %s: %s", signal, warning)
        if not result.timestamp:
            result.timestamp = self.extender.clock()
        return result

    async def run(self) -> None:
        """Refresh forever; a refresh that overruns the interval starts the next one at once."""
        while True:
            started = time.monotonic()
            try:
                await self.refresh_once()
            except Exception:  # never let one bad round stop the loop
                log.exception("refresh round failed")
            self._wake.clear()
            delay = self.extender.config.refresh_interval - (time.monotonic() - started)
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=delay)

    def close(self) -> None:
        if self._source is not None:
            self._source.close()


def _store_and_decide(
    cache: SnapshotCache, stored: list[SignalValues], decide: Callable[[Snapshot], DecisionTable]
) -> tuple[Snapshot, DecisionTable]:
    snapshot = cache.store_round(stored)
    return snapshot, decide(snapshot)
