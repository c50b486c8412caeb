"""Prometheus failing in every way it does, on the real server behind a fault proxy: what the
scheduler sees in each case, asserted on the verbs' replies.

- 5xx, 4xx, bad query, garbage body, connection refused, 10 s slow: replies come from memory in
  well under 1 s; the last good data decides until maxDataAge, then failurePolicy (open: every
  node passes at score 5; closed: every node refused, with the reason);
- Prometheus stopped: the same, through real connection errors;
- NaN / Inf samples: those nodes have no data (missingData decides), the values are counted;
- partial series (one node's series vanishes): that node falls to missingData, the others keep
  being judged on their data;
- flapping every second: never degraded while the up-phases refresh within maxDataAge, and
  every decision stays on data.
"""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path
from typing import Any

import pytest

from harness.exporter import Exporter
from harness.faultproxy import FaultProxy
from harness.inprocess import StartLoadext, live_config, sees, set_load
from harness.metrics_text import metric_value
from harness.prometheus import PrometheusServer, scrape_config
from harness.waiting import eventually
from harness.wire import names_request


async def test_nan_and_inf_are_dropped_and_counted_and_ratios_clamped(
    prometheus: PrometheusServer, exporter: Exporter, start_loadext: StartLoadext, case: str
) -> None:
    set_load(exporter, case, {"nan": math.nan, "inf": math.inf, "over": 1.3, "under": -0.2})
    loadext = await start_loadext(live_config(prometheus.url, case, missingData="reject"))
    await sees(loadext, {"over": {"cpu": 1.0}, "under": {"cpu": 0.0}, "nan": None, "inf": None})
    _status, reply = await loadext.post("filter", names_request("nan", "inf", "over", "under"))
    assert reply["NodeNames"] == []
    assert reply["FailedAndUnresolvableNodes"]["nan"].startswith("loadext: no fresh cpu data")
    assert reply["FailedAndUnresolvableNodes"]["over"].startswith("loadext: cpu above 80%")
    assert metric_value(await loadext.metrics(), "loadext_prometheus_invalid_values_total", signal="cpu") >= 2


FAULTS = [
    (
        "status",
        {"status": 400, "body": b'{"status":"error","errorType":"bad_data","error":"parse error"}'},
        "bad_query",
    ),
    (
        "status",
        {"status": 422, "body": b'{"status":"error","errorType":"execution","error":"many-to-many"}'},
        "execution",
    ),
    (
        "status",
        {"status": 503, "body": b'{"status":"error","errorType":"timeout","error":"timeout"}'},
        "unavailable",
    ),
    ("status", {"status": 502, "body": b"bad gateway"}, "http_5xx"),
    ("garbage", {}, "parse"),
    ("down", {}, "connection"),
    ("delay", {"delay": 3.0}, "timeout"),
]


@pytest.mark.parametrize(("mode", "options", "kind"), FAULTS, ids=[f[2] for f in FAULTS])
async def test_prometheus_faults_keep_answers_fast_and_data_until_max_age(
    prometheus: PrometheusServer,
    proxy: FaultProxy,
    exporter: Exporter,
    start_loadext: StartLoadext,
    case: str,
    mode: str,
    options: dict[str, Any],
    kind: str,
) -> None:
    set_load(exporter, case, {"hot": 0.9, "cool": 0.1}, {"hot": 0.1, "cool": 0.1})
    loadext = await start_loadext(live_config(proxy.url, case, maxDataAge="2s"))
    await sees(loadext, {"hot": {"cpu": 0.9, "memory": 0.1}, "cool": {"cpu": 0.1, "memory": 0.1}})
    proxy.set(mode, **options)

    async def errors_counted() -> bool:
        text = await loadext.metrics()
        assert metric_value(text, "loadext_prometheus_query_errors_total", signal="cpu", error=kind) >= 1
        return True

    await eventually(errors_counted)
    # Within maxDataAge the last good values still decide ...
    started = time.perf_counter()
    status, reply = await loadext.post("filter", names_request("hot", "cool"))
    assert time.perf_counter() - started < 1.0  # answered from memory, not after Prometheus
    if not (await loadext.explain())["degraded"]:
        assert reply["FailedAndUnresolvableNodes"] == {"hot": "loadext: cpu above 80%"}

    # ... and once they are older, failurePolicy open lets every node through at a neutral score.
    async def degraded() -> bool:
        assert metric_value(await loadext.metrics(), "loadext_degraded") == 1
        return True

    await eventually(degraded)
    started = time.perf_counter()
    status, reply = await loadext.post("filter", names_request("hot", "cool"))
    assert time.perf_counter() - started < 1.0
    assert status == 200
    assert reply["NodeNames"] == ["hot", "cool"] and reply["FailedAndUnresolvableNodes"] == {}
    _status, scores = await loadext.post("prioritize", names_request("hot", "cool"))
    assert [s["Score"] for s in scores] == [5, 5]

    proxy.set("pass")  # Prometheus is back: so are the decisions

    async def recovered() -> bool:
        _, reply = await loadext.post("filter", names_request("hot", "cool"))
        assert reply["FailedAndUnresolvableNodes"] == {"hot": "loadext: cpu above 80%"}
        return True

    await eventually(recovered)
    assert metric_value(await loadext.metrics(), "loadext_degraded") == 0


