"""The rebalancer's decisions (core/rebalance/): its config, streaks with hysteresis, which pods
may move, the fewest that bring a node back, and the limits of a cycle."""

from __future__ import annotations

import itertools
import time
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadext.actors import placement
from loadext.actors.rebalancer import Rebalancer
from loadext.config import ConfigError, parse_config
from loadext.config.schema import Rebalance, Signal
from loadext.core.cluster import Cluster
from loadext.core.herd.usage import Usage
from loadext.core.rebalance.candidates import Holds
from loadext.core.rebalance.candidates import hot_node as hot_node_of
from loadext.core.rebalance.fit import World
from loadext.core.rebalance.fit.model import NodeFacts, PodConstraints
from loadext.core.rebalance.plan import HotNode, Pacing, Step, plan
from loadext.core.rebalance.selection import SYSTEM_CLUSTER_CRITICAL, Candidate, PodFacts, choose, exclusion
from loadext.core.rebalance.streaks import HotStreaks, SignalHeat
from loadext.core.rebalance.targets import Target, targets
from loadext.core.requests import NodeInfo
from loadext.core.snapshot import Sample, SignalValues, Snapshot
from loadext.telemetry import Telemetry
from tests.unit.inside import parts

BASE = "prometheus: {url: http://p:9090}\n"
CPU = Signal("cpu", "q", threshold=0.8)  # evictAt: 0.85 by default


def errors_of(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(BASE + text)
    return [str(e) for e in info.value.errors]


# --- config ----------------------------------------------------------------------------------


def test_rebalance_defaults_and_every_setting() -> None:
    assert parse_config(BASE + "signals: [{name: cpu, query: q, threshold: 0.8}]").rebalance == Rebalance()
    config = parse_config(
        BASE
        + "signals: [{name: cpu, query: q, threshold: 0.8, evictAt: 0.9}]\n"
        + "rebalance: {enabled: true, mode: evict, hotFor: 3, coolFor: 2, overFor: 12, cycle: 30s,"
        + " maxPerNodePerCycle: 2, maxPerCycle: 10, maxUnavailablePerWorkload: 2, minPodAge: 1m,"
        + " excludedNamespaces: [kube-system, infra],"
        + " evictLocalStorage: true, taints: {hot: true, refused: true}}"
    )
    assert config.rebalance == Rebalance(
        enabled=True, mode="evict", hot_for=3, cool_for=2, over_for=12, cycle=30.0,
        max_per_node_per_cycle=2, max_per_cycle=10, max_unavailable_per_workload=2, min_pod_age=60.0,
        excluded_namespaces=("kube-system", "infra"), evict_local_storage=True, taint_hot=True, taint_refused=True,
    )  # fmt: skip
    assert config.signals[0].evict_level == 0.9
    default = parse_config(BASE + "signals: [{name: cpu, query: q, threshold: 0.8}]").signals[0]
    assert default.evict_level == pytest.approx(0.85)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "signals: [{name: cpu, query: q, threshold: 0.8, evictAt: 0.8}]",
            "line 2: signals[cpu].evictAt: must be above the threshold (0.8)",
        ),
        (
            "signals: [{name: cpu, query: q, threshold: null, evictAt: 0.9}]",
            "line 2: signals[cpu].evictAt: needs a threshold",
        ),
        (
            "signals: [{name: cpu, query: q}]\nrebalance: {mode: always}",
            "line 3: rebalance.mode: must be one of dryRun, evict",
        ),
        (
            "signals: [{name: cpu, query: q}]\nrebalance: {maxPerCycle: -1}",
            "line 3: rebalance.maxPerCycle: must be a whole number >= 0",
        ),
        (
            "signals: [{name: cpu, query: q}]\nrebalance: {hotFor: 0}",
            "line 3: rebalance.hotFor: must be a whole number >= 1",
        ),
        (
            "signals: [{name: cpu, query: q}]\nrebalance: {taints: {cold: true}}",
            "line 3: rebalance.taints.cold: unknown key",
        ),
        (
            "signals: [{name: cpu, query: q, threshold: 0.8}]\npools: [{name: b, nodeSelector: {p: b},"
            " signals: [{name: cpu, threshold: 0.9, evictAt: 0.85}]}]",
            "line 3: pools[b].signals[cpu].evictAt: must be above the threshold (0.9)",
        ),
    ],
)
def test_bad_rebalance_settings_name_the_field(text: str, expected: str) -> None:
    errors = errors_of(text)
    assert any(error.startswith(expected) for error in errors), errors


