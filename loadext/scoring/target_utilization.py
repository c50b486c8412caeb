"""targetUtilization: Trimaran's TargetLoadPacking curve, on a 0..1 scale with target t:

    f(u) = t + (1 - t) * u / t     for u <= t   (rises from t at idle to 1 at the target)
    f(u) = t * (1 - u) / (1 - t)   for u >  t   (falls to 0 at full load)

Prefers nodes near the target, so the cluster packs towards it instead of spreading thin.
"""

from __future__ import annotations

from loadext.scoring.base import Param, Reading, Scorer, Strategy


def curve(target: float) -> Scorer:
    def score(reading: Reading) -> float:
        u = reading.value
        if u <= target:
            return target + (1.0 - target) * u / target
        return target * (1.0 - u) / (1.0 - target) if target < 1.0 else 1.0

    return score


TARGET = Param("targetUtilization", 0.6, "ratio", "the utilisation the curve peaks at")
STRATEGY = Strategy("targetUtilization", (TARGET,), lambda params: curve(params[TARGET.key]))
