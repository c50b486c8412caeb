"""The "why" views: everything behind the current decisions (explain), and the last decisions
made for one pod (explain --pod). Both are plain dicts, served as JSON by http/server.py and
printed as tables by the CLI."""

from __future__ import annotations

from typing import Any

from loadext.core.extender import Extender, MappingReport
from loadext.core.herd import Usage


def explain(extender: Extender) -> dict[str, Any]:
    """Node by node, the values, their age, the pods in flight and the verdict: the "why not
    this node" view; and per signal, its health and how its series map to nodes."""
    table, config = extender.table(), extender.config
    now = extender.clock()
    snapshot = extender.cache.snapshot
    in_flight = extender.inflight.per_node(now)
    rows = [
        {
            "node": state.node,
            "identity": state.identity,
            "signals": {
                s: {"value": round(v.value, 4), "age": round(now - v.timestamp, 1)} for s, v in state.samples.items()
            },
            "pool": state.pool,
            "inFlight": _in_flight_row(in_flight.get(state.node)),
            "verdict": "pass" if state.verdict.passed else "reject",
            "score": state.verdict.score,
            "reason": state.verdict.reason,
        }
        for state in extender.node_states()
    ]
    return {
        "time": now,
        "configHash": config.hash,
        "degraded": table.degraded,
        "failurePolicy": config.failure_policy,
        "filterMode": config.filter_mode,
        "missingData": config.missing_data,
        "strategy": config.scoring.strategy,
        "herdGuard": {
            "enabled": config.herd_guard.enabled,
            "window": config.herd_guard.window,
            "podsInFlight": len(extender.inflight),
            "soft": config.herd_guard.soft,
            "ownersLearned": len(extender.usage),  # owners with measured pods, for learned estimates
            "podsMeasured": extender.usage.measured_counts(),
        },
        "signals": [
            {
                "name": s.name,
                "threshold": s.threshold,
                "weight": s.weight,
                "lastSuccessAge": _age(now, snapshot.last_success.get(s.name)),
                **extender.signal_health.report(s.name, now),
                "series": snapshot.series_counts.get(s.name, 0),
                "unmappedNodes": list(extender.mapping.get(s.name, MappingReport()).unmapped_nodes),
                "unmatchedSeries": list(extender.mapping.get(s.name, MappingReport()).unmatched_series),
            }
            for s in config.signals
        ],
        "nodes": rows,
    }


def explain_pod(extender: Extender, pod: str) -> dict[str, Any] | None:
    """The last filter and prioritize decisions for NAMESPACE/NAME, node by node: the values
    and their age at decision time, the thresholds that applied (and the pool they came
    from), the verdict, the score and the reason; with the herd guard on, also the pod's own
    estimate and what was in flight on each node. None if loadext has none for the pod."""
    decisions = extender.decisions.get(pod)
    if decisions is None:
        return None
    labelled = extender.directory.labelled()
    out: dict[str, Any] = {"pod": pod}
    for verb, decision in decisions.items():
        rows: list[dict[str, Any]] = []
        rows_of = zip(decision.names, decision.node_verdicts(), decision.node_samples(), strict=True)
        for name, verdict, samples in rows_of:
            pool = decision.config.pool_for(labelled.get(name))
            thresholds = {s.name: s.threshold for s in (pool.signals if pool else decision.config.signals)}
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
                # per resource: measured, owner (its recent pods' median) or factor (core/usage.py)
                "source": {"cpu": cpu_source, "memory": memory_source},
            }
    return out


def _in_flight_row(entry: tuple[Usage, int] | None) -> dict[str, float] | None:
    """Pods placed on the node within the herd guard's window, and their estimated usage."""
    if entry is None:
        return None
    usage, pods = entry
    return {"pods": pods, "cpuCores": round(usage.cpu, 3), "memoryBytes": round(usage.memory)}


def _age(now: float, then: float | None) -> float | None:
    return None if then is None else round(now - then, 1)
