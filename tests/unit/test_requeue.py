"""Stranded pods (a filter that passed no node) and when a node reopens for them; the preempt
verb judging nodes with the preemptor's estimate. The Node annotation that makes kube-scheduler
retry them is exercised against the real scheduler in tests/e2e/test_herd_guard.py."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from functools import partial
from typing import Any

import orjson
import pytest
from kubernetes.client.exceptions import ApiException

from harness.config import stored_config
from harness.inprocess import client_for, post, stored_app
from harness.waiting import eventually
from harness.wire import fixture_bytes
from loadext.actors import requeue
from loadext.app import App
from loadext.core.herd.stranded import FORGET_AFTER, RENUDGE_AFTER, StrandedPods
from loadext.core.herd.usage import Usage
from loadext.core.requests import BoundPod, PodRef
from loadext.core.snapshot import SignalValues
from loadext.http.protocol import Codec
from tests.unit.inside import parts


def hot(guarded: bool, burst_cap: int) -> str:
    return stored_config(herdGuard={"enabled": guarded, "window": "5m", "soft": False, "burstCap": burst_cap})


MEMORY = {"ceph1": 0.3, "ceph2": 0.3, "ceph3": 0.3}
POD_UID = Codec().decode_extender_args(fixture_bytes("filter-names.json")).args.pod.uid  # type: ignore[union-attr]


def publish(app: App, cpu: dict[str, float]) -> None:
    """A refresh round with these CPU values, as the refresher publishes one."""
    now = time.time()
    app.cluster.refreshed([SignalValues("cpu", cpu, now), SignalValues("memory", MEMORY, now)])


def test_ledger_groups_by_estimate_renudges_and_forgets() -> None:
    ledger, small, big = StrandedPods(size=3), Usage(0.5, 0), Usage(4, 0)
    ledger.strand("a", ["n1", "n2"], small, 100.0)
    ledger.strand("b", ["n2", "n3"], small, 101.0)
    ledger.strand("c", ["n1"], big, 102.0)
    assert ledger.due(103.0) == {small: {"n1", "n2", "n3"}, big: {"n1"}}
    assert ledger.nudged(103.0) == 3
    assert ledger.due(103.0 + RENUDGE_AFTER - 1) == {}  # the scheduler is retrying them
    assert ledger.due(103.0 + RENUDGE_AFTER) == {small: {"n1", "n2", "n3"}, big: {"n1"}}
    ledger.release("b")
    ledger.strand("d", ["n9"], small, 104.0)
    ledger.strand("e", ["n8"], small, 105.0)  # bounded: the least recently stranded goes
    assert len(ledger) == 3 and "n1" not in ledger.due(200.0).get(small, set())
    assert ledger.due(104.0 + FORGET_AFTER) == {small: {"n8"}}  # the scheduler's own flush retried "d"


async def test_an_all_hot_cluster_strands_the_pod_until_a_node_cools(aiohttp_client: Any) -> None:
    app = stored_app(hot(False, 0), {"ceph1": 0.95, "ceph2": 0.9, "ceph3": 0.85}, MEMORY)
    client = await client_for(aiohttp_client, app)
    _, reply = await post(client, "/filter", fixture_bytes("filter-names.json"))
    assert reply["NodeNames"] == []
    metrics = await (await client.get("/metrics")).text()
    assert "loadext_stranded_pods 1.0" in metrics
    assert app.cluster.reopened_node() is None  # still all hot
    publish(app, {"ceph1": 0.95, "ceph2": 0.9, "ceph3": 0.4})
    assert app.cluster.reopened_node() == "ceph3"
    _, reply = await post(client, "/filter", fixture_bytes("filter-names.json"))  # the scheduler's retry
    assert reply["NodeNames"] == ["ceph3"]
    assert app.cluster.stranded_count() == 0 and app.cluster.reopened_node() is None


async def test_herd_refusals_reopen_when_a_placement_leaves(aiohttp_client: Any) -> None:
    app = stored_app(hot(True, 1), {"ceph1": 0.5, "ceph2": 0.2, "ceph3": 0.6}, MEMORY)
    cluster = app.cluster
    for node in ("ceph1", "ceph2", "ceph3"):
        parts(cluster).ledger.place(f"recent-{node}", node, time.time(), Usage(0.1, 0))
    client = await client_for(aiohttp_client, app)
    _, reply = await post(client, "/filter", fixture_bytes("filter-names.json"))
    assert reply["NodeNames"] == [] and set(reply["FailedAndUnresolvableNodes"]) == {"ceph1", "ceph2", "ceph3"}
    assert cluster.reopened_node() is None
    parts(cluster).ledger.inflight.remove("recent-ceph2")  # deleted, or out of the window
    assert cluster.reopened_node() == "ceph2"


async def test_a_bound_pod_is_no_longer_stranded(aiohttp_client: Any) -> None:
    app = stored_app(hot(True, 1), {"ceph1": 0.95, "ceph2": 0.95, "ceph3": 0.95}, MEMORY)
    client = await client_for(aiohttp_client, app)
    await post(client, "/filter", fixture_bytes("filter-names.json"))
    assert app.cluster.stranded_count() == 1
    app.cluster.bound_by_loadext(POD_UID, "ceph1")  # loadext's own bind: the watch confirms it
    assert app.cluster.stranded_count() == 1
    app.cluster.pod_bound(BoundPod(PodRef("", "", POD_UID, ()), "ceph1", time.time()))
    assert app.cluster.stranded_count() == 0


class RefusingApi:
    """A CoreV1Api whose patch_node is refused, as without the RBAC verb."""

    def __init__(self) -> None:
        self.calls = 0

    def patch_node(self, name: str, body: Any, **kwargs: Any) -> None:
        self.calls += 1
        raise ApiException(status=403, reason="Forbidden")


async def test_a_refused_annotation_is_counted_and_logged_once(
    aiohttp_client: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    app = stored_app(hot(False, 0), {"ceph1": 0.95, "ceph2": 0.9, "ceph3": 0.4}, MEMORY)
    api, now = RefusingApi(), [time.time()]
    parts(app.cluster).clock = lambda: now[0]
    for uid in ("p1", "p2"):
        app.cluster.verbs.strand(uid, ["ceph3"], Usage())
    monkeypatch.setattr(requeue, "CHECK_EVERY", 0.01)
    task = asyncio.create_task(requeue.requeue_stranded(app.cluster, api, app.telemetry.herd))
    client = await client_for(aiohttp_client, app)

    async def errors_counted(count: int) -> bool:
        text = await (await client.get("/metrics")).text()
        return f'loadext_requeue_nudges_total{{outcome="error"}} {float(count)}' in text

    try:
        for count in (1, 2, 3):  # a nudge, and another after each renudge pause
            await eventually(partial(errors_counted, count))
            now[0] += RENUDGE_AFTER
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert api.calls >= 3
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "annotating node" in r.message]
    assert len(warnings) == 1 and "403 Forbidden" in warnings[0].message and "patch on nodes" in warnings[0].message


@pytest.mark.parametrize("guarded", [False, True])
async def test_preempt_judges_with_the_preemptors_estimate_and_without_its_victims(
    aiohttp_client: Any, guarded: bool
) -> None:
    # The preemptor (500m request, 2-core limit) is estimated at 1.7 of 31.5 cores, +5.4 %.
    # ceph2 at 78 % would be over 80 % with it. ceph3 at 50 % has a 10-core victim in flight
    # (+31.7 %): over with the victim, well under once it is gone.
    app = stored_app(
        stored_config(herdGuard={"enabled": guarded, "window": "5m"}), {"ceph2": 0.78, "ceph3": 0.5}, MEMORY
    )
    cluster = app.cluster
    for node in ("ceph2", "ceph3"):
        parts(cluster).directory.set_allocatable(node, {"cpu": 31.5, "memory": 128 * 1024**3})
    body = orjson.loads(fixture_bytes("preempt-meta.json"))
    victim = body["NodeNameToMetaVictims"]["ceph3"]["Pods"][0]["UID"]
    parts(cluster).ledger.place(victim, "ceph3", time.time(), Usage(10, 0))
    client = await client_for(aiohttp_client, app)
    status, reply = await post(client, "/preempt", orjson.dumps(body))
    assert status == 200
    assert sorted(reply["NodeNameToMetaVictims"]) == (["ceph3"] if guarded else ["ceph2", "ceph3"])
