"""What every strategy declares, and how a node's per-signal desirabilities become its score."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

NEUTRAL = 0.5  # the desirability of a signal without fresh data under `missingData: pass`


class Reading(Protocol):
    """One signal's sample of one node, as core/snapshot.py's Sample holds it."""

    @property
    def value(self) -> float: ...  # 0..1, the current value

    @property
    def mean(self) -> float | None: ...  # over the strategy's window, where it has one

    @property
    def stddev(self) -> float | None: ...


Scorer = Callable[[Reading], float]  # a reading -> its desirability in 0..1
ParamKind = Literal["ratio", "duration", "nonnegative"]  # how the loader reads and checks it


@dataclass(frozen=True)
class Param:
    key: str  # the key under `scoring:` in the config
    default: float  # in the kind's unit: a ratio, seconds, a plain number
    kind: ParamKind
    help: str


@dataclass(frozen=True)
class Strategy:
    """A scoring strategy: its config name, its parameters, its score function (`make` binds
    the parameters) and, where it scores on a window's mean and standard deviation, the
    parameter naming that window (the PromQL sent then carries the statistics: query)."""

    name: str
    params: tuple[Param, ...]
    make: Callable[[Mapping[str, float]], Scorer]
    window: str | None = None

    def query(self, promql: str, params: Mapping[str, float], refresh_interval: float) -> str:
        """The PromQL actually sent for a signal. With a window, the window's mean and standard
        deviation ride in the same query beside the current value (a `loadext_stat` label tells
        them apart, sources/prometheus.py), so it stays one query per signal per refresh."""
        if self.window is None:
            return promql
        window = f"{max(int(params[self.window]), 1)}s:{max(int(refresh_interval), 1)}s"
        stat = 'label_replace({expr}, "loadext_stat", "{name}", "", "")'
        return " or ".join(
            [
                stat.format(expr=f"({promql})", name="current"),
                stat.format(expr=f"avg_over_time(({promql})[{window}])", name="mean"),
                stat.format(expr=f"stddev_over_time(({promql})[{window}])", name="stddev"),
            ]
        )


def combine(parts: list[tuple[float, float]]) -> float:
    """The node's score: 10 x the weighted mean of its (weight, desirability) pairs,
        score = 10 * sum(w_s * f(u_s)) / sum(w_s),
    neutral if no weight (policy.clamp_score rounds and clamps it to the extender's 0..10)."""
    total = sum(weight for weight, _ in parts)
    if total <= 0:
        return 10 * NEUTRAL
    return 10 * sum(weight * value for weight, value in parts) / total