def test_a_pools_evict_at_follows_its_threshold() -> None:
    config = parse_config(
        BASE + "signals: [{name: cpu, query: q, threshold: 0.8, evictAt: 0.86}]\n"
        "pools: [{name: b, nodeSelector: {p: b}, signals: [{name: cpu, threshold: 0.9}]}]"
    )
    assert config.pools[0].signals[0].evict_level == pytest.approx(0.95)  # 0.86 is below 0.9: the default


# --- streaks ---------------------------------------------------------------------------------


def run_rounds(values: list[float | None], hot_for: int = 3, cool_for: int = 2, over_for: int = 0) -> list[bool]:
    """Each round one fresh sample (None: no sample); whether n1's cpu is hot after each."""
    streaks, hot = HotStreaks(), []
    policy = Rebalance(hot_for=hot_for, cool_for=cool_for, over_for=over_for)
    for round_index, value in enumerate(values):
        now = 1000.0 + 15 * round_index
        samples = {} if value is None else {"cpu": Sample(value, now)}
        snapshot = Snapshot({"n1": samples, "n2": {"cpu": Sample(0.1, now)}}, {"cpu": now}, round_index + 1)
        streaks.observe(snapshot, lambda _: (CPU,), 60.0, now, policy)
        hot.append("n1" in streaks.hot_identities())
    return hot


def test_hot_after_hot_for_rounds_at_or_above_evict_at_and_cool_after_cool_for_within_the_threshold() -> None:
    assert run_rounds([0.85, 0.9, 0.86]) == [False, False, True]
    assert run_rounds([0.9, 0.84, 0.9, 0.9]) == [False, False, False, False]  # 0.84 < evictAt resets
    # hot, then between threshold and evictAt stays hot; two rounds within 0.8 cool it
    assert run_rounds([0.9, 0.9, 0.9, 0.82, 0.79, 0.81, 0.7, 0.75]) == [
        False,
        False,
        True,
        True,
        True,
        True,
        True,
        False,
    ]


def test_missing_or_stale_data_never_heats_a_node() -> None:
    assert run_rounds([0.9, None, 0.9, 0.9]) == [False, False, False, False]
    streaks, now = HotStreaks(), 1000.0
    old = Snapshot({"n1": {"cpu": Sample(0.95, now - 120)}}, {"cpu": now}, 1)
    for index in range(5):  # the same old sample every round: stale, never counted
        streaks.observe(old, lambda _: (CPU,), 60.0, now + index, Rebalance(hot_for=1, cool_for=1))
    assert streaks.hot_identities() == set()


def test_the_same_sample_counts_once() -> None:
    streaks, now = HotStreaks(), 1000.0
    snapshot = Snapshot({"n1": {"cpu": Sample(0.95, now)}}, {"cpu": now}, 1)
    for index in range(4):  # a refresh that failed leaves the last sample: not a new refresh
        streaks.observe(snapshot, lambda _: (CPU,), 60.0, now + index, Rebalance(hot_for=2, cool_for=1))
    assert streaks.hot_identities() == set()


def test_over_the_threshold_for_over_for_rounds_is_hot_too() -> None:
    # 0.82 is over the threshold (0.8), under evictAt (0.85): hot after overFor rounds of it
    assert run_rounds([0.82] * 5, over_for=4) == [False, False, False, True, True]
    assert run_rounds([0.82] * 5, over_for=0) == [False] * 5  # 0: evictAt alone heats
    assert run_rounds([0.82, 0.82, 0.8, 0.82, 0.82], over_for=3) == [False] * 5  # at the threshold resets
    assert run_rounds([0.82, 0.9, 0.82, 0.9], over_for=4) == [False, False, False, True]  # both count as over


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), st.floats(0, 1)), max_size=30), st.sampled_from([0, 2, 5]))
def test_hot_exactly_when_the_last_rounds_say_so(values: list[float | None], over_for: int) -> None:
    """A reference model of the hysteresis, round by round: hotFor (3) at or above evictAt,
    or overFor over the threshold, heat; coolFor (2) within the threshold cools."""
    hot, above, over, within, expected = False, 0, 0, 0, []
    for value in values:
        if not hot:
            above = above + 1 if value is not None and value >= 0.85 else 0
            over = over + 1 if value is not None and value > 0.8 else 0
            if above >= 3 or (over_for and over >= over_for):
                hot, above, over = True, 0, 0
        else:
            within = within + 1 if value is not None and value <= 0.8 else 0
            hot, within = (False, 0) if within >= 2 else (True, within)
        expected.append(hot)
    assert run_rounds(values, over_for=over_for) == expected


# --- which pods may move -----------------------------------------------------------------------

