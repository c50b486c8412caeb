"""Replay: what a candidate config would have decided over metrics history.

An SRE changing a threshold wants to see the effect before applying it. Replay runs each
config's signal queries as range queries (the same PromQL, one per signal), rebuilds the
snapshot at every step, and runs the same pure policy as the live path, so the counts are what
loadext would have answered at those times (without in-flight pods or pool labels, which
history does not hold).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loadext.config import Config
from loadext.core.policy import build_table
from loadext.core.snapshot import Sample, Snapshot

Series = dict[float, dict[str, dict[str, Sample]]]  # time -> identity -> signal -> sample


@dataclass(frozen=True)
class Step:
    time: float
    refused: dict[str, int]  # signal -> nodes refused because of it
    refused_nodes: int
    nodes: int
    top: str | None  # the best-scored node
    mean_score: float


def evaluate(history: Series, config: Config) -> list[Step]:
    """The live policy at each step of the history."""
    steps = []
    for version, stamp in enumerate(sorted(history), start=1):
        by_identity: Mapping[str, Mapping[str, Sample]] = history[stamp]
        snapshot = Snapshot(by_identity, {s.name: stamp for s in config.signals}, version)
        table = build_table(snapshot, config, stamp)
        refused: dict[str, int] = {s.name: 0 for s in config.signals}
        scores = {}
        for identity in by_identity:
            verdict = table.verdict(identity)
            for signal, _cause in verdict.rejected_by:
                refused[signal] = refused.get(signal, 0) + 1
            if verdict.passed:
                scores[identity] = verdict.score
        steps.append(
            Step(
                time=stamp,
                refused=refused,
                refused_nodes=len(by_identity) - len(scores),
                nodes=len(by_identity),
                top=max(sorted(scores), key=lambda n: scores[n]) if scores else None,
                mean_score=statistics.fmean(scores.values()) if scores else 0.0,
            )
        )
    return steps


def compare(current: list[Step], candidate: list[Step]) -> dict[str, Any]:
    """Totals side by side: node-steps refused per signal, and how often the favourite agrees."""
    both = {s.time: s for s in current}
    agree = sum(1 for s in candidate if s.time in both and both[s.time].top == s.top)
    return {
        "steps": len(candidate),
        "current": {"refused": _total(current), "refusedNodeSteps": sum(s.refused_nodes for s in current)},
        "candidate": {"refused": _total(candidate), "refusedNodeSteps": sum(s.refused_nodes for s in candidate)},
        "sameFavourite": agree / len(candidate) if candidate else 0.0,
    }


def _total(steps: list[Step]) -> dict[str, int]:
    total: dict[str, int] = {}
    for step in steps:
        for signal, count in step.refused.items():
            total[signal] = total.get(signal, 0) + count
    return total
