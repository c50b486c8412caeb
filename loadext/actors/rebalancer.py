"""The rebalancer's loop: every `rebalance.cycle`, on the one replica that holds the Lease, move
pods off hot nodes (core/rebalance/ decides; this module reads the API and Prometheus and acts).

One cycle:
1. Off, standby (another replica holds the Lease) or paused (no fresh metrics: never act on
   stale data) ends it there; loadext's taints are kept in step either way while active
   (taints.py).
2. The cluster as the scheduler sees it (actors/placement.py: every Node, non-terminal Pod and
   Namespace) and the pods' measured usage (the herd guard's per-pod queries,
   `herdGuard.podUsage`, run now); read while a node is hot, a move is being followed, or a
   node carries the refused taint.
3. The stop rule (core/rebalance/followup.py): each earlier move's replacement, followed until
   it is placed on a node within the thresholds, or pauses its workload (Pending too long, or
   its node over a threshold), with an Event.
4. The plan (core/rebalance/: candidates, the fewest pods to move, a target the real scheduler
   would accept for each), then each move: in dry run counted and told, else evicted through
   the Eviction API, after checking the Lease is still held, with an Event on the pod and on
   the node; the pod's measured usage becomes its replacement's estimate (the herd guard).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from loadext.actors import evictions, placement
from loadext.actors.evictions import ApiUnavailable
from loadext.actors.lease import Lease
from loadext.actors.taints import NodeTaintKeeper
from loadext.config import Config
from loadext.core.herd.learned import PodKey
from loadext.core.rebalance.candidates import Holds, hot_node
from loadext.core.rebalance.followup import STOPPING, Followup, Move, Outcome, Pause
from loadext.core.rebalance.plan import Pacing, Step, plan
from loadext.core.rebalance.port import RebalanceState
from loadext.core.rebalance.streaks import SignalHeat
from loadext.core.rebalance.taints import wanted
from loadext.core.rebalance.targets import targets
from loadext.shared.wakeup import woken_within
from loadext.sources.kube import record_event
from loadext.sources.metrics import MetricsSource
from loadext.sources.pod_usage import read_pod_usage
from loadext.sources.query_error import QueryError
from loadext.telemetry.rebalance import RebalanceMetrics

log = logging.getLogger(__name__)

REASON = "LoadextRebalance"
PAUSED_REASON = "LoadextRebalancePaused"


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
        source: MetricsSource,  # for the pods' usage at the cycle
        api: Any,
        metrics: RebalanceMetrics,
        lease: Lease | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.state = state
        self.source = source
        self.api = api
        self.metrics = metrics
        self.lease = lease
        self.clock = clock
        self.pacing = Pacing()
        self.history: deque[Done] = deque(maxlen=50)
        self.replacements: deque[Outcome] = deque(maxlen=50)
        self.followup = Followup()
        self.taints = NodeTaintKeeper(api, metrics)
        self.status = "off"
        self._backoff: dict[str, float] = {}  # pod uid -> until when a PDB refusal is respected
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

    async def cycle(self, dry_run: bool = False) -> list[Done]:
        config = self.state.config
        policy = config.rebalance
        if not policy.enabled:
            await self.taints.sync({}, active=False)
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
        await self.taints.sync(wanted(hot, heat.refused, policy), active=True)
        now = self.clock()
        if not (hot or self.followup.following or self.taints.refusing):
            self._paused(now)
            self.taints.count_held_back(None)
            return []
        try:
            cluster, usage = await asyncio.to_thread(self._read, config, bool(hot))
        except (ApiUnavailable, QueryError) as exc:
            log.warning("rebalance cycle skipped: %s", exc)
            return []
        window = config.herd_guard.window
        await self._settle(cluster, heat.refused, window, now)
        self._backoff = {uid: until for uid, until in self._backoff.items() if until > now}  # gone pods too
        holds = Holds(set(self._backoff), self._paused(now))
        nodes = [
            hot_node(
                node, cluster.world.nodes.get(node), signals, heat.over.get(node, {}), heat.allocatable.get(node, {}),
                cluster.pods.get(node, ()), usage, policy, holds, now,
            )
            for node, signals in hot.items()
        ]  # fmt: skip
        steps = plan(nodes, policy, self.pacing, window, now, targets(cluster.world, self.state.passing_with))
        return await self._carry_out(steps, dry_run or policy.mode == "dryRun", window, cluster)

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
            "paused": {w: {"until": p.until, "why": p.why} for w, p in self.followup.paused(self.clock()).items()},
            "replacements": [_replacement(o) for o in reversed(self.replacements)],
            "daemonPodsHeldBack": self.taints.held,
        }

    # --- reading ------------------------------------------------------------------------------

    def _read(self, config: Config, moving: bool) -> tuple[placement.ClusterView, dict[str, dict[PodKey, float]]]:
        """Blocking (a worker thread; it reads no loadext state): the cluster and, when a node
        is hot (`moving`), the pods' usage; the taint keeper counts what its refused taint
        holds back on the way."""
        cluster = placement.read(self.api)
        self.taints.count_held_back(cluster)
        return cluster, read_pod_usage(self.source, config) if moving else {}

    # --- acting -------------------------------------------------------------------------------

    async def _settle(self, cluster: placement.ClusterView, refused: frozenset[str], window: float, now: float) -> None:
        """The stop rule's cycle: what came of earlier moves; an Event on the pod for each that
        pauses its workload."""
        policy = self.state.config.rebalance
        replicas = cluster.replicas(self.followup.workloads)
        for outcome in self.followup.observe(replicas, refused, now, policy.pending_for, window, policy.pause_for):
            self.metrics.replacements.labels(outcome.outcome).inc()
            self.replacements.append(outcome)
            move = outcome.move
            if outcome.outcome not in STOPPING:
                log.info("rebalance replacement %s: %s", outcome.outcome, outcome.detail)
                continue
            message = f"loadext: moves of {move.workload} paused for {policy.pause_for:.0f}s: {outcome.detail}"
            log.warning("rebalance replacement %s: %s", outcome.outcome, message)
            namespace, name = (outcome.replacement or move.pod).split("/", 1)
            uid = outcome.replacement_uid or move.uid
            await asyncio.to_thread(
                record_event, self.api, "Pod", name, namespace, PAUSED_REASON, message, "Warning", uid
            )

    async def _carry_out(
        self, steps: list[Step], dry_run: bool, window: float, cluster: placement.ClusterView
    ) -> list[Done]:
        existing = cluster.members({step.workload for step in steps if step.result == "planned"})
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
                done.append(await self._evict(step, now, window, existing.get(step.workload, frozenset())))
        for each in done:
            self.metrics.counted(each.result)
            self.history.append(each)
            if each.result in ("evicted", "dry_run", "pdb_blocked", "failed"):
                where = f" -> {each.target}" if each.target else f": {each.detail}" if each.detail else ""
                log.info("rebalance %s: %s on %s (%s)%s", each.result, each.pod, each.node, each.reason, where)
        return done

    async def _evict(self, step: Step, now: float, window: float, existing: frozenset[str]) -> Done:
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
        self.state.moved(step.workload, step.usage, now + window)
        self.followup.moved(Move(step.workload, step.pod, step.uid, step.node, step.target, now, existing))
        message = f"loadext: {step.reason}; moving it to a node with room"
        await asyncio.to_thread(record_event, self.api, "Pod", name, namespace, REASON, message, uid=step.uid)
        on_node = f"loadext: {step.reason}; evicted {step.pod} to make room"
        await asyncio.to_thread(record_event, self.api, "Node", step.node, "default", REASON, on_node)
        return Done(now, step.node, step.pod, step.reason, "evicted", step.target)

    def _paused(self, now: float) -> dict[str, Pause]:
        paused = self.followup.paused(now)
        self.metrics.paused_workloads.set(len(paused))
        return paused

    def _now(self, state: str) -> None:
        if state != self.status:
            log.info("rebalancer %s (was %s)", state, self.status)
            self.status = state
            self.metrics.now(state)
            if state != "active":
                self.metrics.hot_nodes.set(0)
            if state in ("off", "standby"):
                self.followup.forget()
                self._paused(self.clock())


def _streak(heat: SignalHeat) -> dict[str, Any]:
    return {
        "signal": heat.signal,
        "value": heat.value,
        "threshold": heat.threshold,
        "evictAt": heat.evict_at,
        "hot": heat.hot,
        "streak": heat.streak,
        "over": heat.over,
        "lingered": heat.lingered,
        "since": heat.since,
    }


def _replacement(outcome: Outcome) -> dict[str, Any]:
    move = outcome.move
    return {
        "time": move.at,
        "workload": move.workload,
        "evicted": move.pod,
        "target": move.target,
        "replacement": outcome.replacement,
        "node": outcome.node,
        "outcome": outcome.outcome,
        "detail": outcome.detail,
    }
