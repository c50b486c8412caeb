"""The "why" views: everything behind the current decisions (explain), and the last decisions
made for one pod (explain --pod). Both are plain dicts, served as JSON by http/server.py and
printed as tables by the CLI."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loadext.core.cluster import Cluster
from loadext.core.decisions import DecisionLog
from loadext.core.herd.usage import Usage
from loadext.core.policy import NodeState, fullness


def node_states(cluster: Cluster) -> list[NodeState]:
    """Every node loadext knows (and, with name identities, every node a series names), as
    explain and the per-node metrics show it."""
    return node_states_builder(cluster)()


def node_states_builder(cluster: Cluster) -> Callable[[], list[NodeState]]:
    """node_states in two steps: which nodes and identities, read now from the Cluster's
    mutable parts (cheap), then the states, from the round's immutable table and snapshot and
    safe to build in a worker thread while the loop goes on (the per-node metrics at 15 000
    nodes)."""
    table, snapshot = cluster.table(), cluster.cache.snapshot
    rows = cluster.reported_nodes()
    labelled, config = cluster.directory.labelled(), cluster.config

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


def explain(cluster: Cluster) -> dict[str, Any]:
    """Node by node, the values, their age, how full against its thresholds, the pods in
    flight and the verdict: the "why not this node" view; and per signal, its health and how
    its series map to nodes."""
    table, config = cluster.table(), cluster.config
    now = cluster.clock()
    snapshot = cluster.cache.snapshot
    ledger = cluster.ledger
    in_flight = ledger.inflight.per_node(now)
    pools = {pool.name: pool for pool in config.pools}
    rows = [
        {
            "node": state.node,
            "identity": state.identity,
            "signals": {
                s: {"value": round(v.value, 4), "age": round(now - v.timestamp, 1)} for s, v in state.samples.items()
            },
            "pool": state.pool,
            "fullness": _rounded(fullness(state.samples, (pools[state.pool] if state.pool else config).signals)),
            "inFlight": _in_flight_row(in_flight.get(state.node)),
            "verdict": "pass" if state.verdict.passed else "reject",
            "score": state.verdict.score,
            "reason": state.verdict.reason,
        }
        for state in node_states(cluster)
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
                for e in cluster.endpoints
            ]
        },
        "herdGuard": {
            "enabled": config.herd_guard.enabled,
            "window": config.herd_guard.window,
            "podsInFlight": len(ledger.inflight),
            "soft": config.herd_guard.soft,
            "ownersLearned": len(ledger.learned),  # owners with measured pods, for learned estimates
            "podsMeasured": ledger.learned.measured_counts(),
        },
        "signals": [
            {
                "name": s.name,
                "threshold": s.threshold,
                "weight": s.weight,
                "lastSuccessAge": _age(now, snapshot.last_success.get(s.name)),
                **cluster.signal_health.report(s.name, now),
                "series": snapshot.series_counts.get(s.name, 0),
                "unmappedNodes": list(cluster.mapping.get(s.name).unmapped_nodes),
                "unmatchedSeries": list(cluster.mapping.get(s.name).unmatched_series),
            }
            for s in config.signals
        ],
        "nodes": rows,
    }


def explain_pod(decisions: DecisionLog, cluster: Cluster, pod: str) -> dict[str, Any] | None:
    """The last filter and prioritize decisions for NAMESPACE/NAME, node by node: the values
    and their age at decision time, the thresholds that applied (and the pool they came
    from), the verdict, the score and the reason; with the herd guard on, also the pod's own
    estimate and what was in flight on each node. None if loadext has none for the pod."""
    made = decisions.get(pod)
    if made is None:
        return None
    labelled = cluster.directory.labelled()
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
