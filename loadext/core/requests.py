"""What the scheduler asks and the API server reports, decoded: the typed arguments of the
extender verbs, and the pods and nodes the watches see.

http/protocol.py and sources/ turn wire bytes into these and nothing else in loadext reads
JSON, so the core decides on plain values and never sees a wire format. A Pod is mapped once,
to a PodRef (shared/objects.py Pod.ref), whether the scheduler or the pod watch sent it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Quantities = dict[str, str | int | float]  # {"cpu": "500m", "memory": "1Gi"}, parsed by config.units


@dataclass(frozen=True, slots=True)
class PodRef:
    namespace: str
    name: str
    uid: str
    owner_kinds: tuple[str, ...]
    containers: tuple[tuple[Quantities, Quantities], ...] = ()  # (requests, limits) per container
    init_containers: tuple[tuple[Quantities, Quantities], ...] = ()
    overhead: Quantities = field(default_factory=dict)
    owner: str = ""  # learned.owner_of: "namespace/Kind/name", or ""

    @property
    def is_daemonset(self) -> bool:
        return "DaemonSet" in self.owner_kinds

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class BoundPod:
    """A pod the API server reports bound to a node: what the herd guard counts in flight."""

    pod: PodRef
    node: str
    placed_at: float  # PodScheduled's transition time: a restart of loadext does not re-date it
    finished: bool = False  # Succeeded, Failed or being deleted: it no longer counts

    @property
    def uid(self) -> str:
        return self.pod.uid


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    """Filter and prioritize requests: `names` are the candidate nodes in request order. In
    non-cache mode (`nodeCacheCapable: false`) the Node objects also give `addresses` (their
    IPs), `labels` and `allocatable`, when loadext asked the decoder for them."""

    pod: PodRef | None
    names: list[str]
    addresses: dict[str, tuple[str, ...]] = field(default_factory=dict)
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    allocatable: dict[str, Quantities] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A Node as the Node watch reports it: its IPs (InternalIP first), labels and allocatable."""

    name: str
    addresses: tuple[str, ...]
    labels: dict[str, str]
    allocatable: Quantities


@dataclass(frozen=True, slots=True)
class Victims:
    uids: tuple[str, ...]
    num_pdb_violations: int


@dataclass(frozen=True, slots=True)
class PreemptionArgs:
    pod: PodRef | None
    victims: dict[str, Victims]


@dataclass(frozen=True, slots=True)
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str