NOW = 10_000.0
POLICY = Rebalance(enabled=True)


def pod(name: str = "web-1", **changes: object) -> PodFacts:
    base = PodFacts(
        namespace="shop", name=name, uid=f"uid-{name}", controller_kind="ReplicaSet", workload="shop/Deployment/web",
        priority=0, evict_annotation=None, mirror=False, local_storage=False, created=NOW - 3600, phase="Running",
        deleting=False, requests=Usage(0.5, 2**28), constraints=PodConstraints("shop", name, f"uid-{name}"),
    )  # fmt: skip
    return replace(base, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"deleting": True}, "already being deleted"),
        ({"phase": "Pending"}, "not running (Pending)"),
        ({"mirror": True}, "a static pod"),
        ({"controller_kind": "DaemonSet"}, "a DaemonSet's pod"),
        ({"controller_kind": ""}, "a bare pod: no controller would recreate it"),
        ({"evict_annotation": "false"}, 'annotated loadext.io/evict: "false"'),
        ({"namespace": "kube-system"}, "namespace kube-system is excluded"),
        ({"priority": SYSTEM_CLUSTER_CRITICAL}, "priority 2000000000 is system-critical"),
        ({"local_storage": True}, "uses local storage (emptyDir or hostPath)"),
        ({"created": NOW - 60}, "younger than minPodAge (60s)"),
    ],
)
def test_every_exclusion_says_why(changes: dict[str, object], reason: str) -> None:
    assert exclusion(pod(), POLICY, NOW) is None
    assert exclusion(pod(**changes), POLICY, NOW) == reason


def test_local_storage_moves_when_allowed() -> None:
    assert exclusion(pod(local_storage=True), replace(POLICY, evict_local_storage=True), NOW) is None


def candidate(name: str, cpu: float, priority: int = 0, memory: float = 0.0, workload: str = "") -> Candidate:
    facts = pod(name, priority=priority, workload=workload or f"shop/Deployment/{name}")
    return Candidate(facts, Usage(cpu, memory), {"cpu": cpu, "memory": memory})


def test_the_fewest_pods_that_bring_the_node_within_its_threshold() -> None:
    pods = [candidate("a", 0.05), candidate("b", 0.06), candidate("c", 0.12), candidate("d", 0.2)]
    assert [c.pod.name for c in choose(pods, {"cpu": 0.1}).pods] == ["c"]  # one is enough: the closest cover
    assert [c.pod.name for c in choose(pods, {"cpu": 0.3}).pods] == ["d", "c"]  # the larger cover moves first
    low = [candidate("big", 0.2, priority=100), candidate("small", 0.15, priority=0)]
    assert [c.pod.name for c in choose(low, {"cpu": 0.1}).pods] == ["small"]  # the lowest priority first
    both = choose([candidate("cpu-heavy", 0.3), candidate("mem-heavy", 0.01, memory=0.3)], {"cpu": 0.1, "memory": 0.1})
    assert both.enough and {c.pod.name for c in both.pods} == {"cpu-heavy", "mem-heavy"}
    short = choose([candidate("a", 0.01), candidate("b", 0.02)], {"cpu": 0.5})
    assert not short.enough and [c.pod.name for c in short.pods] == ["b", "a"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=8), st.integers(1, 100))
def test_no_smaller_set_covers(usages: list[int], need: int) -> None:
    pods = [candidate(f"p{i}", u / 100) for i, u in enumerate(usages)]
    chosen = choose(pods, {"cpu": need / 100})
    covers = [
        size for size in range(1, len(pods) + 1) for group in itertools.combinations(usages, size) if sum(group) >= need
    ]
    assert chosen.enough == bool(covers)
    if covers:
        assert len(chosen.pods) == min(covers)
        assert sum(c.shares["cpu"] for c in chosen.pods) >= need / 100 - 1e-9


@pytest.mark.parametrize(
    ("node", "why"),
    [
        (NodeFacts("n1", ready=False), "the node is not Ready: the node lifecycle controller decides what leaves it"),
        (NodeFacts("n1", deleting=True), "the node is being deleted"),
        (None, "the node is gone from the API server"),
    ],
)
def test_no_pod_moves_off_a_node_not_ready_being_deleted_or_gone(node: NodeFacts | None, why: str) -> None:
    heat = SignalHeat("cpu", 0.95, 0.8, 0.85, True, 0, 0, False, NOW - 300)
    usage = {"cpu": {("shop", "web-1"): 1.6}, "memory": {("shop", "web-1"): 2.0**28}}
    found = hot_node_of("n1", node, (heat,), {"cpu": 0.15}, {"cpu": 8.0, "memory": 2.0**33}, [pod()], usage,
                        POLICY, Holds(), NOW)  # fmt: skip
    assert (found.candidates, found.excluded) == ((), (("", why),))
    ready = hot_node_of("n1", NodeFacts("n1"), (heat,), {"cpu": 0.15}, {"cpu": 8.0, "memory": 2.0**33}, [pod()],
                        usage, POLICY, Holds(), NOW)  # fmt: skip
    assert [c.pod.name for c in ready.candidates] == ["web-1"]


