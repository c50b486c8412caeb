"""The parts of Kubernetes API objects loadext reads, as msgspec structs.

One set of types serves both places Pods and Nodes arrive: the scheduler's extender requests
(http/protocol.py) and the API server's lists and watches (sources/kube.py). msgspec decodes
only these fields and skips the rest of each object in C; the kubernetes client's models built
a Python object for every field of every Pod, which made the pod watch the largest user of the
GIL after the verbs themselves during a scheduling burst (docs/benchmarks.md). Field names are
the API's own lowerCamel keys.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from loadext.core.herd.learned import owner_of
from loadext.core.requests import NodeInfo, PodRef, Quantities

NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]
Requirements = tuple[tuple[Quantities, Quantities], ...]  # (requests, limits) per container


class Decoded(msgspec.Struct, gc=False):
    """The base of every struct here. They hold decoded JSON and never refer back to anything,
    so they cannot be part of a reference cycle: with gc=False (and tuples rather than lists)
    the garbage collector does not track them. A 5000-node watch keeps ~25,000 of them alive,
    and every full collection walked them all, on the event loop's time (docs/benchmarks.md)."""


class OwnerReference(Decoded):
    kind: str = ""
    name: str = ""
    controller: bool | None = None


class PodLabels(Decoded):
    """The one label loadext reads (a Deployment's ReplicaSets as one owner); the rest is skipped in C."""

    template_hash: str = msgspec.field(name="pod-template-hash", default="")


class PodMeta(Decoded):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resourceVersion: str = ""
    labels: PodLabels | None = None
    ownerReferences: tuple[OwnerReference, ...] | None = None
    # RFC 3339, parsed where used, so that an odd value is no 400; Go writes a zero time as null
    creationTimestamp: str | None = None
    deletionTimestamp: str | None = None

    def owner(self) -> str:
        """learned.owner_of for this pod: its controller, a Deployment's ReplicaSets folded."""
        refs = ((ref.kind, ref.name, bool(ref.controller)) for ref in self.ownerReferences or ())
        return owner_of(self.namespace, refs, self.labels.template_hash if self.labels is not None else "")


class Resources(Decoded):
    requests: Quantities | None = None
    limits: Quantities | None = None


class Container(Decoded):
    resources: Resources | None = None


def requirements(containers: tuple[Container, ...] | None) -> Requirements:
    out = []
    for container in containers or ():
        resources = container.resources or Resources()
        out.append((resources.requests or {}, resources.limits or {}))
    return tuple(out)


class PodSpec(Decoded):
    nodeName: str = ""
    containers: tuple[Container, ...] | None = None
    initContainers: tuple[Container, ...] | None = None
    overhead: Quantities | None = None


class PodCondition(Decoded):
    type: str = ""
    status: str = ""
    lastTransitionTime: str | None = None


class PodStatus(Decoded):
    phase: str = ""
    conditions: tuple[PodCondition, ...] | None = None


class Pod(Decoded):
    metadata: PodMeta | None = None
    spec: PodSpec | None = None
    status: PodStatus | None = None

    def ref(self) -> PodRef:
        """The one mapping of a Pod to what loadext decides on, for the scheduler's requests
        and the pod watch alike."""
        meta = self.metadata or PodMeta()
        spec = self.spec or PodSpec()
        return PodRef(
            namespace=meta.namespace,
            name=meta.name,
            uid=meta.uid,
            owner_kinds=tuple(ref.kind for ref in meta.ownerReferences or ()),
            owner=meta.owner(),
            containers=requirements(spec.containers),
            init_containers=requirements(spec.initContainers),
            overhead=spec.overhead or {},
        )


class NodeAddress(Decoded):
    type: str = ""
    address: str = ""


class NodeStatus(Decoded):
    addresses: tuple[NodeAddress, ...] | None = None
    allocatable: Quantities | None = None


class NodeMeta(Decoded):
    name: NonEmpty
    resourceVersion: str = ""
    labels: dict[str, str] | None = None


class Node(Decoded):
    metadata: NodeMeta
    status: NodeStatus | None = None

    def ips(self) -> tuple[str, ...]:
        """InternalIPs first (the address node-exporter is scraped on), then ExternalIPs."""
        found = (self.status.addresses if self.status is not None else None) or ()
        internal = [a.address for a in found if a.type == "InternalIP" and a.address]
        external = [a.address for a in found if a.type == "ExternalIP" and a.address]
        return tuple(internal + external)

    def allocatable(self) -> Quantities:
        return (self.status.allocatable if self.status is not None else None) or {}

    def info(self) -> NodeInfo:
        return NodeInfo(self.metadata.name, self.ips(), self.metadata.labels or {}, self.allocatable())


class ConfigMapMeta(Decoded):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resourceVersion: str = ""


class ConfigMap(Decoded):
    metadata: ConfigMapMeta
    data: dict[str, str] | None = None


class ListMeta(Decoded):
    resourceVersion: str = ""
    continue_: str = msgspec.field(name="continue", default="")  # the next page's token, "" on the last


class WatchEvent(Decoded):
    """One line of a watch stream; `object` is decoded by its type (a Status for ERROR)."""

    type: str
    object: msgspec.Raw


class Status(Decoded):
    code: int = 0
    reason: str = ""
    message: str = ""
