"""Learned usage estimates against a real Prometheus scraping cAdvisor-shaped series, read with
the shipped default herdGuard.podUsage queries: measured pods replace their estimates, a new
pod of the same owner is estimated from them, and a query returning garbage falls back."""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson
import pytest

from harness.exporter import Exporter
from harness.inprocess import Loadext, StartLoadext, live_config, sees, set_load
from harness.metrics_text import metric_value
from harness.prometheus import PrometheusServer
from harness.waiting import eventually
from harness.wire import fixture_bytes
from loadext.core.requests import BoundPod, PodRef

LIMIT_2_CORES = (({"cpu": "500m", "memory": "512Mi"}, {"cpu": "2", "memory": "2Gi"}),)  # as the fixture's pod


def incoming_pod(namespace: str) -> dict[str, Any]:
    """The fixture's filter request (nodes ceph1..3, 31.5 cores each) for StatefulSet `ingest`'s
    pod ingest-0, in `namespace`."""
    request: dict[str, Any] = orjson.loads(fixture_bytes("filter-nodes.json"))
    request["Pod"]["metadata"]["namespace"] = namespace
    return request


def place_siblings(loadext: Loadext, namespace: str) -> None:
    """Two pods of the same StatefulSet bound to ceph1 just now, as the pod watch reports them."""
    for i in (1, 2):
        pod = PodRef(
            namespace,
            f"ingest-{i}",
            f"{namespace}-{i}",
            ("StatefulSet",),
            LIMIT_2_CORES,
            owner=f"{namespace}/StatefulSet/ingest",
        )
        loadext.app.cluster.pod_bound(BoundPod(pod, "ceph1", time.time()))  # fmt: skip


async def test_measured_siblings_open_a_node_their_limits_closed(
    prometheus: PrometheusServer, exporter: Exporter, start_loadext: StartLoadext, case: str
) -> None:
    set_load(exporter, case, {"ceph1": 0.7, "ceph2": 0.5, "ceph3": 0.95}, {n: 0.3 for n in ("ceph1", "ceph2", "ceph3")})
    config = live_config(prometheus.url, case, herdGuard={"enabled": True, "window": "10m"})
    loadext = await start_loadext(config)
    await sees(loadext, {"ceph1": {"cpu": 0.7, "memory": 0.3}})
    place_siblings(loadext, case)
    # (ceph2 has room whatever happens, so soft mode never has to pass ceph1.)
    # Each counts as 0.85 x its 2-core limit: 70 % + 2 x 5.4 % + the incoming pod's 5.4 % > 80 %.
    _, reply = await loadext.post("filter", incoming_pod(case))
    assert reply["FailedAndUnresolvableNodes"]["ceph1"] == "loadext: cpu above 80%"

    for i in (1, 2):  # what the kubelet's cAdvisor reports for them: 0.2 cores, 300 MiB
        labels = {"namespace": case, "pod": f"ingest-{i}", "container": "ingest"}
        exporter.set_counter_rate("container_cpu_usage_seconds_total", 0.2, **labels)
        exporter.set_gauge("container_memory_working_set_bytes", 300 * 2**20, **labels)

    async def ceph1_passes() -> bool:
        _, reply = await loadext.post("filter", incoming_pod(case))
        return "ceph1" in (reply["NodeNames"] or [n["metadata"]["name"] for n in reply["Nodes"]["items"]])

    await eventually(ceph1_passes, within=20)
    report = await (await loadext.client.get("/explain", params={"pod": f"{case}/ingest-0"})).json()
    estimate = report["filter"]["estimate"]
    assert estimate["source"] == {"cpu": "owner", "memory": "owner"}  # its siblings' median
    assert estimate["cpuCores"] == pytest.approx(0.2, rel=0.25)
    assert estimate["memoryBytes"] == 300 * 2**20
    in_flight = {row["node"]: row["inFlight"] for row in report["filter"]["nodes"]}["ceph1"]
    assert in_flight["pods"] == 2 and in_flight["cpuCores"] == pytest.approx(0.4, rel=0.25)

    herd = (await loadext.explain())["herdGuard"]
    assert herd["ownersLearned"] >= 1 and herd["podsMeasured"]["cpu"] >= 2, herd
    metrics = await loadext.metrics()
    assert metric_value(metrics, "loadext_pod_usage_pods", resource="cpu") >= 2
    # Each sibling's factor estimate replaced once: 1.7 cores against about 0.2 is off by about +7.5.
    factor = {"resource": "cpu", "source": "factor"}
    assert metric_value(metrics, "loadext_estimate_error_ratio_count", **factor) == 2
    assert metric_value(metrics, "loadext_estimate_error_ratio_bucket", le="5.0", **factor) == 0
    assert metric_value(metrics, "loadext_estimate_error_ratio_bucket", le="10.0", **factor) == 2


async def test_a_usage_query_of_garbage_falls_back_to_the_factor_rule_and_says_so_once(
    prometheus: PrometheusServer,
    exporter: Exporter,
    start_loadext: StartLoadext,
    case: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    set_load(exporter, case, {"ceph1": 0.7, "ceph2": 0.5, "ceph3": 0.95}, {n: 0.3 for n in ("ceph1", "ceph2", "ceph3")})
    herd = {"enabled": True, "window": "10m", "podUsage": {"cpu": "vector(1)", "memory": ""}}  # no pod labels
    loadext = await start_loadext(live_config(prometheus.url, case, herdGuard=herd))
    await sees(loadext, {"ceph1": {"cpu": 0.7, "memory": 0.3}})
    place_siblings(loadext, case)
    with caplog.at_level(logging.WARNING, logger="loadext"):
        for _ in range(5):  # refreshes every 200 ms: many rounds, one line
            refreshed = metric_value(await loadext.metrics(), "loadext_snapshot_timestamp_seconds")
            await eventually(
                lambda: _newer(loadext, refreshed),  # noqa: B023 - awaited within the iteration
                within=10,
            )
    said = [r.getMessage() for r in caplog.records if "herdGuard.podUsage.cpu" in r.getMessage()]
    assert len(said) == 1 and "no pod with namespace and pod labels" in said[0], said
    assert "factor rule" in said[0]
    _, reply = await loadext.post("filter", incoming_pod(case))
    assert reply["FailedAndUnresolvableNodes"]["ceph1"] == "loadext: cpu above 80%"  # estimates as before
    assert metric_value(await loadext.metrics(), "loadext_pod_usage_pods", resource="cpu") == 0
    report = await (await loadext.client.get("/explain", params={"pod": f"{case}/ingest-0"})).json()
    assert report["filter"]["estimate"]["source"] == {"cpu": "factor", "memory": "factor"}


async def _newer(loadext: Loadext, than: float) -> bool:
    return metric_value(await loadext.metrics(), "loadext_snapshot_timestamp_seconds") > than
