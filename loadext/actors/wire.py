"""Pods, Nodes and Namespaces as the rebalancer decodes them from the API (placement.py): only
the fields kube-scheduler's default filters and the rebalancer's exclusions read."""

from __future__ import annotations

import msgspec

from loadext.shared.objects import Decoded, OwnerReference, PodStatus, Resources


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
