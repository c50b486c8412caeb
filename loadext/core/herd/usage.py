"""What a pod uses, and the rule that estimates it from the pod's spec before anything is measured.

Estimate per resource, Koordinator's rule: max(request, limit x factor), capped at the limit;
a container with neither request nor limit counts a configured BestEffort default. A pod's
total follows Kubernetes' effective-request rule: max(sum over containers, largest init
container) plus overhead. learned.py says when a better source than this rule exists.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from loadext.config import HerdGuard
from loadext.config.units import quantity

RESOURCES = ("cpu", "memory")  # the signals a pod's estimate and measured usage are a share of


@dataclass(frozen=True, slots=True)
class Usage:
    cpu: float = 0.0  # cores
    memory: float = 0.0  # bytes

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.cpu + other.cpu, self.memory + other.memory)

    def __sub__(self, other: Usage) -> Usage:
        return Usage(self.cpu - other.cpu, self.memory - other.memory)

    def scaled(self, share: float) -> Usage:
        return self if share == 1.0 else Usage(self.cpu * share, self.memory * share)

    def get(self, resource: str) -> float:
        return self.cpu if resource == "cpu" else self.memory if resource == "memory" else 0.0


@dataclass(frozen=True)
class EstimateRule:
    cpu_factor: float
    memory_factor: float
    best_effort: Usage

    @classmethod
    def of(cls, guard: HerdGuard) -> EstimateRule:
        """The rule the config sets (its defaults are the schema's, written once there)."""
        return cls(
            guard.cpu_limit_factor, guard.memory_limit_factor, Usage(guard.best_effort_cpu, guard.best_effort_memory)
        )


Resources = Mapping[str, object]  # {"cpu": "500m", "memory": "1Gi"}


def container_estimate(requests: Resources, limits: Resources, rule: EstimateRule) -> Usage:
    values = []
    for resource, factor in (("cpu", rule.cpu_factor), ("memory", rule.memory_factor)):
        request, limit = quantity(requests.get(resource)), quantity(limits.get(resource))
        if request is None and limit is None:
            values.append(rule.best_effort.get(resource))
        elif limit is None:
            values.append(request or 0.0)
        else:
            values.append(min(limit, max(request or 0.0, limit * factor)))
    return Usage(values[0], values[1])


def pod_requests(
    containers: Iterable[tuple[Resources, Resources]],
    init_containers: Iterable[tuple[Resources, Resources]],
    overhead: Resources,
) -> Usage:
    """What the scheduler counts a pod at: its effective requests (the same init-container and
    overhead rule as the estimate, with requests alone)."""
    return pod_estimate(containers, init_containers, overhead, _REQUESTS_ONLY)


def pod_estimate(
    containers: Iterable[tuple[Resources, Resources]],
    init_containers: Iterable[tuple[Resources, Resources]],
    overhead: Resources,
    rule: EstimateRule,
) -> Usage:
    total = Usage()
    for requests, limits in containers:
        total = total + container_estimate(requests, limits, rule)
    for requests, limits in init_containers:
        init = container_estimate(requests, limits, rule)
        total = Usage(max(total.cpu, init.cpu), max(total.memory, init.memory))
    return total + Usage(quantity(overhead.get("cpu")) or 0.0, quantity(overhead.get("memory")) or 0.0)


def allocatable(quantities: Mapping[str, object]) -> dict[str, float]:
    """A Node's status.allocatable as {"cpu": cores, "memory": bytes} (what can be parsed)."""
    out = {}
    for resource in RESOURCES:
        value = quantity(quantities.get(resource))
        if value:
            out[resource] = value
    return out


_REQUESTS_ONLY = EstimateRule(cpu_factor=0.0, memory_factor=0.0, best_effort=Usage())
