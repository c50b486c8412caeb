"""What the rebalancer reads of the cluster in one cycle, as kube-scheduler would see it: every Node,
every non-terminal bound Pod and every Namespace's labels, decoded by msgspec (only the fields the
default filters and the rebalancer's exclusions read) and mapped into core's fit model
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

import msgspec

from loadext.actors.evictions import ApiUnavailable
from loadext.config.units import whole_quantity
from loadext.core.herd.learned import owner_of
from loadext.core.herd.usage import Usage
from loadext.core.rebalance.fit import World
from loadext.core.rebalance.fit import model as fit
from loadext.core.rebalance.fit.resources import effective_requests
from loadext.core.rebalance.fit.verifiable import NEUTRAL_VOLUMES
from loadext.core.rebalance.followup import Replica
from loadext.core.rebalance.selection import PodFacts
from loadext.shared.objects import Decoded, OwnerReference, PodStatus, Resources
from loadext.sources.kube import API_ERRORS, list_all, rfc3339_seconds, why_failed

SIDECAR = "Always"  # an init container's restartPolicy that makes it a sidecar
NOT_TERMINAL = "status.phase!=Succeeded,status.phase!=Failed"  # the scheduler's own pod informer selector


# --- the wire ---------------------------------------------------------------------------------


class Expression(Decoded):
    key: str = ""
    operator: str = ""
    values: tuple[str, ...] | None = None


class WireSelector(Decoded):
    matchLabels: dict[str, str] | None = None
    matchExpressions: tuple[Expression, ...] | None = None


class WireTerm(Decoded):
    matchExpressions: tuple[Expression, ...] | None = None
    matchFields: tuple[Expression, ...] | None = None


class NodeSelector(Decoded):
    nodeSelectorTerms: tuple[WireTerm, ...] | None = None


class NodeAffinity(Decoded):
    requiredDuringSchedulingIgnoredDuringExecution: NodeSelector | None = None


class AffinityTerm(Decoded):
    labelSelector: WireSelector | None = None
    namespaces: tuple[str, ...] | None = None
    namespaceSelector: WireSelector | None = None
    topologyKey: str = ""


class PodAffinity(Decoded):
    requiredDuringSchedulingIgnoredDuringExecution: tuple[AffinityTerm, ...] | None = None


class Affinity(Decoded):
    nodeAffinity: NodeAffinity | None = None
    podAffinity: PodAffinity | None = None
    podAntiAffinity: PodAffinity | None = None


class WireToleration(Decoded):
    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""


class Spread(Decoded):
    maxSkew: int = 1
    topologyKey: str = ""
    whenUnsatisfiable: str = ""
    labelSelector: WireSelector | None = None
    minDomains: int | None = None
    nodeAffinityPolicy: str | None = None
    nodeTaintsPolicy: str | None = None
    matchLabelKeys: tuple[str, ...] | None = None


class Port(Decoded):
    hostPort: int = 0
    protocol: str = ""
    hostIP: str = ""


class Container(Decoded):
    resources: Resources | None = None
    ports: tuple[Port, ...] | None = None
    restartPolicy: str | None = None


class Annotations(Decoded):
    """The annotations the rebalancer reads; the rest is skipped in C."""

    evict: str | None = msgspec.field(name="loadext.io/evict", default=None)
    mirror: str | None = msgspec.field(name="kubernetes.io/config.mirror", default=None)


class Meta(Decoded):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    labels: dict[str, str] | None = None
    annotations: Annotations | None = None
    ownerReferences: tuple[OwnerReference, ...] | None = None
    creationTimestamp: str | None = None
    deletionTimestamp: str | None = None


class Spec(Decoded):
    nodeName: str = ""
    priority: int | None = None
    nodeSelector: dict[str, str] | None = None
    affinity: Affinity | None = None
    tolerations: tuple[WireToleration, ...] | None = None
    topologySpreadConstraints: tuple[Spread, ...] | None = None
    containers: tuple[Container, ...] | None = None
    initContainers: tuple[Container, ...] | None = None
    overhead: dict[str, str | int | float] | None = None
    resources: Resources | None = None  # pod-level resources
    volumes: tuple[dict[str, msgspec.Raw], ...] | None = None
    resourceClaims: tuple[msgspec.Raw, ...] | None = None
    schedulingGates: tuple[msgspec.Raw, ...] | None = None


class ScheduledPod(Decoded):
    metadata: Meta = msgspec.field(default_factory=Meta)
    spec: Spec = msgspec.field(default_factory=Spec)
    status: PodStatus | None = None


class WireTaint(Decoded):
    key: str = ""
    value: str = ""
    effect: str = ""


class NodeSpec(Decoded):
    unschedulable: bool = False
    taints: tuple[WireTaint, ...] | None = None


class Condition(Decoded):
    type: str = ""
    status: str = ""


class NodeState(Decoded):
    allocatable: dict[str, str | int | float] | None = None
    conditions: tuple[Condition, ...] | None = None


class NodeMeta(Decoded):
    name: str = ""
    labels: dict[str, str] | None = None
    deletionTimestamp: str | None = None


class ScheduledNode(Decoded):
    metadata: NodeMeta = msgspec.field(default_factory=NodeMeta)
    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)
    status: NodeState = msgspec.field(default_factory=NodeState)


class NamespaceMeta(Decoded):
    name: str = ""
    labels: dict[str, str] | None = None


class Namespace(Decoded):
    metadata: NamespaceMeta = msgspec.field(default_factory=NamespaceMeta)


# --- reading ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cluster:
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


def read(api: Any) -> Cluster:
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
    return Cluster(World(map(node_facts, nodes), placed, labels), by_node, pending)


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
