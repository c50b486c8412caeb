"""The cluster soak's judge (benchmarks/soak/invariants.py) on made-up observations: what proves
the soak's invariants must itself tell a violation from a pass, and from what a run cannot
judge (a window the run did not watch to its end, an alert a later fault set again)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "soak"))
sys.path.insert(0, str(ROOT / "benchmarks" / "placement"))

from invariants import Fault, Limits, check  # noqa: E402
from observe import REPLICAS, Eviction, Observed, Sample  # noqa: E402

LIMITS = Limits(
    cycle=5.0, max_per_cycle=3, max_per_node=1, max_data_age=15.0, hot_for_seconds=8.0, herd_window=20.0,
    threshold=0.8, namespace="soak", reloaded=5.0, rate_window=20.0,
)  # fmt: skip
CLEARS = "a fault clears from /explain and its alert within 60 s of its end"
RSS = "RSS flat after warm-up"


def alert_seen(alert: str, true_from: float, true_until: float, until: float) -> Observed:
    """An alert's expression sampled every 2 s from 0 to `until`, true in [true_from, true_until);
    both replicas ready throughout."""
    seen = Observed()
    for t in range(0, int(until) + 1, 2):
        seen.alerts.append((float(t), {alert: true_from <= t < true_until}))
        seen.readyz.extend((float(t), replica, True) for replica in REPLICAS)
    return seen


def judged(seen: Observed, faults: list[Fault], run_end: float, lives: list[Any] | None = None) -> dict[str, Any]:
    return check(seen, faults, lives or [], {}, LIMITS, run_end)


def test_a_clearing_seen_passes_though_the_run_ends_before_its_window_does() -> None:
    seen = alert_seen("LoadextConfigReloadFailing", 101, 110, until=120)
    result = judged(seen, [Fault(100, 105, "config_invalid")], run_end=120)
    assert result[CLEARS] == {"violations": 0, "examples": [], "not judged": None}


def test_an_alert_still_true_through_its_whole_window_is_a_violation() -> None:
    seen = alert_seen("LoadextConfigReloadFailing", 101, 10**6, until=200)
    result = judged(seen, [Fault(100, 105, "config_invalid")], run_end=200)
    assert result[CLEARS]["violations"] == 1
    assert "LoadextConfigReloadFailing still true" in result[CLEARS]["examples"][0]


def test_an_alert_not_yet_cleared_when_the_run_ends_is_not_judged() -> None:
    seen = alert_seen("LoadextConfigReloadFailing", 101, 10**6, until=130)
    result = judged(seen, [Fault(100, 105, "config_invalid")], run_end=130)
    assert result[CLEARS]["violations"] == 0
    assert result[CLEARS]["not judged"] == "config_invalid (the run ended first); the others were judged"


def test_an_alert_set_again_by_a_later_fault_before_it_could_clear_is_not_judged() -> None:
    seen = alert_seen("LoadextConfigReloadFailing", 101, 10**6, until=400)
    faults = [Fault(100, 105, "config_invalid"), Fault(140, 145, "config_invalid")]
    result = judged(seen, faults, run_end=400)
    assert result[CLEARS]["violations"] == 1  # the second: nothing set it again
    assert "config_invalid at 140" in result[CLEARS]["examples"][0]
    assert "its alert set again by config_invalid" in result[CLEARS]["not judged"]


def test_explain_still_saying_dry_run_after_the_edit_is_undone_is_a_violation() -> None:
    seen = alert_seen("LoadextConfigReloadFailing", -1, -1, until=300)
    for t in range(0, 301, 2):
        seen.explained.append((float(t), REPLICAS[0], {"mode": "dryRun" if 100 <= t < 130 else "evict"}))
        seen.explained.append((float(t), REPLICAS[1], {"mode": "dryRun" if t >= 100 else "evict"}))
    result = judged(seen, [Fault(100, 120, "dry_run")], run_end=300)
    assert result[CLEARS]["examples"] == [f"dry_run at 100: {REPLICAS[1]}'s /explain still says so"]


def incarnation(rss: list[tuple[float, float]], witness: str = "", log_full: float | None = None) -> Any:
    return SimpleNamespace(
        replica=REPLICAS[0], started=0.0, rss=rss, witness=witness, log_full=log_full,
        process=SimpleNamespace(name=f"{REPLICAS[0]}-1"),
    )  # fmt: skip


def rss_growing_until(full_at: float, until: float, then: float = 0.0) -> list[tuple[float, float]]:
    """RSS sampled every 10 s: +2 MB per 10 minutes until `full_at`, then `then` MB per 10 minutes."""
    points = []
    for t in range(0, int(until) + 1, 10):
        mb = 90 + 2 * min(t, full_at) / 600 + then * max(0.0, t - full_at) / 600
        points.append((float(t), mb))
    return points


def test_rss_is_judged_from_the_decision_log_full_not_during_its_warm_up() -> None:
    seen = alert_seen("LoadextDown", -1, -1, until=2400)
    flat_after = incarnation(rss_growing_until(1500, 2400), witness="soak/web-1", log_full=1500)
    assert judged(seen, [], 2400, [flat_after])[RSS] == {
        "violations": 0, "examples": [], "not judged": None,
        "measured": [f"{REPLICAS[0]}-1: +0.00 MB per 10 min over its minutes 25-40"],
    }  # fmt: skip
    growing_after = incarnation(rss_growing_until(1500, 2400, then=1.5), witness="soak/web-1", log_full=1500)
    result = judged(seen, [], 2400, [growing_after])[RSS]
    assert result["violations"] == 1 and "+1.50 MB per 10 min" in result["examples"][0]


def test_rss_of_an_incarnation_whose_decision_log_never_filled_is_not_judged() -> None:
    seen = alert_seen("LoadextDown", -1, -1, until=2400)
    filling = incarnation(rss_growing_until(10**6, 2400), witness="soak/web-1")
    result = judged(seen, [], 2400, [filling])[RSS]
    assert result["violations"] == 0
    assert (
        result["not judged"]
        == "no incarnation lived 10 minutes past its warm-up (5 minutes, and its decision log full)"
    )
    deciding_nothing = incarnation(rss_growing_until(0, 2400, then=0.2))  # no witness: no decision kept
    assert judged(seen, [], 2400, [deciding_nothing])[RSS]["not judged"] is None


READY = "/readyz back within 30 s of a fault's end"


def test_readiness_back_late_is_a_violation_unless_the_api_server_was_down_meanwhile() -> None:
    seen = alert_seen("LoadextDown", -1, -1, until=300)
    seen.readyz = [(t, r, ok and not (r == REPLICAS[1] and 100 <= t < 150)) for t, r, ok in seen.readyz]
    kill = Fault(95, 100, "kill_holder", REPLICAS[1])
    assert judged(seen, [kill], 300)[READY]["examples"] == [f"{REPLICAS[1]} after kill_holder at 100"]
    seen.api_down.append((104.0, 144.0))  # a replica starting lists pods before it is ready
    assert judged(seen, [kill], 300)[READY]["violations"] == 0


SHOWS = "a fault shows in /explain and its alert within 30 s"


def test_a_deleted_node_must_leave_explain_within_30_s_of_its_series_ending() -> None:
    seen = alert_seen("LoadextDown", -1, -1, until=300)
    for t in range(0, 301, 2):  # the first replica, just restarted, explains nothing until 150
        seen.explained.append((float(t), REPLICAS[1], {"nodes": {"soak-02": 1.0}}))
        if t >= 150:
            seen.explained.append((float(t), REPLICAS[0], {"nodes": {"soak-02": 1.0}}))
    deleted = Fault(100, 100, "node_deleted_hot", "soak-01")
    assert judged(seen, [deleted], 300)[SHOWS]["examples"] == [
        f"node_deleted_hot at 100: {REPLICAS[0]}'s /explain never said so"
    ]
    seen.api_down.append((102.0, 140.0))
    assert judged(seen, [deleted], 300)[SHOWS]["violations"] == 0
    seen.api_down, seen.named["soak-01"] = [], 110.0  # kwok served its metrics 10 s past the deletion
    assert judged(seen, [deleted], 300)[SHOWS]["violations"] == 0  # 20 s rate window + 30 s from 110
    seen.named["soak-01"] = 90.0  # its series had ended before
    assert judged(seen, [deleted], 300)[SHOWS]["violations"] == 1
    listed = alert_seen("LoadextDown", -1, -1, until=300)  # both replicas list soak-01 to the end
    listed.explained = [(float(t), r, {"nodes": {"soak-01": 1.0}}) for t in range(0, 301, 2) for r in REPLICAS]
    listed.named["soak-01"] = 290.0  # and its series still name it: its window runs past the run's end
    assert (
        judged(listed, [deleted], 300)[SHOWS]["not judged"]
        == "node_deleted_hot (the run ended first); the others were judged"
    )
    listed.named["soak-01"] = 200.0
    assert judged(listed, [deleted], 300)[SHOWS]["violations"] == 2


NOT_READY = "no eviction from a node not Ready"


def test_an_eviction_is_judged_by_its_nodes_state_nearest_to_it() -> None:
    def sample(t: float, not_ready: set[str]) -> Sample:
        return Sample(t, {"soak-11": 0.9}, frozenset(not_ready), frozenset(), frozenset())

    seen = alert_seen("LoadextDown", -1, -1, until=300)
    seen.evictions["u1"] = Eviction(200.4, "feed-1", "soak", "soak-11", "feed", 0.0, "u1")
    seen.samples = [sample(199.0, {"soak-11"}), sample(200.0, {"soak-11"}), sample(201.0, set())]
    assert judged(seen, [], 300)[NOT_READY]["examples"] == ["feed-1 on soak-11 at 200"]
    # the API server down from 160 until just before the eviction: the last sample before it is stale
    seen.samples = [sample(159.0, {"soak-11"}), sample(201.0, set())]
    assert judged(seen, [], 300)[NOT_READY]["violations"] == 0


STALE = "no eviction on stale metrics"


def test_an_eviction_past_max_data_age_into_a_data_fault_is_a_violation_and_one_after_it_is_not() -> None:
    seen = alert_seen("LoadextDown", -1, -1, until=300)
    seen.stale.append((100.0, 140.0))  # the node signal failing
    seen.evictions["u1"] = Eviction(122.0, "api-1", "soak", "soak-03", "api", 0.0, "u1")
    seen.evictions["u2"] = Eviction(141.0, "api-2", "soak", "soak-03", "api", 0.0, "u2")  # Prometheus answers again
    seen.evictions["u3"] = Eviction(110.0, "api-3", "soak", "soak-04", "api", 0.0, "u3")  # its sample still young
    assert judged(seen, [], 300)[STALE]["examples"] == ["api-1 at 122 (stale 100-140)"]
