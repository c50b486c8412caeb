"""loadext against a real Prometheus scraping a real exporter: decisions follow the data, and
identities map, and bad queries and warnings are reported. How loadext rides out Prometheus
failing is in tests/faults/."""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson
import pytest

from harness.exporter import Exporter
from harness.faultproxy import FaultProxy
from harness.inprocess import Loadext, StartLoadext, live_config, sees, set_load
from harness.metrics_text import metric_if_present, metric_value
from harness.prometheus import PrometheusServer
from harness.waiting import eventually
from harness.wire import full_nodes_request, names_request
from loadext.commands.tables import format_explain


async def test_decisions_follow_prometheus_values(
    prometheus: PrometheusServer, exporter: Exporter, start_loadext: StartLoadext, case: str
) -> None:
    set_load(exporter, case, {"a": 0.95, "b": 0.40, "c": 0.10}, {"a": 0.5, "b": 0.5, "c": 0.5})
    loadext = await start_loadext(live_config(prometheus.url, case))
    await sees(loadext, {n: {"cpu": c, "memory": 0.5} for n, c in {"a": 0.95, "b": 0.4, "c": 0.1}.items()})

    status, reply = await loadext.post("filter", names_request("a", "b", "c"))
    assert status == 200
    assert reply["NodeNames"] == ["b", "c"]
    assert reply["FailedAndUnresolvableNodes"] == {"a": "loadext: cpu above 80%"}
    status, scores = await loadext.post("prioritize", names_request("b", "c"))
    assert {s["Host"]: s["Score"] for s in scores} == {"b": 6, "c": 7}

    # The load moves: a cools down, c runs hot. The next decisions follow.
    set_load(exporter, case, {"a": 0.05, "c": 0.97})
    await sees(loadext, {"a": {"cpu": 0.05, "memory": 0.5}, "c": {"cpu": 0.97, "memory": 0.5}})
    status, reply = await loadext.post("filter", names_request("a", "b", "c"))
    assert reply["NodeNames"] == ["a", "b"]
    assert reply["FailedAndUnresolvableNodes"] == {"c": "loadext: cpu above 80%"}

    metrics = await loadext.metrics()
    assert metric_value(metrics, "loadext_node_rejections_total", signal="cpu", cause="threshold") == 2
    assert metric_value(metrics, "loadext_node_signal_ratio", node="c", signal="cpu") == 0.97
    assert metric_value(metrics, "loadext_degraded") == 0
    assert metric_value(metrics, "loadext_requests_total", verb="filter", outcome="ok") == 2
    assert metric_value(metrics, "loadext_snapshot_timestamp_seconds") > time.time() - 10


async def test_missing_nodes_follow_the_missing_data_policy(
    prometheus: PrometheusServer, exporter: Exporter, start_loadext: StartLoadext, case: str
) -> None:
    set_load(exporter, case, {"known": 0.2}, {"known": 0.2})
    loadext = await start_loadext(live_config(prometheus.url, case))
    await sees(loadext, {"known": {"cpu": 0.2, "memory": 0.2}})
    status, reply = await loadext.post("filter", names_request("known", "ghost"))
    assert status == 200
    assert reply["NodeNames"] == ["known", "ghost"]  # pass: no data is not a reason to refuse
    _status, scores = await loadext.post("prioritize", names_request("known", "ghost"))
    assert {s["Host"]: s["Score"] for s in scores} == {"known": 8, "ghost": 5}  # ghost: neutral

    # The mapping check reports the node without series, in /metrics and in explain.
    async def reported() -> bool:
        await loadext.app.refresher.refresh_once()
        report = await loadext.explain()
        assert report["signals"][0]["unmappedNodes"] == ["ghost"]
        return True

    await eventually(reported)
    assert metric_value(await loadext.metrics(), "loadext_unmapped_nodes", signal="cpu") == 1

    loadext.config_path.write_text(loadext.config_path.read_text() + "missingData: reject\n")
    await eventually(lambda: _filter_reasons(loadext, ["known", "ghost"], "ghost"))


async def _filter_reasons(loadext: Loadext, nodes: list[str], node: str) -> bool:
    _, reply = await loadext.post("filter", names_request(*nodes))
    assert reply["FailedAndUnresolvableNodes"].get(node) == "loadext: no fresh cpu data, no fresh memory data"
    return True


async def test_series_matching_no_node_are_reported(
    prometheus: PrometheusServer, exporter: Exporter, start_loadext: StartLoadext, case: str
) -> None:
    set_load(exporter, case, {"worker-1": 0.3, "worker-1.example.internal": 0.3})
    loadext = await start_loadext(live_config(prometheus.url, case))
    await loadext.post("filter", names_request("worker-1"))

    async def reported() -> bool:
        await loadext.app.refresher.refresh_once()
        signal = (await loadext.explain())["signals"][0]
        assert signal["unmatchedSeries"] == ["worker-1.example.internal"]
        return True

    await eventually(reported)
    assert metric_value(await loadext.metrics(), "loadext_unmatched_series", signal="cpu") == 1


