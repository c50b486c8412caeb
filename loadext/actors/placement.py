"""What the rebalancer reads of the cluster in one cycle, as kube-scheduler would see it: every Node,
every non-terminal bound Pod and every Namespace's labels, decoded by msgspec (wire.py) and mapped into core's fit model
(core/rebalance/fit/model.py) and PodFacts (core/rebalance/selection.py). Blocking: callers run
it in a worker thread.

What the model has no field for is named in `PodConstraints.unknown`, so that fit/verifiable.py
keeps such a pod where it is rather than guess.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from loadext.actors.evictions import ApiUnavailable
from loadext.actors.wire import (
    Affinity,
    Container,
    Expression,
    Namespace,
    PodAffinity,
    ScheduledNode,
    ScheduledPod,
    Spec,
    Spread,
    WireSelector,
    WireTerm,
)
from loadext.config.units import whole_quantity
from loadext.core.herd.learned import owner_of
from loadext.core.herd.usage import Usage
from loadext.core.rebalance.fit import World
from loadext.core.rebalance.fit import model as fit
from loadext.core.rebalance.fit.resources import effective_requests
from loadext.core.rebalance.fit.verifiable import NEUTRAL_VOLUMES
from loadext.core.rebalance.followup import Replica
from loadext.core.rebalance.selection import PodFacts
from loadext.shared.objects import PodStatus
from loadext.sources.kube import API_ERRORS, rfc3339_seconds, why_failed
from loadext.sources.listwatch import list_all

SIDECAR = "Always"  # an init container's restartPolicy that makes it a sidecar
NOT_TERMINAL = "status.phase!=Succeeded,status.phase!=Failed"  # the scheduler's own pod informer selector


# --- reading ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterView:
    """One cycle's read: the World the fit judges on, and each node's pods as the rebalancer's
    exclusions see them."""

    world: World
    pods: Mapping[str, list[PodFacts]]  # node -> its pods
    pending: list[PodFacts]  # not bound to a node yet

    def replicas(self, workloads: Collection[str]) -> list[Replica]:
        """The pods of these workloads not being deleted, bound or not, for the stop rule."""
        bound = ((node, pod) for node, pods in self.pods.items() for pod in pods)
        return [
            Replica(pod.uid, pod.key, pod.workload, node)
            for node, pod in itertools.chain(bound, (("", pod) for pod in self.pending))
            if pod.workload in workloads and not pod.deleting
        ]

    def members(self, workloads: Collection[str]) -> dict[str, frozenset[str]]:
        """workload -> the uids of its pods now: before an eviction, the pods that are not its
        replacement."""
        found: dict[str, set[str]] = {}
        for replica in self.replicas(workloads):
            found.setdefault(replica.workload, set()).add(replica.uid)
        return {workload: frozenset(uids) for workload, uids in found.items()}


def read(api: Any) -> ClusterView:
    nodes = _listed(api.list_node, ScheduledNode, "nodes")
    pods = _listed(api.list_pod_for_all_namespaces, ScheduledPod, "pods", field_selector=NOT_TERMINAL)
    namespaces = _listed(api.list_namespace, Namespace, "namespaces")
    by_node: dict[str, list[PodFacts]] = {}
    pending: list[PodFacts] = []
    placed = []
    for pod in pods:
        facts = pod_facts(pod)
        if not pod.spec.nodeName:
            pending.append(facts)  # not bound: the scheduler does not count it on any node
            continue
        by_node.setdefault(pod.spec.nodeName, []).append(facts)
        placed.append(fit.PlacedPod(facts.constraints, pod.spec.nodeName, facts.deleting))
    labels = {ns.metadata.name: ns.metadata.labels or {} for ns in namespaces}
    return ClusterView(World(map(node_facts, nodes), placed, labels), by_node, pending)


def _listed(call: Callable[..., Any], kind: type[Any], what: str, **args: Any) -> list[Any]:
    try:
        return list_all(call, kind, **args)
    except API_ERRORS as exc:
        raise ApiUnavailable(f"listing {what} failed: {why_failed(exc)}") from None


# --- mapping ----------------------------------------------------------------------------------


def node_facts(node: ScheduledNode) -> fit.NodeFacts:
    ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or ())
    allocatable = node.status.allocatable or {}
    amounts = effective_requests([allocatable], [])
    amounts["pods"] = whole_quantity(allocatable.get("pods")) or 0
    return fit.NodeFacts(
        name=node.metadata.name,
        labels=node.metadata.labels or {},
        taints=tuple(fit.Taint(t.key, t.value, t.effect) for t in node.spec.taints or ()),
        unschedulable=node.spec.unschedulable,
        ready=ready,
        deleting=node.metadata.deletionTimestamp is not None,
        allocatable=amounts,
    )


def pod_facts(pod: ScheduledPod) -> PodFacts:
    meta, spec, status = pod.metadata, pod.spec, pod.status or PodStatus()
    refs = meta.ownerReferences or ()
    controller = next((ref.kind for ref in refs if ref.controller), "")
    template_hash = (meta.labels or {}).get("pod-template-hash", "")
    annotations = meta.annotations
    volumes = [next((k for k in v if k != "name"), "") for v in spec.volumes or ()]
    scheduled = constraints(pod, volumes)
    return PodFacts(
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        controller_kind=controller,
        workload=owner_of(meta.namespace, ((r.kind, r.name, bool(r.controller)) for r in refs), template_hash),
        priority=spec.priority or 0,
        evict_annotation=annotations.evict if annotations is not None else None,
        mirror=annotations is not None and annotations.mirror is not None,
        local_storage=any(kind in ("emptyDir", "hostPath") for kind in volumes),
        created=rfc3339_seconds(meta.creationTimestamp),
        phase=status.phase,
        deleting=meta.deletionTimestamp is not None,
        requests=_usage(scheduled.requests),
        constraints=scheduled,
    )


def constraints(pod: ScheduledPod, volumes: list[str]) -> fit.PodConstraints:
    meta, spec = pod.metadata, pod.spec
    labels = meta.labels or {}
    affinity = spec.affinity or Affinity()
    required = affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution if affinity.nodeAffinity else None
    unknown = [f"a volume of kind {kind}" for kind in volumes if kind not in NEUTRAL_VOLUMES]
    if spec.resourceClaims:
        unknown.append("resource claims (dynamic resource allocation)")
    if spec.schedulingGates:
        unknown.append("scheduling gates")
    spread = []
    for c in spec.topologySpreadConstraints or ():
        if c.whenUnsatisfiable == "ScheduleAnyway":
            continue
        policies = (c.nodeAffinityPolicy or "Honor", c.nodeTaintsPolicy or "Ignore")
        if c.whenUnsatisfiable != "DoNotSchedule" or not set(policies) <= {"Honor", "Ignore"}:
            unknown.append(f"topology spread constraint {c.whenUnsatisfiable} {'/'.join(policies)}")
            continue
        spread.append(_spread(c, labels, policies))
    return fit.PodConstraints(
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        labels=labels,
        node_selector=spec.nodeSelector or {},
        node_terms=None if required is None else tuple(map(_term, required.nodeSelectorTerms or ())),
        tolerations=tuple(
            fit.Toleration(t.key, t.operator or "Equal", t.value, t.effect) for t in spec.tolerations or ()
        ),
        requests=_requests(spec),
        host_ports=_host_ports(spec),
        affinity=_pod_terms(affinity.podAffinity, meta.namespace),
        anti_affinity=_pod_terms(affinity.podAntiAffinity, meta.namespace),
        spread=tuple(spread),
        unknown=tuple(unknown),
    )


def _requests(spec: Spec) -> dict[str, int]:
    init = [(_own(c), c.restartPolicy == SIDECAR) for c in spec.initContainers or ()]
    pod_level = spec.resources.requests if spec.resources is not None else None
    return effective_requests([_own(c) for c in spec.containers or ()], init, spec.overhead, pod_level)


def _usage(requests: Mapping[str, int]) -> Usage:
    """The requests as the rebalancer's room and estimates count them (cores, bytes)."""
    return Usage(requests.get("cpu", 0) / 1000, float(requests.get("memory", 0)))


