"""Scoring strategies: how one signal's sample (utilisation u, 0..1) becomes a desirability in 0..1.

The node's score is 10 x the weighted mean of the per-signal desirabilities,
    score = 10 * sum(w_s * f(u_s)) / sum(w_s),
rounded and clamped to the extender range 0..10. A signal without fresh data for the node
contributes NEUTRAL (0.5) under `missingData: pass`, so missing data neither attracts pods
(the "idle" trap) nor repels them.
"""

from __future__ import annotations

from collections.abc import Callable

from loadext.config import Scoring
from loadext.core.snapshot import Sample

NEUTRAL = 0.5

Strategy = Callable[[Sample], float]


def least_loaded(sample: Sample) -> float:
    """f(u) = 1 - u: the free share. Spreads load to where there is real headroom."""
    return 1.0 - sample.value


def risk_aware(k: float) -> Strategy:
    """Like Trimaran's LoadVariationRiskBalancing: a node's risk is its mean utilisation over the
    window plus k standard deviations, so of two nodes with the same average the steadier wins:

        f = 1 - min(1, mean + k * stddev)

    (k = 1 covers about 84 % of a normal distribution's values, k = 2 about 98 %.) Without the
    window's statistics for a node, the current value stands in for the mean."""

    def score(sample: Sample) -> float:
        if sample.mean is None:
            return 1.0 - sample.value
        return 1.0 - min(1.0, sample.mean + k * (sample.stddev or 0.0))

    return score


def target_utilization(target: float) -> Strategy:
    """Trimaran's TargetLoadPacking curve, on a 0..1 scale with target t:

        f(u) = t + (1 - t) * u / t     for u <= t   (rises from t at idle to 1 at the target)
        f(u) = t * (1 - u) / (1 - t)   for u >  t   (falls to 0 at full load)

    Prefers nodes near the target, so the cluster packs towards it instead of spreading thin.
    """

    def score(sample: Sample) -> float:
        u = sample.value
        if u <= target:
            return target + (1.0 - target) * u / target
        return target * (1.0 - u) / (1.0 - target) if target < 1.0 else 1.0

    return score


def strategy_for(scoring: Scoring) -> Strategy:
    if scoring.strategy == "targetUtilization":
        return target_utilization(scoring.target_utilization)
    if scoring.strategy == "riskAware":
        return risk_aware(scoring.risk_k)
    return least_loaded


def combine(parts: list[tuple[float, float]]) -> float:
    """Weighted mean of (weight, desirability) pairs on the 0..10 scale; neutral if no weight."""
    total = sum(weight for weight, _ in parts)
    if total <= 0:
        return 10 * NEUTRAL
    return 10 * sum(weight * value for weight, value in parts) / total
