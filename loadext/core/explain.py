"""The "why" views: everything behind the current decisions (explain), and the last decisions
made for one pod (explain --pod). Both are plain dicts, served as JSON by http/server.py and
printed as tables by the CLI."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from loadext.config import Config
from loadext.core.decisions import DecisionLog
from loadext.core.herd.ledger import HerdReport
from loadext.core.herd.usage import Usage
from loadext.core.ingest import EndpointState
from loadext.core.policy import DecisionTable, NodeState, fullness
from loadext.core.roster import Rows
from loadext.core.snapshot import Snapshot


class ExplainState(Protocol):
    """What explain and the per-node metrics read of loadext's state, and nothing more. The
    Cluster's `explained` reader implements it (cluster.py)."""

    @property
    def config(self) -> Config: ...

    def clock(self) -> float: ...

    def table(self) -> DecisionTable: ...

    def snapshot(self) -> Snapshot: ...

    def reported_nodes(self) -> Callable[[], Rows]:
        """(node, identity) of every node reported on: read now, built by the returned function."""

    def node_labels(self) -> Mapping[str, Mapping[str, str]]: ...

    def herd_report(self) -> HerdReport: ...

    def endpoints(self) -> list[EndpointState]: ...

    def signal_report(self, signal: str) -> dict[str, object]:
        """The signal's health and how its series map to nodes, as explain's fields."""


def node_states(state: ExplainState) -> list[NodeState]:
    """Every node loadext knows (and, with name identities, every node a series names), as
    explain and the per-node metrics show it."""
    return node_states_builder(state)()


def node_states_builder(state: ExplainState) -> Callable[[], list[NodeState]]:
    """node_states in two steps: which nodes and identities, read now from the Cluster's
    mutable parts (cheap), then the states, from the round's immutable table and snapshot and
    safe to build in a worker thread while the loop goes on (the per-node metrics at 15 000
    nodes)."""
    table, snapshot = state.table(), state.snapshot()
    rows = state.reported_nodes()
    labelled, config = state.node_labels(), state.config

    def build() -> list[NodeState]:
        states = []
        for name, identity in rows():
            samples = snapshot.by_identity.get(identity, {})
            pool = config.pool_for(labelled.get(name))
            states.append(
                NodeState(name, identity or None, samples, table.by_identity[identity], pool.name if pool else None)
            )
        return states

    return build


def explain(state: ExplainState) -> dict[str, Any]:
    """Node by node, the values, their age, how full against its thresholds, the pods in
    flight and the verdict: the "why not this node" view; and per signal, its health and how
    its series map to nodes."""
    table, config = state.table(), state.config
    now = state.clock()
    snapshot = state.snapshot()
    herd = state.herd_report()
    pools = {pool.name: pool for pool in config.pools}
    rows = [
        {
            "node": node.node,
            "identity": node.identity,
            "signals": {
                s: {"value": round(v.value, 4), "age": round(now - v.timestamp, 1)} for s, v in node.samples.items()
            },
            "pool": node.pool,
            "fullness": _rounded(fullness(node.samples, config.signals_for(pools[node.pool] if node.pool else None))),
            "inFlight": _in_flight_row(herd.in_flight.get(node.node)),
            "verdict": "pass" if node.verdict.passed else "reject",
            "score": node.verdict.score,
            "reason": node.verdict.reason,
        }
        for node in node_states(state)
    ]
    return {
        "time": now,
        "configHash": config.hash,
        "degraded": table.degraded,
        "failurePolicy": config.failure_policy,
        "filterMode": config.filter_mode,
        "missingData": config.missing_data,
        "strategy": config.scoring.strategy,
        "prometheus": {
            "endpoints": [
                {"url": e.url, "up": e.up, "lastError": e.error or None, "age": round(now - e.time, 1)}
                for e in state.endpoints()
            ]
        },
        "herdGuard": {
            "enabled": config.herd_guard.enabled,
            "window": config.herd_guard.window,
            "podsInFlight": herd.pods_in_flight,
            "soft": config.herd_guard.soft,
            "ownersLearned": herd.owners_learned,  # owners with measured pods, for learned estimates
            "podsMeasured": herd.pods_measured,
        },
        "signals": [
            {
                "name": s.name,
                "threshold": s.threshold,
                "weight": s.weight,
                "lastSuccessAge": _age(now, snapshot.last_success.get(s.name)),
                **state.signal_report(s.name),
                "series": snapshot.series_counts.get(s.name, 0),
            }
            for s in config.signals
        ],
        "nodes": rows,
    }


def explain_pod(decisions: DecisionLog, state: ExplainState, pod: str) -> dict[str, Any] | None:
    """The last filter and prioritize decisions for NAMESPACE/NAME, node by node: the values
    and their age at decision time, the thresholds that applied (and the pool they came
    from), the verdict, the score and the reason; with the herd guard on, also the pod's own
    estimate and what was in flight on each node. None if loadext has none for the pod."""
    made = decisions.get(pod)
    if made is None:
        return None
    labelled = state.node_labels()
    out: dict[str, Any] = {"pod": pod}
    for verb, decision in made.items():
        rows: list[dict[str, Any]] = []
        rows_of = zip(decision.names, decision.node_verdicts(), decision.node_samples(), strict=True)
        for name, verdict, samples in rows_of:
            pool = decision.config.pool_for(labelled.get(name))
            thresholds = {s.name: s.threshold for s in decision.config.signals_for(pool)}
            rows.append(
                {
                    "node": name,
                    "pool": pool.name if pool else None,
                    "signals": {
                        s: {
                            "value": round(v.value, 4),
                            "age": round(decision.time - v.timestamp, 1),
                            "threshold": thresholds.get(s),
                        }
                        for s, v in (samples or {}).items()
                    },
                    "verdict": "pass" if verdict.passed else "reject",
                    "score": verdict.score,
                    "reason": verdict.reason,
                }
            )
            if decision.in_flight is not None:
                rows[-1]["inFlight"] = _in_flight_row(decision.in_flight.get(name))
        out[verb] = {"time": decision.time, "configHash": decision.config.hash, "nodes": rows}
        if decision.estimate is not None:
            usage, (cpu_source, memory_source) = decision.estimate.usage, decision.estimate.sources
            out[verb]["estimate"] = {
                "cpuCores": round(usage.cpu, 3),
                "memoryBytes": round(usage.memory),
                # per resource: measured, owner (its recent pods' median) or factor (core/herd/learned.py)
                "source": {"cpu": cpu_source, "memory": memory_source},
            }
    return out


def _in_flight_row(entry: tuple[Usage, int] | None) -> dict[str, float] | None:
    """Pods placed on the node within the herd guard's window, and their estimated usage."""
    if entry is None:
        return None
    usage, pods = entry
    return {"pods": pods, "cpuCores": round(usage.cpu, 3), "memoryBytes": round(usage.memory)}


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _age(now: float, then: float | None) -> float | None:
    return None if then is None else round(now - then, 1)
