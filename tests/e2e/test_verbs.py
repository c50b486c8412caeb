"""preempt and bind on the real control plane: victims only where loadext's filter passes,
loadext's own Binding, and DaemonSet pods never filtered.
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client

from harness.cluster import (
    E2E_NAMESPACE,
    Cluster,
    make_node,
    make_pod,
    scheduled_node,
    set_load,
    wait_loadext_sees,
)
from harness.exporter import Exporter
from harness.metrics_text import metric_value


def test_preemption_only_on_a_node_that_is_not_overloaded(cluster: Cluster, exporter: Exporter, slug: str) -> None:
    scheduling = client.SchedulingV1Api(cluster.plane.api())
    for name, value in ((f"{slug}-lowest", 10), (f"{slug}-low", 100), (f"{slug}-high", 10000)):
        scheduling.create_priority_class(client.V1PriorityClass(metadata=client.V1ObjectMeta(name=name), value=value))
    hot, cool = f"{slug}-hot", f"{slug}-cool"
    for node in (hot, cool):
        make_node(cluster.core, node, slug, cpu="1", memory="4Gi")
    loads = {hot: (0.95, 0.3), cool: (0.4, 0.3)}
    set_load(exporter, loads)
    wait_loadext_sees(cluster, loads)
    # Both nodes full by requests. The in-tree choice would evict on `hot`: its victim has the
    # lower priority.
    for node, priority in ((hot, "lowest"), (cool, "low")):
        make_pod(
            cluster.core,
            f"{slug}-victim-{node}",
            slug,
            "loadext-scheduler",
            cpu="900m",
            node_name=node,
            priority_class_name=f"{slug}-{priority}",
        )
    make_pod(
        cluster.core,
        f"{slug}-preemptor",
        slug,
        "loadext-scheduler",
        cpu="900m",
        priority_class_name=f"{slug}-high",
    )
    deadline = time.monotonic() + 30
    while True:
        pod = cluster.core.read_namespaced_pod(f"{slug}-preemptor", E2E_NAMESPACE)
        if pod.status.nominated_node_name or pod.spec.node_name:
            break
        assert time.monotonic() < deadline, f"no preemption: {pod.status.conditions}"
        time.sleep(0.1)
    # Victims have no grace period and no kubelet to wait for, so the preemptor may be bound
    # already; either way it went to `cool`.
    assert (pod.spec.node_name or pod.status.nominated_node_name) == cool

    def victim(node: str) -> Any:
        matching = cluster.core.list_namespaced_pod(E2E_NAMESPACE, field_selector=f"metadata.name={slug}-victim-{node}")
        return matching.items[0] if matching.items else None

    deadline = time.monotonic() + 30
    while (evicted := victim(cool)) is not None and not evicted.metadata.deletion_timestamp:
        assert time.monotonic() < deadline, "the victim on the cool node was never evicted"
        time.sleep(0.1)
    spared = victim(hot)
    assert spared is not None and spared.metadata.deletion_timestamp is None  # nothing evicted on the hot node
    assert metric_value(cluster.loadext.metrics(), "loadext_requests_total", outcome="ok", verb="preempt") >= 1


def test_bind_and_daemonset_pods(cluster: Cluster, exporter: Exporter, slug: str) -> None:
    hot, cool = f"{slug}-hot", f"{slug}-cool"
    for node in (hot, cool):
        make_node(cluster.core, node, slug)
    loads = {hot: (0.97, 0.3), cool: (0.3, 0.3)}
    set_load(exporter, loads)
    wait_loadext_sees(cluster, loads)
    before = metric_value(cluster.loadext.metrics(), "loadext_requests_total", outcome="ok", verb="bind")
    make_pod(cluster.core, f"{slug}-pod", slug, "loadext-scheduler-bind")
    assert scheduled_node(cluster.core, f"{slug}-pod") == cool
    assert metric_value(cluster.loadext.metrics(), "loadext_requests_total", outcome="ok", verb="bind") == before + 1

    owner = client.V1OwnerReference(
        api_version="apps/v1",
        kind="DaemonSet",
        name="node-agent",
        uid="0b9e0c5e-1f4c-4a57-9d55-6c2f3f4a2f11",
        controller=True,
    )
    make_pod(
        cluster.core,
        f"{slug}-agent",
        slug,
        "loadext-scheduler-bind",
        cpu="100m",
        node=hot,
        owner_references=[owner],
    )
    assert scheduled_node(cluster.core, f"{slug}-agent") == hot  # DaemonSet pods are never filtered
