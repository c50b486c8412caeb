"""Soft mode: loadext never makes placement impossible only because of its own estimates, and,
with filterMode soft, not because the whole cluster is hot either: when it would refuse every
candidate, it passes the least loaded (counting the pods in flight), and says so in a metric."""

from __future__ import annotations

import time
from typing import Any

import orjson

from harness.config import stored_config
from harness.inprocess import client_for, post, stored_app
from harness.wire import fixture_bytes
from loadext.app import App
from loadext.core.herd.usage import Usage
from loadext.http.protocol import Codec
from tests.unit.inside import parts


def guarded(burst_cap: int = 1, **herd: Any) -> str:
    return stored_config(herdGuard={"enabled": True, "window": "5m", "burstCap": burst_cap, **herd})


def all_hot(**cpu: Any) -> str:
    return stored_config(filterMode="soft", signal_settings={"cpu": cpu})


MEMORY = {"ceph1": 0.3, "ceph2": 0.3, "ceph3": 0.3}


async def filter_names(aiohttp_client: Any, app: App) -> tuple[dict[str, Any], str]:
    client = await client_for(aiohttp_client, app)
    status, reply = await post(client, "/filter", fixture_bytes("filter-names.json"))
    assert status == 200
    metrics = await (await client.get("/metrics")).text()
    return reply, metrics


def one_pod_placed_on_every_node(app: App) -> None:
    cluster = app.cluster
    pod = Codec().decode_extender_args(fixture_bytes("filter-names.json")).args.pod
    assert pod is not None
    for node in ("ceph1", "ceph2", "ceph3"):
        parts(cluster).ledger.place(f"recent-{node}", node, time.time(), parts(cluster).ledger.estimate(pod).usage)


async def test_a_burst_cap_on_every_node_does_not_strand_the_pod(aiohttp_client: Any) -> None:
    ext = stored_app(guarded(), {"ceph1": 0.5, "ceph2": 0.2, "ceph3": 0.6}, MEMORY)
    one_pod_placed_on_every_node(ext)
    reply, metrics = await filter_names(aiohttp_client, ext)
    # All three under their thresholds, each at its cap: the least full passes, ceph2 at 20 %
    # (one at a time, so that a burst fills the nodes from the emptiest up).
    assert reply["NodeNames"] == ["ceph2"]
    assert sorted(reply["FailedAndUnresolvableNodes"]) == ["ceph1", "ceph3"]
    assert 'loadext_filter_soft_passes_total{reason="herd"} 1.0' in metrics


async def test_herd_soft_off_lets_pods_wait(aiohttp_client: Any) -> None:
    ext = stored_app(guarded(soft=False), {"ceph1": 0.5, "ceph2": 0.2, "ceph3": 0.6}, MEMORY)
    one_pod_placed_on_every_node(ext)
    reply, metrics = await filter_names(aiohttp_client, ext)
    assert reply["NodeNames"] == [] and len(reply["FailedAndUnresolvableNodes"]) == 3
    assert "loadext_filter_soft_passes_total{" not in metrics


async def test_an_all_hot_cluster_schedules_onto_the_least_hot_node(aiohttp_client: Any) -> None:
    ext = stored_app(all_hot(), {"ceph1": 0.95, "ceph2": 0.85, "ceph3": 0.97}, MEMORY)
    reply, metrics = await filter_names(aiohttp_client, ext)
    assert reply["NodeNames"] == ["ceph2"]
    assert set(reply["FailedAndUnresolvableNodes"]) == {"ceph1", "ceph3"}
    assert 'loadext_filter_soft_passes_total{reason="threshold"} 1.0' in metrics


async def test_a_hard_signal_still_refuses_in_soft_mode(aiohttp_client: Any) -> None:
    ext = stored_app(all_hot(hard=True), {"ceph1": 0.95, "ceph2": 0.85, "ceph3": 0.97}, MEMORY)
    reply, _ = await filter_names(aiohttp_client, ext)
    assert reply["NodeNames"] == [] and len(reply["FailedAndUnresolvableNodes"]) == 3


