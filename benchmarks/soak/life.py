"""The soak's cluster life and faults, drawn from a seed: what happens when, and the objects it
makes (Deployments with their budgets, Jobs, Nodes). benchmarks/soak/cluster.py carries it out.

Two profiles share every rule. `long` (the benchmark): 30 nodes, life every 4-12 s, a fault
every 45-120 s (each kind once, in a seeded order, then drawn at random), the last fault ending
6 minutes before the end, the settling window. Its replica faults (the kills, the restart of
both) come first and only once: the replicas then live the rest of the run. RSS is judged over
10 minutes past a replica's warm-up, which lasts until its decision log holds its 256 pods
(24 to 40 minutes of this life); kills drawn at random ended every incarnation sooner.
`short` (tests/e2e/test_cluster_soak.py): 12 nodes and smaller Deployments (the same load per
node), each fault kind exactly once with shorter outages, 1-2 s apart, and 35 s after the last:
time for readiness to be back (30 s); a clearing not seen by then is reported as not judged.

In both, a workload drifts hot shortly before each Prometheus fault; and 40 s before the node
signal starts failing (25 s) and before the kill that waits for an eviction (40 s), the
workload pods of the node they would make hottest drift hot (`node_heat`: a node hot as its data
goes stale, and that one eviction does not cool, held hot until its fault ends; in the short
profile these two faults come first, while the rest of the cluster has room). The rebalancer
has work to do exactly when it must not (or must stop mid-way): a fault that meets no hot node
proves nothing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from run import NAMESPACE, USAGE_CPU, make_nodes, millicores

WORKLOADS = ("web", "api", "cart", "search", "feed", "mail")
COOL, HOT = (0.3, 0.8), (3.5, 5.0)  # cores a pod uses in a cool and in a hot phase
SCHEDULER = "loadext-scheduler"  # the shipped profile's name: pods opt in with spec.schedulerName
MANAGED = ("kwok.x-k8s.io/node", "fake")  # the annotation kwok manages nodes by: without it, a node's kubelet is gone
SPARE_NODES = 12  # nodes life may add, named ahead so that Prometheus scrapes them once they exist

FAULTS = (
    "kill_holder", "kill_mid_eviction", "restart_both", "prometheus_down", "prometheus_slow", "node_signal_failing",
    "apiserver_down", "node_not_ready", "node_deleted_hot", "config_valid", "config_invalid", "dry_run",
)  # fmt: skip
REPLICA_FAULTS = ("kill_holder", "kill_mid_eviction", "restart_both")
# a workload drifts hot just before these: the rebalancer has work exactly when its data goes stale
HEATED = ("prometheus_down", "prometheus_slow")
# seconds before these that a node's pods drift hot (node_heat): before the node signal fails, so
# that the node turns hot (rate window, then hotFor) just as the data does, its first eviction on
# fresh data and the next due (a herd window later) on stale data
HEATS_A_NODE = {"node_signal_failing": 25.0, "kill_mid_eviction": 40.0}


@dataclass(frozen=True)
class Profile:
    name: str
    nodes: int
    lengths: dict[str, tuple[float, float]]  # seconds a fault lasts (a killed replica is down), drawn from the range
    life_gap: tuple[float, float]
    fault_gap: tuple[float, float]
    first_fault: float
    settle: float  # seconds after the last fault's end
    node_changes: bool  # life adds and removes nodes
    replicas: int  # each Deployment's at the start
    scale: tuple[int, int]  # the replicas a scaling sets, drawn from the range


LONG = Profile(
    "long", 30,
    {"kill_holder": (10, 15), "kill_mid_eviction": (10, 15), "prometheus_down": (60, 180),
     "prometheus_slow": (30, 60), "node_signal_failing": (40, 90), "apiserver_down": (30, 60),
     "node_not_ready": (60, 120), "config_valid": (30, 90), "dry_run": (30, 90), "config_invalid": (10, 10)},
    (4, 12), (45, 120), 150, 360, True, 5, (3, 7),
)  # fmt: skip
SHORT = Profile(
    "short", 12,
    {"kill_holder": (6, 8), "kill_mid_eviction": (6, 8), "prometheus_down": (25, 27), "prometheus_slow": (20, 22),
     "node_signal_failing": (40, 42), "apiserver_down": (20, 22), "node_not_ready": (15, 18),
     "config_valid": (10, 12), "dry_run": (10, 12), "config_invalid": (5, 5)},
    (3, 6), (1, 2), 55, 35, False, 3, (2, 4),
)  # fmt: skip
PROFILES = {p.name: p for p in (LONG, SHORT)}


@dataclass(frozen=True)
class Event:
    at: float  # seconds from the start of life
    kind: str
    target: str = ""
    value: float = 0.0
    length: float = 0.0  # a fault's duration


def schedule(seed: int, profile: Profile, seconds: float | None) -> tuple[list[Event], float]:
    """The events and the run's length: `seconds` for the long profile (the last fault ending
    `settle` before it); for the short one, as long as its faults need."""
    rng = random.Random(seed)
    faults: list[Event] = []
    kinds = list(FAULTS)
    rng.shuffle(kinds)
    if profile.name == "short":  # the two that need a hot node with targets first, while the cluster has room
        for kind in ("kill_mid_eviction", "node_signal_failing"):
            kinds.remove(kind)
            kinds.insert(0, kind)
    else:  # the replicas' faults first (in their seeded order), and only then: see the module's docstring
        kinds.sort(key=lambda kind: kind not in REPLICA_FAULTS)
    later = [kind for kind in FAULTS if kind not in REPLICA_FAULTS]
    t, last = profile.first_fault, (seconds or 0) - profile.settle
    for index in range(len(kinds) if seconds is None else 10**6):
        kind = kinds[index] if index < len(kinds) else rng.choice(later)
        low, high = profile.lengths.get(kind, (0.0, 0.0))
        length = rng.uniform(low, high)
        if seconds is not None and t + length + 20 >= last:
            break
        faults.append(Event(t, kind, length=length, value=rng.uniform(0.7, 0.78)))
        t += length + rng.uniform(*profile.fault_gap) + (20 if kind == "kill_mid_eviction" else 0)
    total = seconds if seconds is not None else t + profile.settle
    life: list[Event] = []
    t = 20.0
    while t < total - 20:
        workload = rng.choice(WORKLOADS)
        roll = rng.random()
        if roll < 0.45:
            life.append(Event(t, "phase", workload, rng.uniform(*(HOT if rng.random() < 0.5 else COOL))))
        elif roll < 0.6:
            life.append(Event(t, "rollout", workload))
        elif roll < 0.72:
            life.append(Event(t, "scale", workload, rng.randint(*profile.scale)))
        elif roll < 0.94 or not profile.node_changes:
            life.append(Event(t, "job", workload, rng.uniform(0.2, 1.0)))
        else:
            life.append(Event(t, "node_add" if roll < 0.97 else "node_remove"))
        t += rng.uniform(*profile.life_gap)
    for fault in faults:
        if fault.kind in HEATS_A_NODE:  # a node hot past one eviction
            heat = Event(max(fault.at - HEATS_A_NODE[fault.kind], 1.0), "node_heat", fault.kind, rng.uniform(*HOT))
            life.append(heat)
        elif fault.kind in HEATED:
            life.append(Event(max(fault.at - 25, 1.0), "phase", rng.choice(WORKLOADS), rng.uniform(*HOT)))
    return sorted(life + faults, key=lambda e: e.at), total


# --- what life makes ------------------------------------------------------------------------


def deployment(name: str, replicas: int, cores: float, namespace: str = NAMESPACE) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": labels, "annotations": {USAGE_CPU: millicores(cores)}},
                "spec": {
                    "schedulerName": SCHEDULER,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "app",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"cpu": "4"}},
                        }
                    ],
                },
            },
        },
    }


def budget(name: str, namespace: str = NAMESPACE) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": name}}},
    }


def job(name: str, cores: float) -> dict[str, Any]:
    """A short Job: placed like any pod (its usage `cores` counted by the herd guard until it
    ends), completed by kwok's pod-complete stage as soon as it runs."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "ttlSecondsAfterFinished": 30,
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {USAGE_CPU: millicores(cores)}},
                "spec": {
                    "schedulerName": SCHEDULER,
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "run",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}},
                        }
                    ],
                },
            },
        },
    }


