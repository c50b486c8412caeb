"""loadext's taints (core/rebalance/taints.py): which nodes carry them, and the DaemonSet pods the
refused taint keeps off a node, judged as the DaemonSet controller judges whether a daemon pod
should run there (NodeShouldRunDaemonPod)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from kubernetes import client

from harness.prometheus import free_port
from loadext.actors import placement
from loadext.actors.taints import NodeTaintKeeper
from loadext.config.schema import Rebalance
from loadext.core.rebalance.fit import World
from loadext.core.rebalance.fit.model import NodeFacts, NodeSelectorTerm, PodConstraints, Requirement, Taint, Toleration
from loadext.core.rebalance.taints import HOT_TAINT, REFUSED_TAINT, DaemonSet, held_back, wanted
from loadext.telemetry import Telemetry

REFUSED = Taint("loadext.io/refused", "", "NoSchedule")


def node(name: str, *taints: Taint, **labels: str) -> NodeFacts:
    return NodeFacts(name, labels, taints)


def daemon(name: str, **spec: Any) -> DaemonSet:
    return DaemonSet("agents", name, PodConstraints("agents", f"{name}-template", **spec))


def test_the_taints_follow_the_options() -> None:
    both = Rebalance(enabled=True, taint_hot=True, taint_refused=True)
    assert wanted({"a"}, {"a", "b"}, both) == {
        "a": frozenset({HOT_TAINT, REFUSED_TAINT}),
        "b": frozenset({REFUSED_TAINT}),
    }
    assert wanted({"a"}, {"b"}, replace(both, taint_refused=False)) == {"a": frozenset({HOT_TAINT})}
    assert wanted({"a"}, {"b"}, replace(both, enabled=False)) == {}


def test_a_daemon_pod_the_refused_taint_alone_keeps_off_a_node_is_held_back() -> None:
    nodes = [node("hot", REFUSED, zone="a"), node("cool", zone="a")]
    assert held_back([daemon("agent")], nodes, running=set()) == {"hot": ["agents/agent"]}
    # one already running there stays (NoSchedule evicts nothing): nothing is held back
    assert held_back([daemon("agent")], nodes, running={("agents/agent", "hot")}) == {}


def test_a_daemon_set_that_would_not_run_there_anyway_is_not_counted() -> None:
    cordoned_elsewhere = node("hot", REFUSED, Taint("dedicated", "gpu", "NoSchedule"), zone="a")
    assert held_back([daemon("agent")], [cordoned_elsewhere], set()) == {}  # another taint keeps it out too
    zoned = daemon("zoned", node_selector={"zone": "b"})
    affine = daemon("affine", node_terms=(NodeSelectorTerm((Requirement("zone", "In", ("b",)),), ()),))
    assert held_back([zoned, affine], [node("hot", REFUSED, zone="a")], set()) == {}
    tolerant = daemon("tolerant", tolerations=(Toleration("", "Exists", "", ""),))
    assert held_back([tolerant], [node("hot", REFUSED)], set()) == {}
    pinned = replace(daemon("pinned"), node_name="other")
    assert held_back([pinned], [node("hot", REFUSED)], set()) == {}


def test_the_controllers_own_tolerations_count() -> None:
    """A cordoned or memory-pressured node still runs daemon pods (the controller adds those
    tolerations), so there the refused taint is what keeps the pod out."""
    cordon = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
    pressure = Taint("node.kubernetes.io/memory-pressure", "", "NoSchedule")
    network = Taint("node.kubernetes.io/network-unavailable", "", "NoSchedule")
    assert held_back([daemon("agent")], [node("hot", REFUSED, cordon, pressure)], set()) == {"hot": ["agents/agent"]}
    assert held_back([daemon("agent")], [node("hot", REFUSED, network)], set()) == {}
    host = replace(daemon("host"), host_network=True)
    assert held_back([host], [node("hot", REFUSED, network)], set()) == {"hot": ["agents/host"]}


def test_a_failed_daemon_set_read_keeps_the_last_count_and_says_why(caplog: pytest.LogCaptureFixture) -> None:
    """The count is for the SRE: an API that cannot list DaemonSets (an older RBAC, an outage)
    leaves the last count in place and is logged; it never raises into the cycle."""
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{free_port()}"  # nothing listens: refused at once
    metrics = Telemetry().rebalance
    keeper = NodeTaintKeeper(client.CoreV1Api(client.ApiClient(configuration)), metrics)
    keeper._tainted = {"hot": frozenset({REFUSED_TAINT})}  # as a sync would have left it
    keeper.held = {"hot": ["agents/agent"]}
    nothing = placement.ClusterView(World([node("hot", REFUSED)], [], {}), {}, [])
    keeper.count_held_back(nothing)
    assert keeper.held == {"hot": ["agents/agent"]}
    assert "daemon pods held back by the refused taint not counted: listing daemonsets failed" in caplog.text
    keeper.count_held_back(None)  # no cycle read: nothing is held back that loadext knows of
    assert keeper.held == {} and metrics.daemon_pods_held_back._value.get() == 0
