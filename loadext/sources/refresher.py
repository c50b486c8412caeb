"""The background loop that keeps the snapshot fresh: one query per signal per interval.

Queries run in worker threads (the client is blocking) and concurrently across signals, so a
slow signal delays neither the others nor, ever, a scheduling request. Everything it learns
goes through the Ingest port (core/ingest.py); each round ends in one `publish_round`: the
new snapshot and its decision table become visible together.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from loadext.core.herd.learned import PodKey
from loadext.core.ingest import Ingest
from loadext.core.snapshot import SignalValues
from loadext.shared.wakeup import woken_within
from loadext.sources.metrics import MetricsSource
from loadext.sources.prometheus import QueryResult
from loadext.sources.query_error import QueryError
from loadext.telemetry.herd import HerdMetrics
from loadext.telemetry.refresh import RefreshMetrics

log = logging.getLogger(__name__)


class Refresher:
    def __init__(
        self,
        ingest: Ingest,
        source: MetricsSource,
        metrics: RefreshMetrics,
        herd_metrics: HerdMetrics,
        after_round: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.ingest = ingest
        self.source = source
        self.after_round = after_round  # what else follows each published round (the per-node metrics)
        self.metrics = metrics
        self.herd_metrics = herd_metrics
        self._wake = asyncio.Event()
        self._pod_usage_problems: dict[str, str] = {}  # resource -> what is wrong ("" = fine)

    def poke(self) -> None:
        """Refresh now instead of at the next tick (after a config change)."""
        self._wake.set()

    async def refresh_once(self) -> None:
        started = time.perf_counter()
        try:
            await self._refresh()
        finally:
            self.metrics.round_took(time.perf_counter() - started)
        if self.after_round is not None:
            await self.after_round()

    async def _refresh(self) -> None:
        config = self.ingest.config
        signals = asyncio.gather(*(self._query(s.name, config.query_for(s)) for s in config.signals))
        results, _ = await asyncio.gather(signals, self._refresh_pod_usage())
        stored = [
            SignalValues(signal.name, result.values, result.timestamp, result.means, result.stddevs)
            for signal, result in zip(config.signals, results, strict=True)
            if result is not None
        ]
        # Storing thousands of values and judging every node takes tens of milliseconds at 5000
        # nodes: do it in a worker thread, so the event loop keeps answering the scheduler.
        built = await asyncio.to_thread(self.ingest.round_builder(), stored)
        self.ingest.publish_round(built)
        mapping = await asyncio.to_thread(self.ingest.mapping_counter())
        self.metrics.request_nodes_forgotten(self.ingest.request_nodes_forgotten())
        self.metrics.round_published(built.snapshot, mapping, (s.name for s in config.signals))
        endpoints = self.source.status()
        self.ingest.endpoints_reported(endpoints)
        self.metrics.endpoints_reported(endpoints)

    async def _refresh_pod_usage(self) -> None:
        """With the herd guard on: each pod's own usage, for learned estimates (core/herd/learned.py)."""
        guard = self.ingest.config.herd_guard
        queries = guard.pod_usage_queries() if guard.enabled else {}
        if not queries:
            return
        found = await asyncio.gather(*(self._query_pods(r, q) for r, q in queries.items()))
        measured = {resource: pods for resource, pods in zip(queries, found, strict=True) if pods is not None}
        self.herd_metrics.estimates_were_off(self.ingest.pod_usage_measured(measured))

    async def _query_pods(self, resource: str, promql: str) -> dict[PodKey, float] | None:
        try:
            pods, warnings = await asyncio.to_thread(self.source.query_pods, f"podUsage.{resource}", promql)
        except QueryError as exc:
            self.herd_metrics.pod_usage_failed(resource, exc.kind)
            self._pod_usage_state(resource, f"the query failed ({exc})")
            return None
        self.herd_metrics.pods_measured(resource, len(pods))
        if not pods:
            self._pod_usage_state(resource, "the query returned no pod with namespace and pod labels")
        elif warnings:
            self._pod_usage_state(resource, f"the reply is partial ({'; '.join(warnings)}), pods may be missing")
        else:
            self._pod_usage_state(resource, "")
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

    async def _query(self, signal: str, promql: str) -> QueryResult | None:
        identity = self.ingest.config.node_identity
        metrics = self.metrics
        started = time.perf_counter()
        try:
            result = await asyncio.to_thread(self.source.query, signal, promql, identity)
        except QueryError as exc:
            metrics.query_failed(signal, exc.kind, self.ingest.clock())
            self.ingest.signal_failed(signal, exc.kind, exc.detail)
            return None
        finally:
            metrics.query_took(signal, time.perf_counter() - started)
        partial = ("; ".join(result.warnings) or "the reply says isPartial") if result.partial else ""
        self.ingest.signal_succeeded(signal, partial)  # logged once per change, not per round
        metrics.answered(signal, partial=bool(partial))
        if result.invalid:
            metrics.values_dropped(signal, result.invalid)
        if not result.timestamp:
            result.timestamp = self.ingest.clock()
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
            delay = self.ingest.config.refresh_interval - (time.monotonic() - started)
            if delay > 0:
                await woken_within(self._wake, delay)
