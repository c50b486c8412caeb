"""Decisions: a snapshot and a config in, one verdict per node out. No I/O, no clock reads.

Verdicts depend only on a node's samples, the config and the time, so they are computed once
per (snapshot, config) into a DecisionTable and every request is a dictionary lookup. The table
knows when its earliest sample crosses maxDataAge and must be rebuilt.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from loadext.config import Config, Pool, Signal
from loadext.core.snapshot import Sample, Snapshot, fresh
from loadext.scoring import STRATEGIES
from loadext.scoring.base import NEUTRAL, combine

MAX_EXTENDER_PRIORITY = 10  # k8s.io/kube-scheduler/extender/v1: scores are 0..10


def clamp_score(score: float) -> int:
    """The scheduler adds Score x weight x 10 unchecked, so the range is ours to enforce."""
    return max(0, min(MAX_EXTENDER_PRIORITY, round(score)))


NEUTRAL_SCORE = clamp_score(10 * NEUTRAL)
_V = TypeVar("_V")


@dataclass(frozen=True, slots=True)
class Verdict:
    passed: bool
    score: int
    reason: str  # short and stable: the scheduler aggregates identical messages per pod
    rejected_by: tuple[tuple[str, str], ...] = ()  # (signal, cause) for metrics and explain


@dataclass(frozen=True, slots=True)
class NodeState:
    """One node as loadext sees it now: for explain and the per-node metrics."""

    node: str
    identity: str | None
    samples: Mapping[str, Sample]
    verdict: Verdict
    pool: str | None = None  # the pool whose overrides applied; None: the top-level signals


class ByIdentity(dict[str, _V]):
    """identity -> a verdict or one of its parts; a node without series reads as `no_data`'s,
    so a whole request is one C-level map() over its names."""

    def __init__(self, values: Mapping[str, _V], no_data: _V) -> None:
        super().__init__(values)
        self.no_data = no_data

    def __missing__(self, identity: str) -> _V:
        return self.no_data


VerdictMap = ByIdentity[Verdict]


@dataclass(frozen=True)
class DecisionTable:
    by_identity: VerdictMap
    degraded: bool
    valid_until: float  # wall time at which some sample ages out
    snapshot_version: int
    config_hash: str
    causes: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)  # reason -> rejected_by
    pools_version: int = 0  # which node-label state the pool assignment came from
    pools: Mapping[str, Pool] = field(default_factory=dict)  # identity -> pool
    # The verdicts' parts a request reads, by identity: filter maps names to reasons ("" when
    # passed) and prioritize to scores without touching 500 Verdict objects scattered in
    # memory, where each pass over them cost 10-20 us live (benchmarks/ceiling.py).
    reason_of: ByIdentity[str] = field(init=False)
    score_of: ByIdentity[int] = field(init=False)

    def __post_init__(self) -> None:
        verdicts, no_data = self.by_identity, self.by_identity.no_data
        reasons = {identity: _refusal(v) for identity, v in verdicts.items()}
        object.__setattr__(self, "reason_of", ByIdentity(reasons, _refusal(no_data)))
        object.__setattr__(self, "score_of", ByIdentity({i: v.score for i, v in verdicts.items()}, no_data.score))

    @property
    def no_data(self) -> Verdict:
        return self.by_identity.no_data

    def verdict(self, identity: str | None) -> Verdict:
        return self.by_identity.no_data if identity is None else self.by_identity[identity]

    def verdicts(self, identities: list[str]) -> list[Verdict]:
        """The verdicts on measured load alone, in the order of `identities`."""
        return list(map(self.by_identity.__getitem__, identities))


def _refusal(verdict: Verdict) -> str:
    """The reason a node is refused for, or "" when it passes (a refusal always says why)."""
    return "" if verdict.passed else verdict.reason


def is_degraded(snapshot: Snapshot, config: Config, now: float) -> bool:
    """No signal has had a successful query within maxDataAge: Prometheus is gone for us."""
    return not any(fresh(t, now, config.max_data_age) for t in snapshot.last_success.values())


def judge(samples: Mapping[str, Sample], config: Config, now: float, pool: Pool | None = None) -> Verdict:
    """One node: reject if any thresholded signal is above it, else score by the strategy.
    A node in a pool is judged by that pool's thresholds and weights."""
    strategy = STRATEGIES[config.scoring.strategy].make(dict(config.scoring.params))
    over: list[str] = []
    rejected_by: list[tuple[str, str]] = []
    parts: list[tuple[float, float]] = []
    for signal in config.signals_for(pool):
        sample = samples.get(signal.name)
        if sample is None or not sample.fresh(now, config.max_data_age):
            if config.missing_data == "reject":
                over.append(f"no fresh {signal.name} data")
                rejected_by.append((signal.name, "missing"))
            parts.append((signal.weight, NEUTRAL))
            continue
        if signal.over(sample.value):
            over.append(f"{signal.name} above {_percent(signal.threshold or 0.0)}")
            rejected_by.append((signal.name, "threshold"))
        parts.append((signal.weight, strategy(sample)))
    if over:
        return Verdict(False, 0, "loadext: " + ", ".join(over), tuple(rejected_by))
    return Verdict(True, clamp_score(combine(parts)), "")


def fullness(
    samples: Mapping[str, Sample], signals: Iterable[Signal], extra: Mapping[str, float] | None = None
) -> float | None:
    """How far a node is towards its thresholds: its worst (value + extra) / threshold over the
    `signals` that have a threshold and a sample, None where none has both. Over 1 is over a
    threshold, and it is not capped, so nodes past their thresholds still rank. The one measure
    of "how full" behind soft mode (overload, herd.correction.corrected_overload) and explain."""
    worst: float | None = None
    for signal in signals:
        sample = samples.get(signal.name)
        if not signal.threshold or sample is None:
            continue
        value = (sample.value + (extra.get(signal.name, 0.0) if extra else 0.0)) / signal.threshold
        worst = value if worst is None or value > worst else worst
    return worst


