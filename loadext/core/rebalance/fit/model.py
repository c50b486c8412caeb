"""What kube-scheduler's default filters read of pods and nodes, as plain values.

actors/placement.py maps API objects into these; fit/ judges on them and nothing else. Resource
amounts are integers in the scheduler's own units (CPU in millicores, everything else in whole
units, each quantity rounded up), so that sums compare exactly as the scheduler's int64s do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# The taint a cordoned node is judged by (NodeUnschedulable): a pod that tolerates it may go there.
UNSCHEDULABLE_TAINT_KEY = "node.kubernetes.io/unschedulable"
NAME_FIELD = "metadata.name"  # the one field a nodeSelectorTerm's matchFields may name


@dataclass(frozen=True, slots=True)
class Requirement:
    """One expression of a label selector or node selector term."""

    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist; Gt and Lt in node selectors
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A metav1.LabelSelector; an empty one (no labels, no expressions) matches every object."""

    match_labels: tuple[tuple[str, str], ...] = ()
    expressions: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.match_labels and not self.expressions


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """Expressions on the node's labels and fields, ANDed; a term with neither matches no node."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"  # Equal (also when empty) or Exists
    value: str = ""
    effect: str = ""  # "" tolerates every effect


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str  # NoSchedule, PreferNoSchedule or NoExecute


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """A required (anti-)affinity term, its namespaces as the scheduler resolves them: the listed
    ones, or the pod's own when neither names nor a namespace selector is given."""

    selector: LabelSelector | None  # None: matches no pod
    namespaces: frozenset[str]
    namespace_selector: LabelSelector | None  # None: no selector; empty: every namespace
    topology_key: str


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """A topology spread constraint with whenUnsatisfiable: DoNotSchedule (the only kind a filter
    judges), its selector already merged with matchLabelKeys."""

    max_skew: int
    topology_key: str
    selector: LabelSelector | None  # None: counts no pod
    min_domains: int = 1
    honor_node_affinity: bool = True  # nodeAffinityPolicy: Honor (the default) or Ignore
    honor_node_taints: bool = False  # nodeTaintsPolicy: Ignore (the default) or Honor


@dataclass(frozen=True, slots=True)
class HostPort:
    port: int
    protocol: str = "TCP"
    ip: str = "0.0.0.0"  # the API's default hostIP: any address


@dataclass(frozen=True, slots=True)
class PodConstraints:
    """What the default profile's filters read of one pod: the pod to place, or one already on a node."""

    namespace: str
    name: str
    uid: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    node_terms: tuple[NodeSelectorTerm, ...] | None = None  # None: no required node affinity
    tolerations: tuple[Toleration, ...] = ()
    requests: Mapping[str, int] = field(default_factory=dict)  # resource -> amount, overhead included
    host_ports: tuple[HostPort, ...] = ()
    affinity: tuple[PodAffinityTerm, ...] = ()  # required pod affinity
    anti_affinity: tuple[PodAffinityTerm, ...] = ()  # required pod anti-affinity
    spread: tuple[SpreadConstraint, ...] = ()  # DoNotSchedule constraints
    unknown: tuple[str, ...] = ()  # what the mapping met that these fields cannot say (fit.unverifiable)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class PlacedPod:
    """A non-terminal pod bound to a node, as the scheduler's cache counts it."""

    pod: PodConstraints
    node: str
    terminating: bool = False  # counted for resources and ports, not for topology spread


@dataclass(frozen=True, slots=True)
class NodeFacts:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True
    deleting: bool = False
    allocatable: Mapping[str, int] = field(default_factory=dict)  # "pods" among them
