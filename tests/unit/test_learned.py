"""Learned usage estimates (core/herd/learned.py): the source order, owner history and its bounds, and
how a measured pod changes its node's in-flight correction."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest

from harness.inprocess import HERD_GUARDED_CONFIG, client_for, post, stored_app
from harness.wire import fixture_bytes
from loadext.config.promql import settle_time
from loadext.core.herd.learned import Estimate, UsageHistory, owner_of
from loadext.core.herd.usage import Usage
from loadext.core.requests import BoundPod, ExtenderArgs, PodRef
from loadext.sources.prometheus import decode_pod_vector
from loadext.sources.query_error import QueryError
from tests.unit.inside import parts

FACTOR = Usage(1.7, 2**30)


def test_owner_is_the_controller_and_a_deployments_replicasets_are_one_owner() -> None:
    refs = [("Node", "n1", False), ("ReplicaSet", "web-7d9f", True)]
    assert owner_of("shop", refs, "7d9f") == "shop/Deployment/web"  # a rollout keeps its history
    assert owner_of("shop", refs) == "shop/ReplicaSet/web-7d9f"  # no hash label: the ReplicaSet itself
    assert owner_of("shop", [("StatefulSet", "db", False)]) == "shop/StatefulSet/db"  # no controller flag: the first
    assert owner_of("shop", []) == ""


def test_each_resource_takes_the_best_source_there_is() -> None:
    history = UsageHistory()
    assert history.estimate("ns/Job/j", FACTOR, 0.0).sources == ("factor", "factor")
    cpu = {("ns", "j-0"): 0.2, ("ns", "j-1"): 0.3, ("ns", "j-2"): 0.9}
    for pod in cpu:
        history.pods.add(f"uid-{pod[1]}", pod, "ns/Job/j", 0.0)
    history.publish({"cpu": cpu}, settled_before=1.0)  # no memory query
    new = history.estimate("ns/Job/j", FACTOR, 0.0)
    assert new.usage == Usage(0.3, FACTOR.memory) and new.sources == ("owner", "factor")  # the median
    assert history.measured(("ns", "j-2"), "cpu") == 0.9 and history.measured(("ns", "j-2"), "memory") is None
    stranger = history.estimate("ns/Job/other", FACTOR, 0.0)
    assert stranger.usage == FACTOR and stranger.sources == ("factor", "factor")


def test_a_moved_pods_usage_is_its_owners_estimate_for_the_herd_window() -> None:
    """The rebalancer evicted a pod that drifted to 5 cores: its replacement is that pod again,
    whatever the owner's history (learned before the drift) says, until the window ends."""
    history = UsageHistory()
    history.pods.add("uid-w-0", ("ns", "w-0"), "ns/ReplicaSet/w", 0.0)
    history.publish({"cpu": {("ns", "w-0"): 0.4}}, settled_before=1.0)
    drifted = Usage(5.0, 2**30)
    history.moved("ns/ReplicaSet/w", drifted, now=100.0, until=130.0)
    assert history.estimate("ns/ReplicaSet/w", FACTOR, 110.0) == Estimate(drifted, ("moved", "moved"))
    assert history.estimate("ns/ReplicaSet/other", FACTOR, 110.0).sources == ("factor", "factor")
    after = history.estimate("ns/ReplicaSet/w", FACTOR, 130.0)  # the window is over: the history again
    assert after.usage.cpu == 0.4 and after.sources == ("owner", "factor")
    history.moved("ns/ReplicaSet/a", drifted, now=200.0, until=230.0)
    history.moved("ns/ReplicaSet/b", drifted, now=240.0, until=270.0)
    assert list(history._moved) == ["ns/ReplicaSet/b"]  # an expired one does not stay


def test_history_stays_bounded_however_many_pods_and_owners() -> None:
    history = UsageHistory()
    pods = {("ns", f"big-{i}"): float(i) for i in range(1000)}
    for pod in pods:
        history.pods.add(f"uid-{pod[1]}", pod, "ns/ReplicaSet/big", 0.0)
    history.publish({"cpu": pods}, settled_before=1.0)
    kept = history._by_owner["ns/ReplicaSet/big"]
    assert len(kept) == UsageHistory.PODS_PER_OWNER  # the most recent pods, not a thousand
    for i in range(UsageHistory.OWNERS + 100):
        history.pods.add(f"uid-solo-{i}", ("ns", f"solo-{i}"), f"ns/Job/solo-{i}", 0.0)
    history.publish({"cpu": {("ns", f"solo-{i}"): 0.1 for i in range(UsageHistory.OWNERS + 100)}}, settled_before=1.0)
    assert len(history) == UsageHistory.OWNERS


