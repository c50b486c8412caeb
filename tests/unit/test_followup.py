"""The stop rule (core/rebalance/followup.py): each eviction's replacement is followed until it
is placed on a node within the thresholds for a herd window, or its workload is paused."""

from __future__ import annotations

from loadext.core.rebalance.followup import Followup, Move, Outcome, Replica

WEB = "shop/Deployment/web"
PENDING_FOR, WINDOW, PAUSE_FOR = 120.0, 30.0, 1800.0


def moved(followup: Followup, at: float = 0.0, target: str = "cool") -> Move:
    move = Move(WEB, "shop/web-a", "uid-a", "hot", target, at, frozenset({"uid-a", "uid-b"}))
    followup.moved(move)
    return move


def pods(*pods: tuple[str, str]) -> list[Replica]:
    """(uid, node) of the workload's pods now; the old ones are always there."""
    return [Replica("uid-b", "shop/web-b", WEB, "n9"), *(Replica(uid, f"shop/{uid}", WEB, node) for uid, node in pods)]


def observe(
    followup: Followup, replicas: list[Replica], now: float, refused: frozenset[str] = frozenset()
) -> list[Outcome]:
    return followup.observe(replicas, refused, now, PENDING_FOR, WINDOW, PAUSE_FOR)


def test_a_replacement_placed_on_a_node_within_the_thresholds_settles_after_the_window() -> None:
    followup = Followup()
    moved(followup)
    assert observe(followup, pods(), 5.0) == []  # not created yet
    assert observe(followup, pods(("uid-c", "")), 6.0) == []  # Pending, within the bound
    assert observe(followup, pods(("uid-c", "cool")), 10.0) == []  # bound: the window starts now
    assert observe(followup, pods(("uid-c", "cool")), 39.0) == []
    [outcome] = observe(followup, pods(("uid-c", "cool")), 40.0)
    assert (outcome.outcome, outcome.replacement, outcome.node) == ("on_target", "shop/uid-c", "cool")
    assert not followup.following and followup.paused(40.0) == {}


def test_one_placed_elsewhere_is_told_apart() -> None:
    followup = Followup()
    moved(followup)
    observe(followup, pods(("uid-c", "other")), 10.0)
    [outcome] = observe(followup, pods(("uid-c", "other")), 40.0)
    assert outcome.outcome == "elsewhere" and "(planned: cool)" in outcome.detail


def test_a_replacement_pending_past_the_bound_pauses_its_workload() -> None:
    followup = Followup()
    moved(followup, at=100.0)
    assert observe(followup, pods(("uid-c", "")), 219.0) == []
    [outcome] = observe(followup, pods(("uid-c", "")), 220.0)
    assert outcome.outcome == "pending" and outcome.replacement_uid == "uid-c"
    assert outcome.detail == "the replacement of shop/web-a, shop/uid-c, stayed Pending for 120s"
    pause = followup.paused(220.0)[WEB]
    assert pause.until == 220.0 + PAUSE_FOR and pause.why == outcome.detail
    assert followup.paused(220.0 + PAUSE_FOR) == {}  # the pause ends


def test_no_replacement_at_all_counts_as_pending() -> None:
    followup = Followup()
    moved(followup)
    [outcome] = observe(followup, pods(), 120.0)
    assert outcome.outcome == "pending" and outcome.replacement == ""
    assert outcome.detail == "no replacement of shop/web-a appeared within 120s of its eviction"


def test_a_replacement_whose_node_goes_over_a_threshold_within_the_window_pauses_it() -> None:
    followup = Followup()
    moved(followup)
    observe(followup, pods(("uid-c", "cool")), 10.0)
    [outcome] = observe(followup, pods(("uid-c", "cool")), 25.0, refused=frozenset({"cool"}))
    assert outcome.outcome == "hot" and outcome.node == "cool"
    assert WEB in followup.paused(25.0)


def test_after_the_window_its_node_is_someone_elses_business() -> None:
    followup = Followup()
    moved(followup)
    observe(followup, pods(("uid-c", "cool")), 10.0)
    [outcome] = observe(followup, pods(("uid-c", "cool")), 40.0, refused=frozenset({"cool"}))
    assert outcome.outcome == "hot"  # the cycle that ends the window still sees it
    followup = Followup()
    moved(followup)
    observe(followup, pods(("uid-c", "cool")), 10.0)
    observe(followup, pods(("uid-c", "cool")), 40.0)
    assert observe(followup, pods(("uid-c", "cool")), 50.0, refused=frozenset({"cool"})) == []


def test_two_moves_of_one_workload_claim_a_replacement_each() -> None:
    followup = Followup()
    moved(followup, at=0.0)
    second = Move(WEB, "shop/web-b", "uid-b", "hot2", "cool2", 1.0, frozenset({"uid-b"}))
    followup.moved(second)
    observe(followup, pods(("uid-c", "cool"), ("uid-d", "")), 10.0)
    settled = observe(followup, pods(("uid-c", "cool"), ("uid-d", "")), 121.0)
    by_pod = {o.move.pod: (o.outcome, o.replacement) for o in settled}
    assert by_pod == {"shop/web-b": ("pending", "shop/uid-d"), "shop/web-a": ("on_target", "shop/uid-c")}


def test_a_replacement_that_goes_is_replaced_by_the_next() -> None:
    followup = Followup()
    moved(followup)
    observe(followup, pods(("uid-c", "cool")), 10.0)
    observe(followup, pods(("uid-d", "")), 20.0)  # uid-c deleted; its successor is followed
    [outcome] = observe(followup, pods(("uid-d", "")), 120.0)
    assert outcome.outcome == "pending" and outcome.replacement == "shop/uid-d"


def test_a_replica_that_stops_acting_forgets_its_moves_and_pauses() -> None:
    followup = Followup()
    moved(followup)
    observe(followup, pods(("uid-c", "")), 120.0)
    moved(followup, at=130.0)
    assert followup.following and WEB in followup.paused(130.0)
    followup.forget()
    assert not followup.following and followup.paused(130.0) == {}