def _own(container: Container) -> Mapping[str, object] | None:
    return container.resources.requests if container.resources is not None else None


def _host_ports(spec: Spec) -> tuple[fit.HostPort, ...]:
    sidecars = [c for c in spec.initContainers or () if c.restartPolicy == SIDECAR]
    return tuple(
        fit.HostPort(port.hostPort, port.protocol or "TCP", port.hostIP or "0.0.0.0")
        for container in (*sidecars, *(spec.containers or ()))
        for port in container.ports or ()
        if port.hostPort > 0
    )


def _selector(wire: WireSelector | None) -> fit.LabelSelector | None:
    if wire is None:
        return None
    return fit.LabelSelector(tuple(sorted((wire.matchLabels or {}).items())), _requirements(wire.matchExpressions))


def _requirements(expressions: tuple[Expression, ...] | None) -> tuple[fit.Requirement, ...]:
    return tuple(fit.Requirement(e.key, e.operator, tuple(e.values or ())) for e in expressions or ())


def _term(term: WireTerm) -> fit.NodeSelectorTerm:
    return fit.NodeSelectorTerm(_requirements(term.matchExpressions), _requirements(term.matchFields))


def _pod_terms(affinity: PodAffinity | None, namespace: str) -> tuple[fit.PodAffinityTerm, ...]:
    terms = []
    for term in (affinity.requiredDuringSchedulingIgnoredDuringExecution if affinity else None) or ():
        names = frozenset(term.namespaces or ())
        if not names and term.namespaceSelector is None:
            names = frozenset({namespace})
        selector = _selector(term.namespaceSelector)
        terms.append(fit.PodAffinityTerm(_selector(term.labelSelector), names, selector, term.topologyKey))
    return tuple(terms)


def _spread(c: Spread, labels: Mapping[str, str], policies: tuple[str, str]) -> fit.SpreadConstraint:
    selector = _selector(c.labelSelector)
    keys = [(key, labels[key]) for key in c.matchLabelKeys or () if key in labels]
    if keys and selector is not None:  # merged, as the scheduler does (a nil selector stays nil)
        extra = tuple(fit.Requirement(key, "In", (value,)) for key, value in keys)
        selector = fit.LabelSelector(selector.match_labels, selector.expressions + extra)
    return fit.SpreadConstraint(
        max_skew=c.maxSkew,
        topology_key=c.topologyKey,
        selector=selector,
        min_domains=c.minDomains if c.minDomains is not None else 1,
        honor_node_affinity=policies[0] == "Honor",
        honor_node_taints=policies[1] == "Honor",
    )
