"""What the verbs answer: typed results that http/ encodes and telemetry.py counts."""

from __future__ import annotations

from collections import Counter as Tally
from dataclasses import dataclass
from typing import Any

from loadext.core.requests import Victims

Rejections = tuple[tuple[str, str, int], ...]  # (signal, cause, nodes refused)


@dataclass(frozen=True, slots=True)
class FilterResult:
    names: list[str]
    passed: list[str]  # the names that pass, in the request's order
    flags: list[bool] | None  # passed or not, aligned with names; None when every name passed
    rejected: dict[str, str]  # node -> reason
    unresolvable: bool  # rejectedNodes: unresolvable (FailedAndUnresolvableNodes), else FailedNodes
    rejections: Rejections
    soft: str = ""  # "" or why soft mode passed nodes every verdict refused (herd, threshold)

    def summary(self) -> dict[str, Any]:
        summary: dict[str, Any] = {
            "nodes": len(self.names),
            "passed": len(self.passed),
            "rejected": dict(Tally(self.rejected.values())),
        }
        if self.soft:
            summary["soft"] = self.soft
        return summary


@dataclass(frozen=True, slots=True)
class PrioritizeResult:
    names: list[str]
    scores: list[int]  # 0..10, aligned with names
    best: int | None  # index of a top score (ties: see top_pick); None for no candidates

    def summary(self) -> dict[str, Any]:
        summary: dict[str, Any] = {"nodes": len(self.names)}
        if self.best is not None:
            summary["best"] = {"node": self.names[self.best], "score": self.scores[self.best]}
        return summary


@dataclass(frozen=True, slots=True)
class PreemptResult:
    candidates: int
    kept: dict[str, Victims]
    rejections: Rejections

    def summary(self) -> dict[str, Any]:
        return {"nodes": self.candidates, "passed": len(self.kept)}
