"""The Ingest port (core/ingest.py) as a source sees it: every event, and what the verbs then
decide. Each test holds the cluster only as an `Ingest`, as sources/ do."""

from __future__ import annotations

import time

from harness.config import stored_config
from loadext.app import App
from loadext.config import parse_config
from loadext.core.ingest import Ingest
from loadext.core.requests import BoundPod, ExtenderArgs, NodeInfo, PodRef
from loadext.core.snapshot import SignalValues

SPEC = (({"cpu": "2"}, {"cpu": "2"}),)  # 2 cores each, counted as 2 of the node's 8
INCOMING = PodRef("default", "web-9", "uid-9", ("ReplicaSet",), SPEC)


def guarded_app() -> tuple[App, Ingest]:
    app = App(stored_config(herdGuard={"enabled": True, "window": "5m", "soft": False}))
    return app, app.cluster


def passes(app: App, node: str) -> bool:
    return app.extender.verdicts(ExtenderArgs(INCOMING, [node]))[0].passed


def test_a_round_nodes_and_pods_through_the_port_decide_the_verbs() -> None:
    app, ingest = guarded_app()
    now = ingest.clock()
    round_ = ingest.refreshed([SignalValues("cpu", {"n1": 0.5}, now), SignalValues("memory", {"n1": 0.3}, now)])
    assert round_.table.verdict("n1").passed and app.cluster.ready
    ingest.nodes_listed([NodeInfo("n1", ("10.0.0.1",), {}, {"cpu": "8", "memory": "32Gi"})])
    assert passes(app, "n1")  # 50 % + the incoming 25 %: under 80 %
    placed = BoundPod(PodRef("default", "web-1", "uid-1", ("ReplicaSet",), SPEC), "n1", time.time())
    ingest.pod_bound(placed)
    assert not passes(app, "n1")  # + 25 % in flight: over
    ingest.pod_gone("uid-1")
    assert passes(app, "n1")
    ingest.pods_listed([placed])
    assert not passes(app, "n1")
    ingest.pods_unwatched()  # the pod watch stopped: what it told is forgotten
    assert passes(app, "n1")
    ingest.node_seen(NodeInfo("n1", ("10.0.0.1",), {}, {"cpu": "4", "memory": "32Gi"}))
    assert not passes(app, "n1")  # the incoming 2 cores are half of 4 now
    ingest.node_gone("n1")
    assert passes(app, "n1")  # no allocatable: nothing to add the estimate to


def test_signal_health_and_a_config_applied_through_the_port() -> None:
    app, ingest = guarded_app()
    explained, verbs = app.cluster.explained, app.cluster.verbs
    ingest.signal_failed("cpu", "timeout", "read timed out")
    assert explained.signal_report("cpu")["failingFor"] is not None
    ingest.signal_succeeded("cpu")
    assert explained.signal_report("cpu")["failingFor"] is None
    addresses = {"n1": ("10.0.0.1",)}
    assert verbs.identities_of(["n1"], addresses, verbs.table()) == ["n1"]
    by_address = stored_config(nodeIdentity={"label": "instance", "kind": "address"}, filterMode="soft")
    ingest.config_applied(parse_config(by_address))
    assert ingest.config.filter_mode == "soft"
    assert verbs.identities_of(["n1"], addresses, verbs.table()) == ["10.0.0.1"]  # nodes named by their IPs now
    assert app.extender.needs_node_details  # so http decodes the IPs


def test_stranded_pods_reopen_through_the_port() -> None:
    app, ingest = guarded_app()
    now = ingest.clock()
    ingest.refreshed([SignalValues("cpu", {"n1": 0.95}, now), SignalValues("memory", {"n1": 0.3}, now)])
    assert not app.extender.filter(ExtenderArgs(INCOMING, ["n1"])).passed  # stranded
    assert ingest.reopened_node() is None
    ingest.refreshed([SignalValues("cpu", {"n1": 0.4}, now), SignalValues("memory", {"n1": 0.3}, now)])
    assert ingest.reopened_node() == "n1"
    assert ingest.stranded_nudged() == 1


def test_the_mapping_is_counted_again_when_nodes_or_series_come_and_go_not_when_values_change() -> None:
    _, ingest = guarded_app()
    ingest.nodes_named(["n1", "n2"])

    def counted(cpu: dict[str, float]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        now = ingest.clock()
        ingest.publish_round(ingest.round_builder()([SignalValues("cpu", cpu, now)]))
        report = ingest.mapping_counter()()["cpu"]
        return report.unmapped_nodes, report.unmatched_series

    assert counted({"n1": 0.5}) == (("n2",), ())
    assert counted({"n1": 0.6}) == (("n2",), ())  # values changed: the same count
    assert counted({"n1": 0.6, "n2": 0.1, "n3": 0.2}) == ((), ("n3",))
    assert counted({"n1": 0.6, "n3": 0.2}) == (("n2",), ("n3",))  # n2's series gone
    ingest.nodes_named(["n3"])
    assert counted({"n1": 0.7, "n3": 0.2}) == (("n2",), ())  # n3 known now


def test_a_round_in_which_no_query_answered_builds_nothing_again() -> None:
    _, ingest = guarded_app()
    now = ingest.clock()
    answered = ingest.round_builder()([SignalValues("cpu", {"n1": 0.5}, now), SignalValues("memory", {"n1": 0.3}, now)])
    ingest.publish_round(answered)
    failed = ingest.round_builder()([])  # every query failed: the values stay until maxDataAge
    assert failed.snapshot is answered.snapshot and failed.table is answered.table
    again = ingest.round_builder()([SignalValues("cpu", {"n1": 0.5}, now)])  # one answered: a new round
    assert again.snapshot.version > answered.snapshot.version