def spare_names() -> list[str]:
    return [f"soak-new{k}-00" for k in range(1, SPARE_NODES + 1)]


def add_nodes(core: Any, prefix: str, count: int) -> list[str]:
    """Ready nodes (placement/run.py's, with their background pods) that kwok manages."""
    names = make_nodes(core, prefix, count)
    for name in names:
        core.patch_node(name, {"metadata": {"annotations": {MANAGED[0]: MANAGED[1]}}})
    return names


def kubelet_gone(core: Any, node: str) -> None:
    """The node's kubelet stops (kwok no longer manages it: no heartbeat, no metrics) after
    reporting NotReady, as a kubelet whose runtime failed does; the node lifecycle controller
    then taints it node.kubernetes.io/not-ready."""
    core.patch_node(node, {"metadata": {"annotations": {MANAGED[0]: None}}})
    condition = {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "soak: runtime down"}
    core.patch_node_status(node, {"status": {"conditions": [condition]}})


def kubelet_back(core: Any, node: str) -> None:
    """kwok manages the node again: its node-initialize stage reports it Ready. Meanwhile the node
    lifecycle controller marked the node's pods NotReady; a kubelet back reports them Ready at its
    next status sync, but kwok's stages only ready pods still Pending, so this does it (else each
    workload's budget would allow no disruption for good)."""
    core.patch_node(node, {"metadata": {"annotations": {MANAGED[0]: MANAGED[1]}}})
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    ready = [{"type": kind, "status": "True", "lastTransitionTime": now} for kind in ("Ready", "ContainersReady")]
    for pod in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items:
        if pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None:
            meta = pod.metadata
            core.patch_namespaced_pod_status(meta.name, meta.namespace, {"status": {"conditions": ready}})
