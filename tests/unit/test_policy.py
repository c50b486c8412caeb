"""The decision functions, on hand-made snapshots: thresholds, weights, strategies, missing data,
staleness and the failure policy."""

from __future__ import annotations

import math

import pytest

from loadext.config import Config, parse_config
from loadext.core.policy import build_table, judge
from loadext.core.snapshot import Sample, Snapshot

NOW = 1_000_000.0


def config(extra: str = "", cpu_weight: float = 1, memory_weight: float = 1) -> Config:
    return parse_config(f"""
prometheus: {{url: "http://p:9090"}}
maxDataAge: 60s
signals:
  - {{name: cpu, query: c, threshold: 0.8, weight: {cpu_weight}}}
  - {{name: memory, query: m, threshold: 0.9, weight: {memory_weight}}}
{extra}""")


def samples(cpu: float | None, memory: float | None, age: float = 1.0) -> dict[str, Sample]:
    out = {}
    if cpu is not None:
        out["cpu"] = Sample(cpu, NOW - age)
    if memory is not None:
        out["memory"] = Sample(memory, NOW - age)
    return out


def test_threshold_rejects_with_a_stable_reason() -> None:
    verdict = judge(samples(0.81, 0.95), config(), NOW)
    assert not verdict.passed
    assert verdict.reason == "loadext: cpu above 80%, memory above 90%"
    assert verdict.rejected_by == (("cpu", "threshold"), ("memory", "threshold"))
    assert judge(samples(0.80, 0.90), config(), NOW).passed  # at the threshold is not above it


def test_least_loaded_weights() -> None:
    assert judge(samples(0.2, 0.6), config(), NOW).score == 6  # 10 * (0.8 + 0.4) / 2
    assert judge(samples(0.2, 0.6), config(cpu_weight=3), NOW).score == 7  # 10 * (2.4 + 0.4) / 4
    assert judge(samples(0.2, 0.6), config(memory_weight=0), NOW).score == 8


def test_target_utilization_is_chosen_by_config() -> None:
    strategy = config("scoring: {strategy: targetUtilization, targetUtilization: 0.5}")
    near, idle = judge(samples(0.5, 0.5), strategy, NOW), judge(samples(0.05, 0.05), strategy, NOW)
    assert near.score == 10 and idle.score < near.score


def test_missing_data_pass_is_neutral_and_reject_rejects() -> None:
    assert judge(samples(None, None), config(), NOW).score == 5
    assert judge(samples(0.0, None), config(), NOW).score == 8  # 10 * (1 + 0.5) / 2
    verdict = judge(samples(0.1, None), config("missingData: reject"), NOW)
    assert not verdict.passed and verdict.reason == "loadext: no fresh memory data"


def test_stale_samples_count_as_missing() -> None:
    stale = samples(0.99, 0.1, age=61)
    assert judge(stale, config(), NOW).passed  # the 99 % is too old to trust
    assert not judge(stale, config("missingData: reject"), NOW).passed


def snapshot(last_success_age: float) -> Snapshot:
    return Snapshot(
        by_identity={"hot": samples(0.95, 0.5), "cool": samples(0.1, 0.2)},
        last_success={"cpu": NOW - last_success_age, "memory": NOW - last_success_age},
        version=1,
    )


def test_table_from_snapshot() -> None:
    table = build_table(snapshot(1), config(), NOW)
    assert not table.degraded
    assert not table.verdict("hot").passed and table.verdict("cool").passed
    assert table.verdict("unknown").score == 5 and table.verdict(None).passed
    assert table.valid_until == pytest.approx(NOW - 1 + 60)  # when the samples age out


@pytest.mark.parametrize(("policy", "passes"), [("open", True), ("closed", False)])
def test_no_fresh_data_at_all_applies_the_failure_policy(policy: str, passes: bool) -> None:
    table = build_table(snapshot(120), config(f"failurePolicy: {policy}"), NOW)
    assert table.degraded and table.valid_until == math.inf
    for node in ("hot", "cool", "unknown"):
        verdict = table.verdict(node)
        assert verdict.passed is passes
        assert verdict.score == (5 if passes else 0)
    if not passes:
        assert table.verdict("cool").reason == "loadext: no fresh metrics (failurePolicy closed)"


@pytest.mark.parametrize("missing", ["pass", "reject"])
def test_the_tables_reasons_and_scores_are_its_verdicts_parts(missing: str) -> None:
    """filter and prioritize read reason_of and score_of instead of the verdicts: the same
    answer for every node, and for a node without series (no_data)."""
    snapshot = Snapshot(
        by_identity={
            "cool": samples(0.2, 0.3),
            "hot": samples(0.95, 0.3),
            "full": samples(0.3, 0.97),
            "both": samples(0.99, 0.99),
        },
        last_success={"cpu": NOW, "memory": NOW},
        version=1,
    )
    table = build_table(snapshot, config(f"missingData: {missing}"), NOW)
    for identity in [*snapshot.by_identity, "unknown"]:
        verdict = table.by_identity[identity]
        assert table.reason_of[identity] == ("" if verdict.passed else verdict.reason)
        assert table.score_of[identity] == verdict.score
    assert table.reason_of["hot"] and not table.reason_of["cool"]
    assert bool(table.reason_of["unknown"]) is (missing == "reject")


def test_the_table_holds_one_verdict_object_per_distinct_verdict() -> None:
    """5000 nodes share a few dozen distinct verdicts; the decision log keeps the verdicts of
    decisions made on older tables, so those must be shared objects, not one per node."""
    loads = [0.1, 0.5, 0.95]  # two scores and a refusal
    by_identity = {f"n{i}": samples(loads[i % 3], 0.5) for i in range(300)}
    table = build_table(Snapshot(by_identity, {"cpu": NOW, "memory": NOW}, 1), config(), NOW)
    verdicts = list(table.by_identity.values())
    assert len({id(v) for v in verdicts}) == len(set(verdicts)) == 3
    assert [v.passed for v in verdicts[:3]] == [True, True, False]
