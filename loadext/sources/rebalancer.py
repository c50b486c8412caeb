"""The rebalancer's loop: every `rebalance.cycle`, on the one replica that holds the Lease, move
pods off hot nodes (core/rebalance/ decides; this module reads the API and Prometheus and acts).

One cycle:
1. Off, standby (another replica holds the Lease) or paused (no fresh metrics: never act on
   stale data) ends it there; the taints of a node are kept in step either way while active.
2. The cluster as the scheduler sees it (sources/placement.py: every Node, bound Pod and
   Namespace) and the pods' measured usage (the herd guard's per-pod queries,
   `herdGuard.podUsage`, run now).
3. The plan (core/rebalance/: candidates, the fewest pods to move, a target the real scheduler
   would accept for each), then each move: in dry run counted and told, else evicted through
   the Eviction API, after checking the Lease is still held, with an Event on the pod and on
   the node.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from loadext.config import Config, PrometheusConfig
from loadext.config.schema import Rebalance
from loadext.core.herd.learned import PodKey
from loadext.core.rebalance.candidates import hot_node
from loadext.core.rebalance.plan import Pacing, Step, plan
from loadext.core.rebalance.port import RebalanceState
from loadext.core.rebalance.streaks import SignalHeat
from loadext.core.rebalance.targets import targets
from loadext.sources import evictions, placement
from loadext.sources.evictions import HOT_TAINT, REFUSED_TAINT, TAINT_KEYS, ApiUnavailable
from loadext.sources.kube import API_TIMEOUT, record_event
from loadext.sources.lease import Lease
from loadext.sources.prometheus import PrometheusSource
from loadext.sources.query_error import QueryError
from loadext.sources.wakeup import woken_within
from loadext.telemetry.rebalance import RebalanceMetrics

log = logging.getLogger(__name__)

REASON = "LoadextRebalance"


@dataclass(frozen=True)
class Done:
    """A step as it ended, for /explain and `loadext rebalance --output json`."""

    time: float
    node: str
    pod: str
    reason: str
    result: str
    target: str = ""
    skipped: str = ""
    detail: str = ""

    def as_json(self) -> dict[str, Any]:
        """Every field, but target, skipped and detail only when they say something ("pod" is
        "" for a step about a whole node)."""
        optional = ("target", "skipped", "detail")
        return {k: v for k, v in asdict(self).items() if k not in optional or v != ""}


class Rebalancer:
    def __init__(
        self,
        state: RebalanceState,
        api: Any,
        metrics: RebalanceMetrics,
        lease: Lease | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.state = state
        self.api = api
        self.metrics = metrics
        self.lease = lease
        self.clock = clock
        self.pacing = Pacing()
        self.history: deque[Done] = deque(maxlen=50)
        self.status = "off"
        self._backoff: dict[str, float] = {}  # pod uid -> until when a PDB refusal is respected
        self._tainted: dict[str, frozenset[tuple[str, str]]] | None = None  # node -> loadext's taints; None: unread
        self._source: tuple[PrometheusConfig, PrometheusSource] | None = None
        self._wake = asyncio.Event()

    def poke(self) -> None:
        """A new config: a cycle now, not when the old config's cycle would have ended (a
        replica turned on, off, or to evict, says so at once)."""
        self._wake.set()

    async def run(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self.cycle()
            except Exception:  # one bad cycle must not end the rebalancer
                log.exception("rebalance cycle failed")
            await woken_within(self._wake, self.state.config.rebalance.cycle)

    def close(self) -> None:
        if self._source is not None:
            self._source[1].close()

    async def cycle(self, dry_run: bool = False) -> list[Done]:
        config = self.state.config
        policy = config.rebalance
        if not policy.enabled:
            await self._sync_taints(frozenset(), frozenset(), policy)
            self._now("off")
            return []
        if self.lease is not None:
            self.lease.duration = 2 * policy.cycle + 15
            if not await asyncio.to_thread(self.lease.hold):
                self._now("standby")
                return []
        heat = self.state.heat()
        if heat.degraded:
            self._now("paused")
            return []
        self._now("active")
        hot = heat.hot()
        self.metrics.hot_nodes.set(len(hot))
        await self._sync_taints(frozenset(hot), heat.refused, policy)
        if not hot:
            return []
        now = self.clock()
        try:
            cluster, usage = await asyncio.to_thread(self._read, config)
        except (ApiUnavailable, QueryError) as exc:
            log.warning("rebalance cycle skipped: %s", exc)
            return []
        backing_off = {uid for uid, until in self._backoff.items() if until > now}
        nodes = [
            hot_node(
                node, signals, heat.over.get(node, {}), heat.allocatable.get(node, {}),
                cluster.pods.get(node, ()), usage, policy, backing_off, now,
            )
            for node, signals in hot.items()
        ]  # fmt: skip
        window = config.herd_guard.window
        steps = plan(nodes, policy, self.pacing, window, now, targets(cluster.world, self.state.passing_with))
        return await self._carry_out(steps, dry_run or policy.mode == "dryRun", window)

    def report(self) -> dict[str, Any]:
        """For /explain: the state, each node's streaks, the last moves."""
        policy = self.state.config.rebalance
        heat = self.state.heat() if policy.enabled else None
        return {
            "enabled": policy.enabled,
            "mode": policy.mode,
            "state": self.status,
            "nodes": {node: [_streak(s) for s in signals] for node, signals in (heat.streaks if heat else {}).items()},
            "last": [done.as_json() for done in reversed(self.history)],
        }

    # --- reading ------------------------------------------------------------------------------

    def _read(self, config: Config) -> tuple[placement.Cluster, dict[str, dict[PodKey, float]]]:
        """Blocking (a worker thread; it reads no loadext state): the cluster and the pods' usage."""
        cluster = placement.read(self.api)
        if self._source is None or self._source[0] != config.prometheus:
            self.close()
            self._source = (config.prometheus, PrometheusSource(config.prometheus))
        source = self._source[1]
        queries = {"cpu": config.herd_guard.pod_usage_cpu, "memory": config.herd_guard.pod_usage_memory}
        return cluster, {r: source.query_pods(f"podUsage.{r}", q)[0] for r, q in queries.items() if q}

    # --- acting -------------------------------------------------------------------------------

    async def _carry_out(self, steps: list[Step], dry_run: bool, window: float) -> list[Done]:
        done: list[Done] = []
        lost = False
        for step in steps:
            now = self.clock()
            if step.result != "planned":
                done.append(Done(now, step.node, step.pod, step.reason, step.result, skipped=step.skipped))
            elif dry_run:
                done.append(Done(now, step.node, step.pod, step.reason, "dry_run", step.target))
            elif lost or (self.lease is not None and not await asyncio.to_thread(self.lease.still_held)):
                lost = True
                done.append(Done(now, step.node, step.pod, step.reason, "rate_limited", skipped="the Lease was lost"))
            else:
                done.append(await self._evict(step, now, window))
        for each in done:
            self.metrics.counted(each.result)
            self.history.append(each)
            if each.result in ("evicted", "dry_run", "pdb_blocked", "failed"):
                log.info(
                    "rebalance %s: %s on %s (%s)%s",
                    each.result,
                    each.pod,
                    each.node,
                    each.reason,
                    f" -> {each.target}" if each.target else f": {each.detail}" if each.detail else "",
                )
        return done

    async def _evict(self, step: Step, now: float, window: float) -> Done:
        namespace, name = step.pod.split("/", 1)
        try:
            evicted = await asyncio.to_thread(evictions.evict, self.api, namespace, name, step.uid)
        except ApiUnavailable as exc:
            return Done(now, step.node, step.pod, step.reason, "failed", step.target, detail=str(exc))
        if evicted.result == "pdb_blocked":
            self._backoff[step.uid] = now + window
        if evicted.result != "evicted":
            return Done(now, step.node, step.pod, step.reason, evicted.result, step.target, detail=evicted.detail)
        self.pacing.evicted(step.node, step.workload, now, window)
        message = f"loadext: {step.reason}; moving it to a node with room"
        await asyncio.to_thread(record_event, self.api, "Pod", name, namespace, REASON, message, uid=step.uid)
        on_node = f"loadext: {step.reason}; evicted {step.pod} to make room"
        await asyncio.to_thread(record_event, self.api, "Node", step.node, "default", REASON, on_node)
        return Done(now, step.node, step.pod, step.reason, "evicted", step.target)

    async def _sync_taints(self, hot: frozenset[str], refused: frozenset[str], policy: Rebalance) -> None:
        """loadext's taints exactly on the nodes that should carry them now (none when off)."""
        wanted: dict[str, frozenset[tuple[str, str]]] = {}
        for node in hot if policy.enabled and policy.taint_hot else ():
            wanted[node] = wanted.get(node, frozenset()) | {HOT_TAINT}
        for node in refused if policy.enabled and policy.taint_refused else ():
            wanted[node] = wanted.get(node, frozenset()) | {REFUSED_TAINT}
        if self._tainted is None:
            if not policy.enabled:
                return  # never active in this process: nothing of ours to clear
            self._tainted = await asyncio.to_thread(_read_taints, self.api)  # a restart finds its own
        current = self._tainted
        for node in sorted(set(current) | set(wanted)):
            target = wanted.get(node, frozenset())
            if current.get(node, frozenset()) == target:
                continue
            error = await asyncio.to_thread(evictions.set_taints, self.api, node, target)
            if error:
                log.warning("%s", error)
                self.metrics.taint_errors.inc()
                continue
            if target:
                current[node] = target
            else:
                current.pop(node, None)

    def _now(self, state: str) -> None:
        if state != self.status:
            log.info("rebalancer %s (was %s)", state, self.status)
            self.status = state
            self.metrics.now(state)
            if state != "active":
                self.metrics.hot_nodes.set(0)


def _read_taints(api: Any) -> dict[str, frozenset[tuple[str, str]]]:
    """Which nodes carry loadext's taints already (a restart, or another replica's earlier term)."""
    found: dict[str, frozenset[tuple[str, str]]] = {}
    for node in api.list_node(_request_timeout=API_TIMEOUT).items:
        ours = frozenset((t.key, t.effect) for t in node.spec.taints or () if t.key in TAINT_KEYS)
        if ours:
            found[node.metadata.name] = ours
    return found


def _streak(heat: SignalHeat) -> dict[str, Any]:
    return {
        "signal": heat.signal,
        "value": heat.value,
        "threshold": heat.threshold,
        "evictAt": heat.evict_at,
        "hot": heat.hot,
        "streak": heat.streak,
        "since": heat.since,
    }
