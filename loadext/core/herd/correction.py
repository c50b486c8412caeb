"""The herd correction: a node re-judged with the pods in flight on it and the incoming pod.

The same `policy.judge` decides, over the measured ratios plus the estimates as ratios of the
node's allocatable, so a corrected verdict means exactly what a measured one means. The
slow, obvious form (every candidate corrected one by one) is the reference the memo in
memo.py is checked against, in tests/unit/test_herd.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from loadext.config import Config, Pool
from loadext.core.herd.inflight import Placement
from loadext.core.herd.usage import RESOURCES, Usage
from loadext.core.policy import Verdict, burst_verdict, fullness, judge, with_extra_load
from loadext.core.snapshot import Sample

Capacity = Callable[[str], Mapping[str, float] | None]  # node -> allocatable {"cpu": cores, "memory": bytes}


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node as the herd correction sees it: its measured verdict and what it is judged on."""

    name: str
    measured: Verdict
    samples: Mapping[str, Sample] | None
    pool: Pool | None


def corrected(
    candidate: Candidate,
    placed: tuple[Usage, int],
    incoming: Usage,
    capacity: Capacity,
    config: Config,
    now: float,
    own: Placement | None = None,
) -> Verdict:
    """A node re-judged with `placed` (the summed estimate and count of the pods placed on it
    within the window) plus the incoming pod's estimate, as ratios of its allocatable; a node at
    burstCap placements is refused outright. `own` is the incoming pod's expected placement
    from an earlier attempt: it is the pod being judged, so it must not count against its node
    twice."""
    usage, placements = _without_own(candidate.name, placed, own)
    burst_cap = config.herd_guard.burst_cap
    if burst_cap and placements >= burst_cap:
        return burst_verdict(placements, config.herd_guard.window)
    ratios = _extra_ratios(candidate.name, usage + incoming, capacity)
    if not ratios or not candidate.samples:
        return candidate.measured  # nothing to add, or nothing to add it to
    return judge(with_extra_load(candidate.samples, ratios), config, now, candidate.pool)


def corrected_overload(
    candidate: Candidate,
    placed: tuple[Usage, int],
    incoming: Usage,
    capacity: Capacity,
    config: Config,
    own: Placement | None = None,
) -> float | None:
    """How full a node would be with the pods in flight on it and the incoming pod
    (policy.fullness with the estimates added). None without samples. Soft mode passes the
    nodes lowest by it when the herd guard refused every candidate."""
    if not candidate.samples:
        return None
    usage, _ = _without_own(candidate.name, placed, own)
    ratios = _extra_ratios(candidate.name, usage + incoming, capacity) or {}
    return fullness(candidate.samples, config.signals_for(candidate.pool), ratios)


def _without_own(node: str, placed: tuple[Usage, int], own: Placement | None) -> tuple[Usage, int]:
    usage, placements = placed
    if own is not None and node == own.node and placements:
        return usage - own.usage, placements - 1
    return usage, placements


def _extra_ratios(node: str, extra: Usage, capacity: Capacity) -> dict[str, float] | None:
    """`extra` as ratios of the node's allocatable, per resource; None when there is nothing to
    add or nothing to divide by."""
    node_capacity = capacity(node)
    if not node_capacity or (extra.cpu == 0 and extra.memory == 0):
        return None
    return {r: extra.get(r) / node_capacity[r] for r in RESOURCES if node_capacity.get(r)}