async def test_failure_policy_closed_rejects_every_node(
    prometheus: PrometheusServer,
    proxy: FaultProxy,
    exporter: Exporter,
    start_loadext: StartLoadext,
    case: str,
) -> None:
    set_load(exporter, case, {"x": 0.1}, {"x": 0.1})
    loadext = await start_loadext(live_config(proxy.url, case, maxDataAge="1s", failurePolicy="closed"))
    await sees(loadext, {"x": {"cpu": 0.1, "memory": 0.1}})
    proxy.set("status", status=503)

    async def closed() -> bool:
        _, reply = await loadext.post("filter", names_request("x"))
        assert reply["FailedAndUnresolvableNodes"] == {"x": "loadext: no fresh metrics (failurePolicy closed)"}
        return True

    await eventually(closed)
    metrics = await loadext.metrics()
    assert metric_value(metrics, "loadext_node_rejections_total", signal="cpu", cause="degraded") >= 1


async def test_prometheus_stopped(tmp_path: Path, exporter: Exporter, start_loadext: StartLoadext, case: str) -> None:
    own = PrometheusServer(str(tmp_path), scrape_config(exporter.target))
    try:
        set_load(exporter, case, {"hot": 0.99, "cool": 0.0}, {"hot": 0.0, "cool": 0.0})
        own.wait_for(f'loadext_test_cpu{{case="{case}"}}', lambda r: len(r) == 2)
        loadext = await start_loadext(live_config(own.url, case, maxDataAge="1s"))
        await sees(loadext, {"hot": {"cpu": 0.99, "memory": 0.0}})
        _, reply = await loadext.post("filter", names_request("hot", "cool"))
        assert reply["NodeNames"] == ["cool"]
    finally:
        own.stop()

    async def degraded() -> bool:
        text = await loadext.metrics()
        assert metric_value(text, "loadext_prometheus_query_errors_total", signal="cpu", error="connection") >= 1
        assert metric_value(text, "loadext_degraded") == 1
        return True

    await eventually(degraded)
    _, reply = await loadext.post("filter", names_request("hot", "cool"))
    assert reply["NodeNames"] == ["hot", "cool"]


async def test_partial_series_one_node_vanishes(
    prometheus: PrometheusServer, exporter: Exporter, start_loadext: StartLoadext, case: str
) -> None:
    set_load(exporter, case, {"a": 0.5, "b": 0.3, "c": 0.95}, {"a": 0.3, "b": 0.3, "c": 0.3})
    loadext = await start_loadext(live_config(prometheus.url, case, missingData="reject"))
    await sees(loadext, {"a": {"cpu": 0.5, "memory": 0.3}, "b": {"cpu": 0.3, "memory": 0.3}})
    exporter.remove("loadext_test_cpu", case=case, node="a")  # its exporter stops reporting cpu

    async def a_lost_cpu() -> bool:
        _, reply = await loadext.post("filter", names_request("a", "b", "c"))
        assert reply["NodeNames"] == ["b"]
        assert reply["FailedAndUnresolvableNodes"] == {
            "a": "loadext: no fresh cpu data",
            "c": "loadext: cpu above 80%",
        }
        return True

    await eventually(a_lost_cpu, within=15)
    row = next(r for r in (await loadext.explain())["nodes"] if r["node"] == "a")
    assert row["signals"]["memory"]["value"] == 0.3 and row["signals"].get("cpu", {}).get("value") is None
    assert metric_value(await loadext.metrics(), "loadext_degraded") == 0


async def test_flapping_prometheus_keeps_decisions_on_data(
    prometheus: PrometheusServer, proxy: FaultProxy, exporter: Exporter, start_loadext: StartLoadext, case: str
) -> None:
    set_load(exporter, case, {"hot": 0.9, "cool": 0.1}, {"hot": 0.1, "cool": 0.1})
    loadext = await start_loadext(live_config(proxy.url, case, maxDataAge="3s"))
    await sees(loadext, {"hot": {"cpu": 0.9, "memory": 0.1}, "cool": {"cpu": 0.1, "memory": 0.1}})
    stop = asyncio.Event()

    async def flap() -> int:
        flips = 0
        while not stop.is_set():  # down 1 s, up 1 s, ...
            proxy.set("down" if flips % 2 == 0 else "pass")
            flips += 1
            await asyncio.sleep(1.0)
        proxy.set("pass")
        return flips

    flapping = asyncio.create_task(flap())
    answered, slowest = 0, 0.0
    until = time.monotonic() + 8
    while time.monotonic() < until:
        started = time.perf_counter()
        status, reply = await loadext.post("filter", names_request("hot", "cool"))
        slowest = max(slowest, time.perf_counter() - started)
        assert status == 200 and reply["FailedAndUnresolvableNodes"] == {"hot": "loadext: cpu above 80%"}
        answered += 1
        await asyncio.sleep(0.05)
    stop.set()
    assert await flapping >= 7 and answered > 50 and slowest < 1.0
    metrics = await loadext.metrics()
    assert metric_value(metrics, "loadext_prometheus_query_errors_total", signal="cpu", error="connection") >= 3
    assert metric_value(metrics, "loadext_degraded") == 0