# --- one cycle -------------------------------------------------------------------------------


def hot_node(name: str, cpu: float, pods: list[Candidate]) -> HotNode:
    heat = SignalHeat("cpu", cpu, 0.8, 0.85, True, 0, 0, False, NOW - 300)
    return HotNode(name, (heat,), {"cpu": cpu - 0.8}, tuple(pods))


def test_a_cycle_moves_within_its_limits_and_only_where_a_target_fits() -> None:
    nodes = [
        hot_node("n1", 0.93, [candidate("a", 0.2), candidate("b", 0.15)]),
        hot_node("n2", 0.9, [candidate("c", 0.2)]),
        hot_node("n3", 0.88, [candidate("d", 0.1)]),
    ]
    pods_by_workload = {"a": "w/a", "b": "w/b", "c": "w/c", "d": "w/d"}
    for node in nodes:
        object.__setattr__(
            node,
            "candidates",
            tuple(replace(c, pod=replace(c.pod, workload=pods_by_workload[c.pod.name])) for c in node.candidates),
        )
    policy = replace(POLICY, max_per_cycle=2)
    steps = plan(
        nodes,
        policy,
        Pacing(),
        300.0,
        NOW,
        lambda c, source: Target(refused="none here") if c.pod.name == "c" else Target("cool-1"),
    )
    assert [(s.node, s.pod, s.result, s.target) for s in steps] == [
        ("n1", "shop/b", "planned", "cool-1"),  # 0.15 covers 0.13 best; one per node per cycle
        ("n2", "shop/c", "no_target", ""),
        ("n3", "shop/d", "planned", "cool-1"),
    ]
    assert steps[0].reason == "node cpu 93% >= 85% for 5m"
    capped = plan(nodes, replace(policy, max_per_cycle=1), Pacing(), 300.0, NOW, lambda c, s: Target("cool-1"))
    assert [(s.node, s.result) for s in capped] == [("n1", "planned"), ("n2", "rate_limited"), ("n3", "rate_limited")]


def test_a_node_waits_out_the_herd_window_and_a_workload_moves_one_pod_at_a_time() -> None:
    pacing = Pacing()
    pacing.evicted("n1", "shop/Deployment/web", NOW - 100, 300.0)  # 100 s ago, a 300 s window
    web = "shop/Deployment/web"
    nodes = [
        hot_node("n1", 0.95, [candidate("a", 0.2, workload=web)]),
        hot_node("n2", 0.95, [candidate("b", 0.2, workload=web)]),
    ]
    steps = plan(nodes, POLICY, pacing, 300.0, NOW, lambda c, s: Target("cool-1"))
    assert steps[0].result == "rate_limited" and "waiting 200s more" in steps[0].skipped
    assert steps[1].result == "rate_limited" and "shop/Deployment/web has 1 pod(s) moving" in steps[1].skipped
    later = plan(nodes, POLICY, pacing, 300.0, NOW + 250, lambda c, s: Target("cool-1"))
    assert [s.result for s in later] == ["planned", "rate_limited"]  # the same workload: one at a time


# --- the Cluster's side of the port, and the rebalancer's cycle ---------------------------------


def cluster_with(values: dict[str, float], rebalance: str = "{enabled: true, hotFor: 1}") -> Cluster:
    config = parse_config(BASE + f"signals: [{{name: cpu, query: q, threshold: 0.8}}]\nrebalance: {rebalance}")
    cluster = Cluster(config)
    cluster.nodes_listed([NodeInfo(name, (), {"zone": "a"}, {"cpu": "10", "memory": "32Gi"}) for name in values])
    cluster.refreshed([SignalValues("cpu", values, time.time())])
    return cluster


