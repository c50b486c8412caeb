"""Where a moved pod's replacement may go: the first node, best score first, that passes loadext's
own filter with the pod's measured usage added (and the pods in flight there) and that
kube-scheduler's default filters would accept for it (fit/). A planned move takes its room in the
cycle's World, so the next move is judged with it taken.

When no node qualifies, the refusal says why for the first few, in the scheduler's words where
the scheduler is the one refusing: an operator reads "cordoned" or "untolerated taint", not a
bare "no target".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from loadext.core.herd.usage import Usage
from loadext.core.rebalance.fit import Judge, World
from loadext.core.rebalance.selection import Candidate

SHOWN = 3  # refused nodes named in a no-target reason


@dataclass(frozen=True)
class Target:
    node: str = ""  # "" when there is none
    refused: str = ""  # why there is none


TargetFor = Callable[[Candidate, str], Target]
Passing = Callable[[Usage, str], list[str]]  # (usage, source) -> nodes passing loadext's filter, best first


def targets(world: World, passing: Passing) -> TargetFor:
    def target_for(candidate: Candidate, source: str) -> Target:
        pod = candidate.pod.constraints
        judge = Judge(pod, world, leaving=source)
        refused: list[str] = []
        nodes = passing(candidate.usage, source)
        for node in nodes:
            why = judge.refusal(node)
            if why is None:
                world.move(pod, source, node)
                return Target(node)
            refused.append(f"{node}: {why}")
        if not nodes:
            return Target(refused="no other node passes loadext's filter with it")
        more = f"; +{len(refused) - SHOWN} more" if len(refused) > SHOWN else ""
        return Target(
            refused=f"the scheduler would refuse each node loadext passes ({'; '.join(refused[:SHOWN])}{more})"
        )

    return target_for