def test_an_owner_with_more_pods_than_kept_keeps_every_resource_of_its_newest() -> None:
    """Regression, seen in the 300-pod placement benchmark: history was bounded per resource
    pass, so the memory pass evicted the CPU values of an owner with over 32 pods."""
    history = UsageHistory()
    count = UsageHistory.PODS_PER_OWNER + 20
    pods = [("ns", f"web-{i}") for i in range(count)]
    for i, pod in enumerate(pods):
        history.pods.add(f"uid-{pod[1]}", pod, "ns/Deployment/web", placed_at=float(i))
    cpu = {pod: 1.0 if i >= 20 else 9.0 for i, pod in enumerate(pods)}  # the oldest 20 used more
    history.publish({"cpu": cpu, "memory": dict.fromkeys(pods, 100.0)}, settled_before=1e9)
    assert history.owner_median("ns/Deployment/web", "cpu") == 1.0  # only the newest 32 count
    assert history.owner_median("ns/Deployment/web", "memory") == 100.0
    history.publish({"memory": dict.fromkeys(pods, 200.0)}, settled_before=1e9)  # a round without CPU
    assert history.owner_median("ns/Deployment/web", "cpu") == 1.0  # what was learned stays


def test_a_pod_younger_than_its_querys_averaging_range_teaches_nothing() -> None:
    """rate(...[2m]) of a series one scrape old reads a fraction of the real rate: such a
    value is no usage, neither for the pod nor for its owner's history."""
    assert settle_time(["sum by (namespace, pod) (rate(x[2m]))"]) == 120
    assert settle_time(["irate(x[5m])", "gauge"]) == 0  # right after two scrapes
    history = UsageHistory()
    history.pods.add("uid-old", ("ns", "old"), "ns/Job/j", placed_at=100.0)
    history.pods.add("uid-young", ("ns", "young"), "ns/Job/j", placed_at=290.0)
    history.publish({"cpu": {("ns", "old"): 0.5, ("ns", "young"): 0.01}}, settled_before=300.0 - 120)
    assert history.owner_median("ns/Job/j", "cpu") == 0.5


def test_a_usage_query_reply_of_garbage_is_dropped_or_refused() -> None:
    result = [
        {"metric": {"namespace": "ns", "pod": "a"}, "value": [1, "0.5"]},
        {"metric": {"namespace": "ns", "pod": "a"}, "value": [1, "0.7"]},  # a second scrape job: the higher
        {"metric": {"pod": "no-namespace"}, "value": [1, "1"]},
        {"metric": {"namespace": "ns", "pod": "nan"}, "value": [1, "NaN"]},
        {"metric": {"namespace": "ns", "pod": "negative"}, "value": [1, "-3"]},
    ]
    assert decode_pod_vector(orjson.dumps(result)) == {("ns", "a"): 0.7}
    for garbage in ({"not": "a vector"}, [{"metric": {"pod": "a"}, "value": "0.5"}]):
        with pytest.raises(QueryError) as refused:
            decode_pod_vector(orjson.dumps(garbage))
        assert refused.value.kind == "result_type"


