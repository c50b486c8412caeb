"""Learned usage estimates through the real kube-scheduler and apiserver: the pod watch gives
loadext each bound pod's name and owner, the Prometheus it reads has the pod's cAdvisor-shaped
usage (as the kubelet would export it), and the shipped default podUsage queries read it."""

from __future__ import annotations

import pytest
from kubernetes import client

from harness.cluster import (
    E2E_NAMESPACE,
    Cluster,
    e2e_config,
    make_node,
    make_pod,
    pod_watch_healthy,
    scheduled_node,
    set_load,
    wait_loadext_sees,
)
from harness.exporter import Exporter
from harness.kubernetes import wait_until
from harness.metrics_text import metric_value


def test_a_measured_pod_counts_as_it_runs_and_teaches_its_owners_next_pod(
    cluster: Cluster, exporter: Exporter, slug: str
) -> None:
    node = f"{slug}-0"
    make_node(cluster.core, node, slug, cpu="16", memory="64Gi")
    loads = {node: (0.5, 0.3)}
    set_load(exporter, loads)
    wait_loadext_sees(cluster, loads)
    cluster.loadext.set_config(e2e_config(cluster.proxy.url, herdGuard={"enabled": True, "window": "10m"}))
    owner = client.V1OwnerReference(
        api_version="apps/v1",
        kind="StatefulSet",
        name=f"{slug}-web",
        uid="5c1f3a0e-8f2d-4a57-9d55-0b9e0c5e1f4c",
        controller=True,
    )
    usage = {"namespace": E2E_NAMESPACE, "pod": f"{slug}-web-0", "container": "app"}
    try:
        wait_until(lambda: pod_watch_healthy(cluster.loadext.metrics()), "the pod watch", timeout=30)
        make_pod(cluster.core, f"{slug}-web-0", slug, "loadext-scheduler", cpu="2", owner_references=[owner])
        assert scheduled_node(cluster.core, f"{slug}-web-0") == node

        def in_flight_cpu() -> float | None:
            rows = {r["node"]: r for r in cluster.loadext.get_json("/explain")["nodes"]}
            return (rows[node].get("inFlight") or {}).get("cpuCores")

        wait_until(lambda: in_flight_cpu() == 2.0, "the pod counted at its 2-core request", timeout=20)
        exporter.set_counter_rate("container_cpu_usage_seconds_total", 0.25, **usage)  # what cAdvisor sees
        exporter.set_gauge("container_memory_working_set_bytes", 100 * 2**20, **usage)
        wait_until(lambda: in_flight_cpu() == pytest.approx(0.25, rel=0.2), "the pod counted as it runs", timeout=30)

        make_pod(cluster.core, f"{slug}-web-1", slug, "loadext-scheduler", cpu="2", owner_references=[owner])
        assert scheduled_node(cluster.core, f"{slug}-web-1") == node
        report = cluster.loadext.get_json(f"/explain?pod={E2E_NAMESPACE}/{slug}-web-1")
        estimate = report["filter"]["estimate"]
        assert estimate["source"] == {"cpu": "owner", "memory": "owner"}, estimate
        assert estimate["cpuCores"] == pytest.approx(0.25, rel=0.2) and estimate["memoryBytes"] == 100 * 2**20
        errors = metric_value(
            cluster.loadext.metrics(), "loadext_estimate_error_ratio_count", resource="cpu", source="factor"
        )
        assert errors >= 1  # 2 cores estimated against 0.25 used
    finally:
        exporter.remove("container_cpu_usage_seconds_total", **usage)
        exporter.remove("container_memory_working_set_bytes", **usage)
        cluster.loadext.set_config(e2e_config(cluster.proxy.url))
