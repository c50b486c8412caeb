"""Where a moved pod's replacement may go: the first node, best score first, that passes loadext's
own filter with the pod's measured usage added (and the pods in flight there) and that
kube-scheduler's default filters would accept for it (fit/). A planned move takes its room in the
cycle's World and its usage on its target, so the next move is judged with both taken: two
replacements whose sum a node cannot carry are never both sent there.

When no node qualifies, the refusal says why, each reason with the nodes it refused, in the
scheduler's words: an operator reads "cordoned" or "untolerated taint", not a bare "no target".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from loadext.core.herd.usage import Usage
from loadext.core.rebalance.fit import Judge, World
from loadext.core.rebalance.selection import Candidate

SHOWN = 3  # nodes named per reason in a no-target reason


@dataclass(frozen=True)
class Target:
    node: str = ""  # "" when there is none
    refused: str = ""  # why there is none


TargetFor = Callable[[Candidate, str], Target]
# (usage, source, usage this cycle already sends per node) -> nodes passing loadext's filter, best first
Passing = Callable[[Usage, str, Mapping[str, Usage]], list[str]]


def targets(world: World, passing: Passing) -> TargetFor:
    planned: dict[str, Usage] = {}  # node -> the usage of the replacements this cycle sends there

    def target_for(candidate: Candidate, source: str) -> Target:
        pod = candidate.pod.constraints
        judge = Judge(pod, world, leaving=source)
        refused: dict[str, list[str]] = {}  # reason -> nodes, in loadext's order
        nodes = passing(candidate.usage, source, planned)
        for node in nodes:
            why = judge.refusal(node)
            if why is None:
                world.move(pod, source, node)
                planned[node] = planned.get(node, Usage()) + candidate.usage
                return Target(node)
            refused.setdefault(why, []).append(node)
        if not nodes:
            return Target(refused="no other node passes loadext's filter with it")
        return Target(refused=f"the scheduler would refuse each node loadext passes ({_grouped(refused)})")

    return target_for


def _grouped(refused: dict[str, list[str]]) -> str:
    """`reason: node, node, +N more` per reason, the most common first."""
    parts = []
    for why, nodes in sorted(refused.items(), key=lambda item: -len(item[1])):
        more = f", +{len(nodes) - SHOWN} more" if len(nodes) > SHOWN else ""
        parts.append(f"{why}: {', '.join(nodes[:SHOWN])}{more}")
    return "; ".join(parts)