def test_a_measured_pod_replaces_its_estimate_in_its_nodes_correction() -> None:
    """The issue's case: a 2-core limit counted as 1.7 cores against 0.2 really used refuses
    a node with room; once the pods are measured, it passes, and the error is reported once."""
    app = stored_app(HERD_GUARDED_CONFIG, {"ceph1": 0.7}, {"ceph1": 0.3})
    cluster = app.cluster
    parts(cluster).directory.set_allocatable("ceph1", {"cpu": 31.5, "memory": 128.0 * 2**30})
    spec = (({"cpu": "500m"}, {"cpu": "2"}),)
    placed_at = time.time()

    def sibling(i: int) -> BoundPod:
        pod = PodRef("db", f"ingest-{i}", f"u{i}", ("StatefulSet",), spec, owner="db/StatefulSet/ingest")
        return BoundPod(pod, "ceph1", placed_at)

    for i in (1, 2):
        cluster.pod_bound(sibling(i))
    incoming = PodRef("db", "ingest-0", "u0", ("StatefulSet",), spec, owner="db/StatefulSet/ingest")
    # 70 % + 2 x 5.4 % in flight + the incoming 5.4 %: over 80 %
    assert not app.extender.verdicts(ExtenderArgs(incoming, ["ceph1"]))[0].passed
    measured = {("db", "ingest-1"): 0.2, ("db", "ingest-2"): 0.2}
    errors = cluster.pod_usage_measured({"cpu": measured})
    assert [(e.resource, e.source, round(e.ratio, 2)) for e in errors] == [("cpu", "factor", 7.5)] * 2
    assert parts(cluster).ledger.inflight.per_node(time.time())["ceph1"][0].cpu == pytest.approx(0.4)
    verdict = app.extender.verdicts(ExtenderArgs(incoming, ["ceph1"]))[0]
    assert verdict.passed, verdict  # and the incoming pod counts as its owner's 0.2, not 1.7
    assert parts(cluster).ledger.estimate(incoming).sources[0] == "owner"
    assert cluster.pod_usage_measured({"cpu": measured}) == []  # each pod's error is counted once
    # Measured means running: from then on the node's own metrics take the pod in, and its share
    # fades (herd.FADE_STEPS). A later watch event for the pod keeps when that began.
    counted = parts(cluster).ledger.inflight.get("u1")
    assert counted is not None and placed_at <= counted.measured_at <= time.time()
    cluster.pod_bound(sibling(1))
    assert parts(cluster).ledger.inflight.get("u1") == counted


async def test_preempt_takes_off_what_a_measured_victim_really_uses(aiohttp_client: Any) -> None:
    """ceph2 is at 82 %, over its 80 %: its victim, placed an hour ago and so part of that
    load, is measured at 3 of 31.5 cores (9.5 %). Without it, and with the preemptor's 5.4 %,
    ceph2 is at about 78 %: preempting there helps. Unmeasured, loadext cannot know that."""
    body = orjson.loads(fixture_bytes("preempt-meta.json"))
    victim = body["NodeNameToMetaVictims"]["ceph2"]["Pods"][0]["UID"]
    for measured in (False, True):
        app = stored_app(HERD_GUARDED_CONFIG, {"ceph2": 0.82, "ceph3": 0.95}, {"ceph2": 0.3, "ceph3": 0.3})
        cluster = app.cluster
        for node in ("ceph2", "ceph3"):
            parts(cluster).directory.set_allocatable(node, {"cpu": 31.5, "memory": 128.0 * 2**30})
        hour_ago = time.time() - 3600
        cluster.pods_listed([BoundPod(PodRef("batch", "old-0", victim, ()), "ceph2", hour_ago)])
        cluster.pod_usage_measured({"cpu": {("batch", "old-0"): 3.0}} if measured else {})
        _, reply = await post(await client_for(aiohttp_client, app), "/preempt", orjson.dumps(body))
        assert sorted(reply["NodeNameToMetaVictims"]) == (["ceph2"] if measured else []), measured


def test_the_pod_list_comes_in_pages_a_restarted_list_starts_over_and_a_gone_pod_is_forgotten() -> None:
    cluster = stored_app(HERD_GUARDED_CONFIG, {"n1": 0.5}, {"n1": 0.5}).cluster
    ledger = parts(cluster).ledger
    now = time.time()

    def bound(name: str, placed_at: float) -> BoundPod:
        return BoundPod(PodRef("ns", name, f"uid-{name}", (), owner="ns/Job/j"), "n1", placed_at)

    def known() -> list[str]:
        return [name for name in ("old", "a", "b", "young") if ledger.learned.pods.by_uid(f"uid-{name}")]

    cluster.pods_listed([bound("old", now - 3600)])
    cluster.pods_listed([bound("a", now - 3600), bound("young", now)], first=True, last=False)
    assert known() == ["old"] and ledger.inflight.get("uid-young") is None  # the old list stands until the last page
    cluster.pods_listed([bound("b", now - 3600)], first=True, last=False)  # its continue token expired: listed again
    cluster.pods_listed([bound("young", now)], first=False, last=True)
    assert known() == ["b", "young"]
    assert ledger.inflight.get("uid-young") is not None and ledger.inflight.get("uid-b") is None
    cluster.pod_usage_measured({"cpu": {("ns", "b"): 2.0}})
    assert ledger.learned.measured_by_uid("uid-b", settled_before=now).cpu == 2.0
    cluster.pod_gone("uid-b")
    assert known() == ["young"] and ledger.learned.measured_by_uid("uid-b", settled_before=now) == Usage()