def test_a_target_passes_the_filter_with_the_pod_added() -> None:
    cluster = cluster_with({"hot": 0.95, "warm": 0.7, "cool": 0.3})
    assert cluster.rebalance.heat().hot().keys() == {"hot"}
    assert cluster.rebalance.passing_with(Usage(0.5, 0.0), excluding="hot", planned={}) == ["cool", "warm"]
    # 2 cores of 10 are 20 %: warm (70 %) would end at 90 %, over its 80 % threshold
    assert cluster.rebalance.passing_with(Usage(2.0, 0.0), excluding="hot", planned={}) == ["cool"]
    # and cool (30 %) with 4 cores this cycle already sends there would end at 90 % too
    assert cluster.rebalance.passing_with(Usage(2.0, 0.0), excluding="hot", planned={"cool": Usage(4.0, 0.0)}) == []


def test_a_cycle_never_sends_a_node_more_than_it_can_carry() -> None:
    """Found by the drift benchmark: two hot nodes' pods of 3 cores each both planned onto one
    node at 40 % of 10 cores; the second replacement then landed elsewhere and made that node
    hot. The second move is judged with the first one's usage on its target."""
    cluster = cluster_with({"hot-1": 0.95, "hot-2": 0.95, "roomy": 0.4, "warm": 0.45})
    nodes = [
        NodeFacts(n, allocatable={"cpu": 10_000, "memory": 2**35, "pods": 110})
        for n in ("hot-1", "hot-2", "roomy", "warm")
    ]
    world = World(nodes, [])
    target_for = targets(world, cluster.rebalance.passing_with)
    first, second = candidate("a", 0.3), candidate("b", 0.3)
    first, second = (replace(c, usage=Usage(3.0, 0.0)) for c in (first, second))
    assert target_for(first, "hot-1") == Target("roomy")  # 40 % + 30 %: within 80 %, and the coolest
    assert target_for(second, "hot-2") == Target("warm")  # roomy would carry 100 %; warm 75 %
    third = replace(candidate("c", 0.3), usage=Usage(3.0, 0.0))
    assert target_for(third, "hot-1") == Target(refused="no other node passes loadext's filter with it")


class FakeLease:
    """Held for the first `held` checks, then lost (taken away mid-cycle)."""

    def __init__(self, held: int) -> None:
        self.checks, self.held, self.duration = 0, held, 0.0

    def hold(self) -> bool:
        return True

    def still_held(self) -> bool:
        self.checks += 1
        return self.checks <= self.held


class FakeApi:
    """Records evictions and Events; fails the test on anything else."""

    def __init__(self) -> None:
        self.evicted: list[str] = []

    def create_namespaced_pod_eviction(self, name: str, namespace: str, body: object, **_: object) -> None:
        self.evicted.append(f"{namespace}/{name}")

    def create_namespaced_event(self, namespace: str, event: object, **_: object) -> None:
        pass


async def test_a_lease_lost_mid_cycle_evicts_nothing_more() -> None:
    api = FakeApi()
    cluster = cluster_with({"n": 0.5})
    no_metrics = object()  # the steps are given: no pod usage is read
    rebalancer = Rebalancer(cluster.rebalance, no_metrics, api, Telemetry().rebalance, FakeLease(held=1))  # type: ignore[arg-type]
    drifted = Usage(5.0, 2**30)
    steps = [
        Step("n1", f"shop/p{i}", "node cpu 95% >= 85% for 1m", target="cool", uid=f"u{i}", workload=f"w{i}")
        for i in range(3)
    ]
    steps[0] = replace(steps[0], usage=drifted)
    nothing = placement.ClusterView(World([], [], {}), {}, [])
    done = await rebalancer._carry_out(steps, dry_run=False, window=60.0, cluster=nothing)
    assert api.evicted == ["shop/p0"]
    assert [(d.result, d.skipped) for d in done] == [
        ("evicted", ""),
        ("rate_limited", "the Lease was lost"),
        ("rate_limited", "the Lease was lost"),
    ]
    # the evicted pod's measured usage is its replacement's estimate; the others' owners learn nothing
    learned = parts(cluster).ledger.learned
    assert learned.estimate("w0", Usage(), time.time()).usage == drifted
    assert learned.estimate("w1", Usage(), time.time()).sources == ("factor", "factor")
    assert rebalancer.followup.workloads == {"w0"}  # and its replacement is followed


async def test_no_fresh_metrics_pauses_the_rebalancer_before_any_api_call() -> None:
    config = parse_config(BASE + "signals: [{name: cpu, query: q, threshold: 0.8}]\nrebalance: {enabled: true}")
    telemetry = Telemetry()
    nothing = object()  # an API and a metrics source that have nothing: never called
    rebalancer = Rebalancer(Cluster(config).rebalance, nothing, nothing, telemetry.rebalance)  # type: ignore[arg-type]
    assert await rebalancer.cycle() == [] and rebalancer.status == "paused"
    assert rebalancer.report()["state"] == "paused"
