"""The cluster as the scheduler's snapshot holds it when a replacement pod is placed: every node,
the non-terminal pods bound to them (terminating ones included, as the scheduler's cache keeps
them until they are gone) and the namespaces' labels (for namespace selectors).

A cycle builds one World from its lists, then plans on it move by move: a planned move takes
the pod off its node and puts a replacement like it on the target, so the next move of the same
cycle is judged with the room, ports and spread the first one took.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from loadext.core.rebalance.fit.model import NodeFacts, PlacedPod, PodConstraints


class World:
    def __init__(
        self,
        nodes: Iterable[NodeFacts],
        pods: Iterable[PlacedPod],
        namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.nodes: dict[str, NodeFacts] = {node.name: node for node in nodes}
        self.namespace_labels: Mapping[str, Mapping[str, str]] = namespace_labels or {}
        self._on: dict[str, list[PlacedPod]] = {}
        self._requested: dict[str, dict[str, int]] = {}
        for pod in pods:
            self._place(pod)

    def pods_on(self, node: str) -> list[PlacedPod]:
        return self._on.get(node, [])

    def placed(self) -> Iterator[PlacedPod]:
        for pods in self._on.values():
            yield from pods

    def requested(self, node: str) -> Mapping[str, int]:
        return self._requested.get(node, {})

    def move(self, pod: PodConstraints, source: str, target: str) -> None:
        """`pod` is evicted from `source` and its controller's replacement lands on `target`."""
        kept = [p for p in self.pods_on(source) if p.pod.uid != pod.uid]
        if len(kept) != len(self.pods_on(source)):
            self._on[source] = kept
            self._requested[source] = _sum(p.pod.requests for p in kept)
        self._place(PlacedPod(pod, target))

    def _place(self, pod: PlacedPod) -> None:
        self._on.setdefault(pod.node, []).append(pod)
        requested = self._requested.setdefault(pod.node, {})
        for resource, amount in pod.pod.requests.items():
            requested[resource] = requested.get(resource, 0) + amount


def _sum(requests: Iterable[Mapping[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for each in requests:
        for resource, amount in each.items():
            total[resource] = total.get(resource, 0) + amount
    return total
