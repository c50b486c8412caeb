"""A pod's requests as NodeResourcesFit counts them (component-helpers resource.PodRequests):

    requests = max(sum(containers) + sum(sidecars), max over init containers of
                   (that init container + the sidecars started before it))
               with pod-level requests (spec.resources) in place of cpu and memory where set,
               + overhead

A sidecar is an init container with restartPolicy Always: it runs beside the containers, so it
adds to their sum, and to every init container that starts after it. The scheduler checks cpu,
memory, ephemeral-storage and the scalar resources (extended resources such as
example.com/gpu, hugepages-*, attachable-volumes-*); any other name it ignores, and so do we.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from loadext.config.units import whole_quantity

Amounts = dict[str, int]
NATIVE = ("cpu", "memory", "ephemeral-storage")
POD_LEVEL = ("cpu", "memory")  # what spec.resources may set


def is_counted(resource: str) -> bool:
    """Whether NodeResourcesFit compares this resource (a native or scalar one; "pods" is the
    node's pod count, not a request)."""
    if resource in NATIVE:
        return True
    if resource.startswith(("hugepages-", "attachable-volumes-")):
        return True
    return "/" in resource and not resource.startswith("requests.")  # extended, or kubernetes.io-prefixed


def amounts(quantities: Mapping[str, object] | None) -> Amounts:
    """Quantities in the scheduler's units: millicores for cpu, whole units (rounded up) else."""
    out: Amounts = {}
    for resource, value in (quantities or {}).items():
        if not is_counted(resource):
            continue
        amount = whole_quantity(value, milli=resource == "cpu")
        if amount:
            out[resource] = amount
    return out


def effective_requests(
    containers: Iterable[Mapping[str, object] | None],
    init_containers: Iterable[tuple[Mapping[str, object] | None, bool]],
    overhead: Mapping[str, object] | None = None,
    pod_level: Mapping[str, object] | None = None,
) -> Amounts:
    """`init_containers`: (requests, is a sidecar) in their order."""
    total: Amounts = {}
    for requests in containers:
        _add(total, amounts(requests))
    sidecars: Amounts = {}
    largest_init: Amounts = {}
    for requests, sidecar in init_containers:
        own = amounts(requests)
        if sidecar:
            _add(total, own)
            _add(sidecars, own)
            running = dict(sidecars)
        else:
            running = dict(own)
            _add(running, sidecars)
        for resource, amount in running.items():
            largest_init[resource] = max(largest_init.get(resource, 0), amount)
    for resource, amount in largest_init.items():
        total[resource] = max(total.get(resource, 0), amount)
    for resource, amount in amounts(pod_level).items():
        if resource in POD_LEVEL:
            total[resource] = amount
    _add(total, amounts(overhead))
    return total


def _add(into: Amounts, more: Mapping[str, int]) -> None:
    for resource, amount in more.items():
        into[resource] = into.get(resource, 0) + amount