def overload(samples: Mapping[str, Sample], config: Config, pool: Pool | None, verdict: Verdict) -> float | None:
    """How far over its thresholds a refused node is (its fullness over the signals refusing
    it), or None when it is refused for a reason soft mode never overrides: a `hard: true`
    signal, missing data, degraded mode or the burst cap."""
    if verdict.passed or not verdict.rejected_by:
        return None
    signals = {s.name: s for s in config.signals_for(pool)}
    refusing = []
    for name, cause in verdict.rejected_by:
        signal = signals.get(name)
        if cause != "threshold" or signal is None or signal.hard or not signal.threshold or name not in samples:
            return None
        refusing.append(signal)
    return fullness(samples, refusing)


def soft_choice(
    measured: Sequence[Verdict],
    overloads: Sequence[float | None],
    herd_overloads: Sequence[float | None],
    herd_soft: bool,
    threshold_soft: bool,
) -> tuple[list[int], str]:
    """The candidates to pass when loadext would refuse every one of them, and why; ([], "")
    keeps the refusal. A load-aware filter should make placement better, never impossible:

    - "herd" (herdGuard.soft): of the nodes under every threshold by measurement, refused only
      for the pods in flight (estimates, burst cap), the least full counting those pods and the
      incoming one (herd.corrected_overload, ties together); all of them where that is unknown.
      Passing them all let the scheduler's own scores pick hot nodes (the kwok closed loop):
      one at a time, each call's pick counts in flight for the next, so a burst fills the
      nodes from the emptiest up.
    - "threshold" (filterMode: soft): nodes refused only for being over soft thresholds; the
      least hot pass (the lowest worst value/threshold, ties together).
    """
    if herd_soft:
        chosen = [i for i, verdict in enumerate(measured) if verdict.passed]
        if chosen:
            return _least(chosen, herd_overloads) or chosen, "herd"
    if threshold_soft:
        least = _least(range(len(overloads)), overloads)
        if least:
            return least, "threshold"
    return [], ""


def _least(indices: Iterable[int], overloads: Sequence[float | None]) -> list[int]:
    """Of `indices`, those whose overload is known and lowest (ties together)."""
    known = [(h, i) for i in indices if (h := overloads[i]) is not None]
    if not known:
        return []
    lowest = min(h for h, _ in known)
    return [i for h, i in known if h == lowest]


def _percent(ratio: float) -> str:
    return f"{ratio * 100:g}%"


def degraded_verdict(config: Config) -> Verdict:
    if config.failure_policy == "closed":
        return Verdict(
            False,
            0,
            "loadext: no fresh metrics (failurePolicy closed)",
            tuple((s.name, "degraded") for s in config.signals),
        )
    return Verdict(True, NEUTRAL_SCORE, "")


def build_table(
    snapshot: Snapshot, config: Config, now: float, pools: Mapping[str, Pool] | None = None, pools_version: int = 0
) -> DecisionTable:
    """`pools`: identity -> the pool its node belongs to (nodes in no pool are absent)."""
    pools = pools or {}
    if is_degraded(snapshot, config, now):
        verdict = degraded_verdict(config)
        # The next successful refresh publishes a new snapshot, which rebuilds the table anyway.
        return DecisionTable(
            VerdictMap({}, verdict), True, math.inf, snapshot.version, config.hash, _causes([verdict]), pools_version
        )
    expiries = [t + config.max_data_age for t in snapshot.last_success.values()]
    by_identity: dict[str, Verdict] = {}
    # One object per distinct verdict (a few dozen at most: scores 0..10 and the refusals), not
    # one per node: requests read fewer scattered objects, and the decision log, which keeps
    # the verdicts of decisions made on older tables, keeps a list of shared ones.
    alike: dict[Verdict, Verdict] = {}
    for identity, samples in snapshot.by_identity.items():
        verdict = judge(samples, config, now, pools.get(identity))
        by_identity[identity] = alike.setdefault(verdict, verdict)
        expiries.extend(
            s.timestamp + config.max_data_age for s in samples.values() if s.timestamp + config.max_data_age > now
        )
    no_data = judge({}, config, now)
    return DecisionTable(
        by_identity=VerdictMap(by_identity, no_data),
        degraded=False,
        valid_until=min((e for e in expiries if e > now), default=math.inf),
        snapshot_version=snapshot.version,
        config_hash=config.hash,
        causes=_causes([no_data, *by_identity.values()]),
        pools_version=pools_version,
        pools=pools,
    )


def burst_verdict(placements: int, window: float) -> Verdict:
    return Verdict(
        False, 0, f"loadext: {placements} pods placed here in the last {window:.0f}s", (("placements", "burst"),)
    )


def with_extra_load(samples: Mapping[str, Sample], extra: Mapping[str, float]) -> dict[str, Sample]:
    """Measured ratios plus the ratios of pods not yet visible in the metrics (herd guard)."""
    return {
        signal: Sample(min(1.0, sample.value + extra.get(signal, 0.0)), sample.timestamp, sample.mean, sample.stddev)
        for signal, sample in samples.items()
    }


def _causes(verdicts: list[Verdict]) -> dict[str, tuple[tuple[str, str], ...]]:
    """Reason -> (signal, cause) pairs. Requests tally reason strings, whose hashes Python
    caches, and expand them here: counting per node stays at C speed."""
    return {v.reason: v.rejected_by for v in verdicts if not v.passed}
