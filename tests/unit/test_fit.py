"""The rebalancer's fit (core/rebalance/fit/) and target choice (targets.py), on pods and nodes decoded
from API JSON by the mapping the rebalancer uses (actors/placement.py). The real scheduler's verdicts
on random combinations are in tests/e2e/test_fit_differential.py; these pin each rule by name."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from loadext.actors import placement
from loadext.actors.wire import ScheduledNode, ScheduledPod
from loadext.config.units import whole_quantity
from loadext.core.herd.usage import Usage
from loadext.core.rebalance.fit import Judge, World, unverifiable
from loadext.core.rebalance.fit.model import NodeFacts, PlacedPod, PodConstraints
from loadext.core.rebalance.fit.resources import effective_requests
from loadext.core.rebalance.selection import Candidate
from loadext.core.rebalance.targets import targets

ZONE = "topology.kubernetes.io/zone"


def node(name: str, zone: str = "a", cpu: str = "4", pods: str = "110", **spec: Any) -> NodeFacts:
    wire = {
        "metadata": {"name": name, "labels": {ZONE: zone, "kubernetes.io/hostname": name}},
        "spec": spec,
        "status": {
            "allocatable": {"cpu": cpu, "memory": "8Gi", "pods": pods},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    return placement.node_facts(msgspec.json.decode(msgspec.json.encode(wire), type=ScheduledNode))


def pod(name: str = "web-1", cpu: str = "1", labels: dict[str, str] | None = None, **spec: Any) -> PodConstraints:
    wire = {
        "metadata": {"name": name, "namespace": "shop", "uid": f"uid-{name}", "labels": labels or {"app": "web"}},
        "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}], **spec},
    }
    decoded = msgspec.json.decode(msgspec.json.encode(wire), type=ScheduledPod)
    return placement.pod_facts(decoded).constraints


def zone_affinity(*zones: str) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": ZONE, "operator": "In", "values": list(zones)}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def test_the_new_users_cluster_cordoned_tainted_and_zoned() -> None:
    """The issue's cluster: a cordoned node, a NoSchedule-tainted one, and a pod whose affinity allows
    only zone b; the old rebalancer planned moves onto the cordoned node."""
    world = World(
        [
            node("hot-b", zone="b"),
            node("cordoned", zone="b", unschedulable=True),
            node("tainted", zone="b", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
            node("cool-a", zone="a"),
        ],
        [],
    )
    zoned = Judge(pod(affinity=zone_affinity("b")), world)
    assert zoned.refusal("cordoned") == "the node is cordoned (unschedulable)"
    assert zoned.refusal("tainted") == "untolerated taint dedicated=gpu:NoSchedule"
    assert zoned.refusal("cool-a") == "the node does not match the pod's nodeSelector or required node affinity"
    assert zoned.refusal("hot-b") is None
    tolerant = pod(tolerations=[{"operator": "Exists"}])  # tolerates every taint, the cordon's too
    assert Judge(tolerant, world).refusal("cordoned") is None
    assert Judge(tolerant, world).refusal("tainted") is None


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}, True),
        ({"key": "dedicated", "value": "gpu"}, True),  # empty operator is Equal, empty effect every effect
        ({"key": "dedicated", "operator": "Exists"}, True),
        ({"operator": "Exists", "effect": "NoSchedule"}, True),
        ({"key": "dedicated", "value": "cpu"}, False),
        ({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}, False),
    ],
)
def test_tolerations_match_as_the_api_does(toleration: dict[str, str], tolerated: bool) -> None:
    world = World([node("n", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])], [])
    assert (Judge(pod(tolerations=[toleration]), world).refusal("n") is None) is tolerated


def test_prefer_no_schedule_taints_do_not_refuse() -> None:
    world = World([node("n", taints=[{"key": "loadext.io/hot", "effect": "PreferNoSchedule"}])], [])
    assert Judge(pod(), world).refusal("n") is None


@pytest.mark.parametrize(
    ("operator", "values", "fits"),
    [("Gt", ["4"], True), ("Gt", ["5"], False), ("Lt", ["6"], True), ("Lt", [" 6"], False), ("Gt", ["1_0"], False)],
)
def test_gt_and_lt_compare_integers_as_go_parses_them(operator: str, values: list[str], fits: bool) -> None:
    n = node("n")
    n = NodeFacts(n.name, {**n.labels, "tier": "5"}, allocatable=n.allocatable)
    term = {"matchExpressions": [{"key": "tier", "operator": operator, "values": values}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    assert (Judge(pod(affinity=affinity), World([n], [])).refusal("n") is None) is fits


def test_requests_count_sidecars_init_containers_and_pod_level_resources() -> None:
    # sidecar 500m runs beside the app's 1; the 2-core init runs after the sidecar started: 2.5
    init = [({"cpu": "500m"}, True), ({"cpu": "2"}, False)]
    assert effective_requests([{"cpu": "1"}], init)["cpu"] == 2500
    assert effective_requests([{"cpu": "1"}], [({"cpu": "500m"}, True)])["cpu"] == 1500
    assert effective_requests([{"cpu": "1", "memory": "1Gi"}], [], {"cpu": "100m"}, {"cpu": "3"}) == {
        "cpu": 3100,
        "memory": 2**30,
    }
    assert whole_quantity("100m", milli=True) == 100 and whole_quantity("0.1", milli=True) == 100
    assert whole_quantity("1.5Ki") == 1536 and whole_quantity("1m") == 1  # rounded up, as Value() does


def test_resources_and_pod_count_against_the_pods_already_there() -> None:
    placed = [PlacedPod(pod("a", cpu="2500m"), "n"), PlacedPod(pod("b", cpu="1"), "small")]
    world = World([node("n", cpu="4"), node("small", cpu="4", pods="1")], placed)
    assert Judge(pod(cpu="1500m"), world).refusal("n") is None  # 2.5 + 1.5 = 4: exactly full fits
    assert Judge(pod(cpu="1501m"), world).refusal("n") == "insufficient cpu"
    assert Judge(pod(cpu="10m"), world).refusal("small") == "too many pods"


def test_host_ports_conflict_on_protocol_port_and_address() -> None:
    def ports(port: int, protocol: str = "TCP", ip: str = "") -> list[dict[str, Any]]:
        entry: dict[str, Any] = {"containerPort": port, "hostPort": port, "protocol": protocol}
        if ip:
            entry["hostIP"] = ip
        return [{"name": "app", "ports": [entry]}]

    taken = PlacedPod(pod("a", containers=ports(8080, ip="127.0.0.5")), "n")
    world = World([node("n")], [taken])
    assert Judge(pod(containers=ports(8080)), world).refusal("n") == "host port TCP/8080 is taken"  # 0.0.0.0: all
    assert Judge(pod(containers=ports(8080, ip="127.0.0.6")), world).refusal("n") is None
    assert Judge(pod(containers=ports(8080, "UDP")), world).refusal("n") is None


def spread(key: str, max_skew: int = 1, **more: Any) -> list[dict[str, Any]]:
    constraint = {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule"}
    return [{**constraint, "labelSelector": {"matchLabels": {"app": "web"}}, **more}]


def test_topology_spread_counts_domains_as_the_scheduler_does() -> None:
    nodes = [node("a1", "a"), node("a2", "a"), node("b1", "b")]
    world = World(nodes, [PlacedPod(pod("w1"), "a1"), PlacedPod(pod("w2"), "a2")])
    spreading = pod("new", topologySpreadConstraints=spread(ZONE))
    assert Judge(spreading, world).refusal("b1") is None
    assert Judge(spreading, world).refusal("a1") == f"topology spread on {ZONE} would exceed maxSkew 1"
    # minDomains 3 with two zones: the fewest counts as 0, so even b (0 + 1 - 0) is within 1
    assert Judge(pod("m", topologySpreadConstraints=spread(ZONE, minDomains=3)), world).refusal("b1") is None
    # terminating pods are not counted for spread
    leaving = World(nodes, [PlacedPod(pod("w1"), "a1", terminating=True), PlacedPod(pod("w2"), "a2", True)])
    assert Judge(spreading, leaving).refusal("a1") is None
    # the pod being moved is not counted where it leaves: its replacement meets a (1) and b (0)
    split = World(nodes, [PlacedPod(pod("w1"), "b1"), PlacedPod(pod("w2"), "a1")])
    moved = pod("w1", topologySpreadConstraints=spread(ZONE))
    assert Judge(moved, split).refusal("a2") is None  # as if it stayed: a 1 + 1 - b 1
    assert Judge(moved, split, leaving="b1").refusal("a2") == f"topology spread on {ZONE} would exceed maxSkew 1"


def test_pod_affinity_and_anti_affinity_in_the_nodes_domain() -> None:
    world = World([node("a1", "a"), node("b1", "b")], [PlacedPod(pod("db", labels={"app": "db"}), "a1")])
    term = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": ZONE}
    near_db = pod(affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}})
    assert Judge(near_db, world).refusal("a1") is None
    assert Judge(near_db, world).refusal("b1") == f"required pod affinity: no matching pod in the node's {ZONE}"
    away = pod(affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}})
    assert Judge(away, world).refusal("a1") == f"required pod anti-affinity: a matching pod runs in the node's {ZONE}"
    web_term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": ZONE}
    repelling = pod(
        "db2",
        labels={"app": "db"},
        affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [web_term]}},
    )
    guarded = World(world.nodes.values(), [PlacedPod(repelling, "b1")])
    assert Judge(pod(), guarded).refusal("b1") == f"a pod in the node's {ZONE}=b has anti-affinity to this pod"
    # the first pod of a self-affine group goes where its topology key exists
    self_term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": ZONE}
    first = pod(affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [self_term]}})
    assert Judge(first, World([node("a1", "a")], [])).refusal("a1") is None


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        (
            {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]},
            "a volume of kind persistentVolumeClaim",
        ),
        ({"volumes": [{"name": "scratch", "ephemeral": {}}]}, "a volume of kind ephemeral"),
        ({"resourceClaims": [{"name": "gpu"}]}, "resource claims (dynamic resource allocation)"),
        ({"schedulingGates": [{"name": "wait"}]}, "scheduling gates"),
        ({"tolerations": [{"key": "k", "operator": "Gt", "value": "1"}]}, "toleration operator 'Gt'"),
    ],
)
def test_what_the_fit_cannot_judge_is_named(spec: dict[str, Any], reason: str) -> None:
    assert unverifiable(pod(**spec)) == f"cannot verify {reason}"
    assert unverifiable(pod(volumes=[{"name": "c", "configMap": {"name": "c"}}])) is None


def candidate(constraints: PodConstraints) -> Candidate:
    facts = placement.pod_facts(
        msgspec.json.decode(
            msgspec.json.encode({"metadata": {"name": constraints.name, "namespace": "shop", "uid": constraints.uid}}),
            type=ScheduledPod,
        )
    )
    return Candidate(facts.__class__(**{**facts.__dict__, "constraints": constraints}), Usage(1.0, 0.0), {"cpu": 0.25})


def test_targets_take_the_first_node_the_scheduler_accepts_and_keep_its_room() -> None:
    world = World([node("hot"), node("cordoned", unschedulable=True), node("cool", cpu="2")], [])
    target_for = targets(world, lambda usage, source, planned: ["cordoned", "cool"])
    assert target_for(candidate(pod("p1", cpu="1500m")), "hot").node == "cool"
    second = target_for(candidate(pod("p2", cpu="1")), "hot")  # cool's room went to p1
    assert second.node == ""
    assert second.refused == (
        "the scheduler would refuse each node loadext passes "
        "(the node is cordoned (unschedulable): cordoned; insufficient cpu: cool)"
    )
    assert targets(world, lambda usage, source, planned: [])(candidate(pod("p3")), "hot").refused == (
        "no other node passes loadext's filter with it"
    )
