"""Each scoring strategy against the formula in its module's docstring (loadext/scoring/), at
the points that pin the curve: idle, the target, full load, and the window statistics; and the
registry: what the loader reads of each strategy, and the query shape it sends."""

from __future__ import annotations

import pytest

from loadext.config import ConfigError, parse_config
from loadext.core.snapshot import Sample
from loadext.scoring import STRATEGIES
from loadext.scoring.base import NEUTRAL, combine
from loadext.scoring.least_loaded import free_share as least_loaded
from loadext.scoring.risk_aware import risk as risk_aware
from loadext.scoring.target_utilization import curve as target_utilization

NOW = 1_000_000.0


def test_least_loaded_is_the_free_share() -> None:
    assert least_loaded(Sample(0.25, NOW)) == 0.75
    assert least_loaded(Sample(0.0, NOW)) == 1.0
    assert least_loaded(Sample(1.0, NOW)) == 0.0


def test_target_utilization_curve() -> None:
    curve = target_utilization(0.6)

    def f(u: float) -> float:
        return curve(Sample(u, NOW))

    assert f(0.6) == pytest.approx(1.0)
    assert f(0.0) == pytest.approx(0.6)
    assert f(1.0) == pytest.approx(0.0)
    assert f(0.3) < f(0.5) < f(0.6) > f(0.7) > f(0.9)
    assert f(0.3) == pytest.approx(0.6 + 0.4 * 0.3 / 0.6)  # the rising branch, t + (1 - t) * u / t
    assert f(0.8) == pytest.approx(0.6 * 0.2 / 0.4)  # the falling branch, t * (1 - u) / (1 - t)


def test_risk_aware_prefers_the_steadier_of_equal_means() -> None:
    risk = risk_aware(1.0)
    steady, noisy = Sample(0.5, NOW, mean=0.5, stddev=0.02), Sample(0.5, NOW, mean=0.5, stddev=0.3)
    assert risk(steady) == pytest.approx(0.48) and risk(noisy) == pytest.approx(0.2)
    assert risk(Sample(0.3, NOW)) == pytest.approx(0.7)  # no window statistics: the current value
    assert risk(Sample(0.5, NOW, mean=0.9, stddev=0.3)) == 0.0  # risk caps at 1
    assert risk_aware(2.0)(noisy) == 0.0  # k scales the stddev: 0.5 + 2 * 0.3 caps at 1


def test_combine_is_the_weighted_mean_on_the_extender_scale() -> None:
    assert combine([(1.0, 0.8), (1.0, 0.4)]) == pytest.approx(6.0)
    assert combine([(3.0, 0.8), (1.0, 0.4)]) == pytest.approx(7.0)
    assert combine([]) == 10 * NEUTRAL  # no weight at all: neutral, neither attracts nor repels
    assert combine([(0.0, 1.0)]) == 10 * NEUTRAL


@pytest.mark.parametrize(
    ("scoring", "sample", "expected"),
    [
        ("", Sample(0.3, NOW), 0.7),
        ("scoring: {strategy: targetUtilization, targetUtilization: 0.5}", Sample(0.5, NOW), 1.0),
        ("scoring: {strategy: riskAware}", Sample(0.5, NOW, mean=0.5, stddev=0.1), None),
    ],
)
def test_the_strategy_follows_the_config(scoring: str, sample: Sample, expected: float | None) -> None:
    config = parse_config(f'prometheus: {{url: "http://p:9090"}}\npreset: kube-prometheus\n{scoring}\n')
    strategy = STRATEGIES[config.scoring.strategy].make(dict(config.scoring.params))
    if expected is None:  # riskAware: the config's k decides, the mean alone does not
        expected = 1.0 - min(1.0, 0.5 + config.scoring.param("riskStdDevs") * 0.1)
    assert strategy(sample) == pytest.approx(expected)


BASE = 'prometheus: {url: "http://p:9090"}\nsignals: [{name: cpu, query: "up", threshold: 0.8}]\n'


def test_the_loader_takes_each_strategys_parameters_and_defaults_from_the_registry() -> None:
    for name, strategy in STRATEGIES.items():
        scoring = parse_config(BASE + f"scoring: {{strategy: {name}}}\n").scoring
        assert scoring.params == tuple((p.key, p.default) for p in strategy.params)
    chosen = parse_config(BASE + "scoring: {strategy: riskAware, riskWindow: 5m, targetUtilization: 0.5}\n")
    assert dict(chosen.scoring.params) == {"riskWindow": 300.0, "riskStdDevs": 1.0}  # the chosen one's only
    with pytest.raises(ConfigError, match=r"scoring\.targetUtilization: must be a ratio"):
        parse_config(BASE + "scoring: {strategy: riskAware, targetUtilization: 7}\n")  # another's, still checked


def test_only_a_windowed_strategy_reshapes_the_query() -> None:
    plain = parse_config(BASE)
    assert plain.query_for(plain.signals[0]) == "up"
    risky = parse_config(BASE + "scoring: {strategy: riskAware, riskWindow: 10m}\nrefreshInterval: 15s\n")
    sent = risky.query_for(risky.signals[0])
    assert 'avg_over_time((up)[600s:15s]), "loadext_stat", "mean"' in sent
    assert 'stddev_over_time((up)[600s:15s]), "loadext_stat", "stddev"' in sent
