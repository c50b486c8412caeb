"""riskAware: like Trimaran's LoadVariationRiskBalancing, a node's risk is its mean
utilisation over a window plus k standard deviations, so of two nodes with the same average
the steadier wins:

    f = 1 - min(1, mean + k * stddev)

(k = 1 covers about 84 % of a normal distribution's values, k = 2 about 98 %.) Without the
window's statistics for a node, the current value stands in for the mean. The statistics come
with the signal's own query (Strategy.query), over `riskWindow`.
"""

from __future__ import annotations

from loadext.scoring.base import Param, Reading, Scorer, Strategy


def risk(k: float) -> Scorer:
    def score(reading: Reading) -> float:
        if reading.mean is None:
            return 1.0 - reading.value
        return 1.0 - min(1.0, reading.mean + k * (reading.stddev or 0.0))

    return score


WINDOW = Param("riskWindow", 600.0, "duration", "the window of the mean and standard deviation")
STDDEVS = Param("riskStdDevs", 1.0, "nonnegative", "how many standard deviations count as risk")
STRATEGY = Strategy("riskAware", (WINDOW, STDDEVS), lambda params: risk(params[STDDEVS.key]), window=WINDOW.key)