async def test_soft_mode_changes_nothing_while_some_node_passes(aiohttp_client: Any) -> None:
    ext = stored_app(all_hot(), {"ceph1": 0.95, "ceph2": 0.5, "ceph3": 0.97}, MEMORY)
    reply, metrics = await filter_names(aiohttp_client, ext)
    assert reply["NodeNames"] == ["ceph2"] and "loadext_filter_soft_passes_total{" not in metrics


def three_pods_in_flight_on_ceph2() -> tuple[App, Usage]:
    """ceph1 at 76 %, ceph2 at 70 % with three pods (1.7 of 31.5 cores each) in flight, ceph3 at
    78 %: the fixture pod (another 1.7 cores, 5.4 %) is refused on each for the herd guard.
    Returns the app and the pod's estimate."""
    ext = stored_app(guarded(10), {"ceph1": 0.76, "ceph2": 0.70, "ceph3": 0.78}, MEMORY)  # burstCap 10
    cluster = ext.cluster
    pod = Codec().decode_extender_args(fixture_bytes("filter-names.json")).args.pod
    assert pod is not None
    for node in ("ceph1", "ceph2", "ceph3"):
        parts(cluster).directory.set_allocatable(node, {"cpu": 31.5, "memory": 128.0 * 2**30})
    estimate = parts(cluster).ledger.estimate(pod).usage
    for i in range(3):
        parts(cluster).ledger.place(f"recent-{i}", "ceph2", time.time(), estimate)
    return ext, estimate


async def test_the_herd_soft_pass_counts_what_is_in_flight(aiohttp_client: Any) -> None:
    """Every node refused for the pods in flight (burstCap 10, not reached): the one passed is
    the least full counting them and the incoming pod, not the least loaded by measurement."""
    ext, estimate = three_pods_in_flight_on_ceph2()
    reply, metrics = await filter_names(aiohttp_client, ext)
    assert reply["NodeNames"] == ["ceph1"]  # 76 % + 5.4 %, against 70 % + 4 x 5.4 % and 78 % + 5.4 %
    assert 'loadext_filter_soft_passes_total{reason="herd"} 1.0' in metrics
    # A pod lands on ceph1: the next call ranks ceph1 anew (the memo drops what changed) and
    # passes ceph3, 78 % + 5.4 %, now below ceph1's 76 % + 2 x 5.4 %.
    parts(ext.cluster).ledger.place("landed", "ceph1", time.time(), estimate)
    reply, metrics = await filter_names(aiohttp_client, ext)
    assert reply["NodeNames"] == ["ceph3"]


async def test_the_pods_expected_node_missing_from_a_later_call(aiohttp_client: Any) -> None:
    """The pod was expected on ceph3 by an earlier call, and a later call is sent ceph1 and
    ceph2 only (ceph3 filtered out by the scheduler meanwhile): soft mode ranks the two it was
    sent, though its memo knows ceph3."""
    ext, estimate = three_pods_in_flight_on_ceph2()
    body = orjson.loads(fixture_bytes("filter-names.json"))
    client = await client_for(aiohttp_client, ext)
    status, reply = await post(client, "/filter", orjson.dumps(body))
    assert status == 200 and reply["NodeNames"] == ["ceph1"]
    parts(ext.cluster).ledger.place(body["Pod"]["metadata"]["uid"], "ceph3", time.time(), estimate)
    status, reply = await post(client, "/filter", orjson.dumps(body))  # ceph3 ranked anew, without the pod
    assert status == 200 and reply["NodeNames"] == ["ceph1"]
    body["NodeNames"] = ["ceph1", "ceph2"]
    status, reply = await post(client, "/filter", orjson.dumps(body))
    assert status == 200 and reply["NodeNames"] == ["ceph1"], reply