async def test_address_identities_match_internal_ips_including_ipv6(
    prometheus: PrometheusServer, exporter: Exporter, start_loadext: StartLoadext, case: str
) -> None:
    for instance, value in {"10.1.0.1:9100": 0.95, "[fd00::2]:9100": 0.20, "10.1.0.3:9100": 0.50}.items():
        exporter.set_gauge("loadext_test_cpu_by_ip", value, case=case, instance=instance)
    config = live_config(
        prometheus.url,
        case,
        nodeIdentity={"label": "instance", "kind": "address"},
        signals=[{"name": "cpu", "query": f'loadext_test_cpu_by_ip{{case="{case}"}}', "threshold": 0.8}],
    )
    loadext = await start_loadext(config)
    nodes = {"n1": "10.1.0.1", "n2": "fd00:0:0::2", "n3": "10.1.0.3"}

    async def decided() -> bool:
        _status, reply = await loadext.post("filter", full_nodes_request(nodes))
        assert [n["metadata"]["name"] for n in reply["Nodes"]["items"]] == ["n2", "n3"]
        assert reply["FailedAndUnresolvableNodes"] == {"n1": "loadext: cpu above 80%"}
        return True

    await eventually(decided)
    # The addresses learnt from that request now serve cache-mode requests too.
    _status, scores = await loadext.post("prioritize", names_request("n2", "n3"))
    assert {s["Host"]: s["Score"] for s in scores} == {"n2": 8, "n3": 5}
    report = await loadext.explain()
    assert {r["node"]: r["identity"] for r in report["nodes"]} == {
        "n1": "10.1.0.1",
        "n2": "fd00::2",
        "n3": "10.1.0.3",
    }

    async def per_node_metric() -> bool:  # rendered with each round: the next one knows n2's address
        return metric_if_present(await loadext.metrics(), "loadext_node_signal_ratio", node="n2", signal="cpu") == 0.2

    await eventually(per_node_metric)


async def test_real_bad_query_is_classified(
    prometheus: PrometheusServer, start_loadext: StartLoadext, case: str
) -> None:
    config = live_config(prometheus.url, case, signals=[{"name": "cpu", "query": "rate(foo[1m]", "threshold": 0.8}])
    loadext = await start_loadext(config)

    async def classified() -> bool:
        text = await loadext.metrics()
        assert metric_value(text, "loadext_prometheus_query_errors_total", signal="cpu", error="bad_query") >= 1
        return True

    await eventually(classified)

    async def ready() -> bool:  # once the failed round is published, the failure policy decides
        assert (await loadext.client.get("/readyz")).status == 200
        return True

    await eventually(ready)


async def test_a_partial_reply_is_used_shown_and_logged_once_or_refused(
    prometheus: PrometheusServer,
    proxy: FaultProxy,
    start_loadext: StartLoadext,
    case: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    body = orjson.dumps(
        {
            "status": "success",
            "warnings": ["remote read partial: store down"],
            "data": {
                "resultType": "vector",
                "result": [{"metric": {"node": "w1"}, "value": [time.time(), "0.42"]}],
            },
        }
    )
    proxy.set("status", status=200, body=body)
    caplog.set_level(logging.WARNING, logger="loadext")
    loadext = await start_loadext(live_config(proxy.url, case))  # partialResponse: use, the default
    await sees(loadext, {"w1": {"cpu": 0.42, "memory": 0.42}})
    line = "prometheus answered signal cpu with partial data: remote read partial: store down"
    assert line in caplog.text

    async def rounds_later() -> bool:  # several refreshes on: still one line, not one per round
        cpu = next(s for s in (await loadext.explain())["signals"] if s["name"] == "cpu")
        assert cpu["partial"] == "remote read partial: store down" and cpu["lastSuccessAge"] is not None
        assert (
            metric_value(await loadext.metrics(), "loadext_prometheus_query_duration_seconds_count", signal="cpu") >= 5
        )
        return True

    await eventually(rounds_later)
    assert caplog.text.count(line) == 1
    assert "cpu: partial data (remote read partial: store down)" in format_explain(await loadext.explain())
    assert metric_value(await loadext.metrics(), "loadext_signal_partial", signal="cpu") == 1
    refusing = await start_loadext(
        live_config(proxy.url, case, prometheus={"url": proxy.url, "partialResponse": "fail"})
    )

    async def refused() -> dict[str, Any]:
        cpu = next(s for s in (await refusing.explain())["signals"] if s["name"] == "cpu")
        assert cpu["lastError"] is not None
        error: dict[str, Any] = cpu["lastError"]
        return error

    error = await eventually(refused)
    assert error["kind"] == "partial" and "partialResponse is fail" in error["message"]
