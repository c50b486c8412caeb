"""The real kube-scheduler placing real pods through loadext, from real Prometheus data: the
least loaded node, never a hot one, by name or by address, with per-pool thresholds.
"""

from __future__ import annotations

import time

from harness.cluster import (
    E2E_NAMESPACE,
    Cluster,
    e2e_config,
    make_node,
    make_pod,
    scenario,
    scheduled_node,
    set_load,
    unschedulable_message,
    wait_loadext_sees,
)
from harness.exporter import Exporter
from harness.metrics_text import metric_value


def test_pods_go_to_the_least_loaded_node_never_to_the_hot_one(cluster: Cluster, exporter: Exporter, slug: str) -> None:
    nodes = scenario(cluster, exporter, slug)
    # Without loadext, request-based scoring picks the big node: it has the most free room.
    make_pod(cluster.core, f"{slug}-plain", slug, "plain-scheduler")
    assert scheduled_node(cluster.core, f"{slug}-plain") == nodes["big"]
    for i in range(3):
        make_pod(cluster.core, f"{slug}-{i}", slug, "loadext-scheduler")
        assert scheduled_node(cluster.core, f"{slug}-{i}") == nodes["cool"]
    why = cluster.loadext.get_json(f"/explain?pod={E2E_NAMESPACE}/{slug}-0")  # every candidate, and why
    rows = {row["node"]: row for row in why["filter"]["nodes"]}
    assert set(rows) == set(nodes.values())
    assert rows[nodes["big"]]["verdict"] == "reject" and rows[nodes["big"]]["signals"]["cpu"]["value"] == 0.95
    assert all(row["signals"]["cpu"]["age"] < 10 for row in rows.values())


def test_node_cache_modes_place_pods_identically(cluster: Cluster, exporter: Exporter, slug: str) -> None:
    nodes = scenario(cluster, exporter, slug)
    placements = {}
    for scheduler in ("loadext-scheduler", "loadext-scheduler-nocache"):
        make_pod(cluster.core, f"{slug}-{scheduler}", slug, scheduler)
        placements[scheduler] = scheduled_node(cluster.core, f"{slug}-{scheduler}")
    assert placements == {"loadext-scheduler": nodes["cool"], "loadext-scheduler-nocache": nodes["cool"]}
    metrics = cluster.loadext.metrics()
    assert metric_value(metrics, "loadext_requests_total", outcome="ok", verb="filter") >= 2


def test_every_node_hot_keeps_pods_pending_with_loadexts_reason(
    cluster: Cluster, exporter: Exporter, slug: str
) -> None:
    nodes = [f"{slug}-{i}" for i in range(2)]
    for node in nodes:
        make_node(cluster.core, node, slug)
    loads = {nodes[0]: (0.95, 0.2), nodes[1]: (0.5, 0.97)}
    set_load(exporter, loads)
    wait_loadext_sees(cluster, loads)
    make_pod(cluster.core, f"{slug}-pod", slug, "loadext-scheduler")
    message = unschedulable_message(cluster.core, f"{slug}-pod")
    assert "loadext: cpu above 80%" in message and "loadext: memory above 90%" in message
    events = cluster.core.list_namespaced_event(E2E_NAMESPACE, field_selector=f"involvedObject.name={slug}-pod")
    assert any(e.reason == "FailedScheduling" and "loadext: cpu above 80%" in e.message for e in events.items)


def test_address_identity_through_the_node_watch(cluster: Cluster, exporter: Exporter, slug: str) -> None:
    hot, cool = f"{slug}-hot", f"{slug}-cool"
    make_node(cluster.core, hot, slug, cpu="64", memory="256Gi", ip="10.77.0.1")
    make_node(cluster.core, cool, slug, ip="10.77.0.2")
    exporter.set_gauge("loadext_e2e_cpu_by_ip", 0.95, instance="10.77.0.1:9100")
    exporter.set_gauge("loadext_e2e_cpu_by_ip", 0.10, instance="10.77.0.2:9100")
    by_address = e2e_config(
        cluster.proxy.url,
        nodeIdentity={"label": "instance", "kind": "address"},
        signals=[{"name": "cpu", "query": "loadext_e2e_cpu_by_ip", "threshold": 0.8}],
    )
    try:
        cluster.loadext.set_config(by_address)
        deadline = time.monotonic() + 20
        while True:
            rows = {r["node"]: r for r in cluster.loadext.get_json("/explain")["nodes"]}
            if rows.get(hot, {}).get("signals", {}).get("cpu", {}).get("value") == 0.95:
                break
            assert time.monotonic() < deadline, "the Node watch never mapped 10.77.0.1 to its node"
            time.sleep(0.1)
        assert rows[hot]["identity"] == "10.77.0.1" and rows[cool]["identity"] == "10.77.0.2"
        for i in range(2):
            make_pod(cluster.core, f"{slug}-{i}", slug, "loadext-scheduler")  # cache mode: names only
            assert scheduled_node(cluster.core, f"{slug}-{i}") == cool
    finally:
        cluster.loadext.set_config(e2e_config(cluster.proxy.url))


def test_pool_overrides_by_node_label(cluster: Cluster, exporter: Exporter, slug: str) -> None:
    batch, web = f"{slug}-batch", f"{slug}-web"
    make_node(cluster.core, batch, slug, pool="batch")
    make_node(cluster.core, web, slug, cpu="64", memory="256Gi")  # request-based scoring would pick this one
    loads = {batch: (0.85, 0.3), web: (0.85, 0.3)}
    set_load(exporter, loads)
    pooled = e2e_config(
        cluster.proxy.url,
        pools=[{"name": "batch", "nodeSelector": {"pool": "batch"}, "signals": [{"name": "cpu", "threshold": 0.9}]}],
    )
    try:
        cluster.loadext.set_config(pooled)
        wait_loadext_sees(cluster, loads)
        for i in range(2):
            make_pod(cluster.core, f"{slug}-{i}", slug, "loadext-scheduler")
            assert scheduled_node(cluster.core, f"{slug}-{i}") == batch  # 85 % is fine in the batch pool
        make_pod(cluster.core, f"{slug}-web-only", slug, "loadext-scheduler", node=web)
        assert "loadext: cpu above 80%" in unschedulable_message(cluster.core, f"{slug}-web-only")
        rows = {r["node"]: r for r in cluster.loadext.get_json("/explain")["nodes"]}
        assert rows[batch]["pool"] == "batch" and rows[web]["pool"] is None
    finally:
        cluster.loadext.set_config(e2e_config(cluster.proxy.url))
