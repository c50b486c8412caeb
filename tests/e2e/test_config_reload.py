"""A ConfigMap edit through the API applied live, and a bad one rejected with the last good
config kept.
"""

from __future__ import annotations

import time

from harness.cluster import (
    Cluster,
    e2e_config,
    make_node,
    make_pod,
    scheduled_node,
    set_load,
    unschedulable_message,
    wait_loadext_sees,
)
from harness.exporter import Exporter
from harness.metrics_text import metric_value


def test_configmap_hot_reload_through_the_api(cluster: Cluster, exporter: Exporter, slug: str) -> None:
    node = f"{slug}-warm"
    make_node(cluster.core, node, slug)
    set_load(exporter, {node: (0.85, 0.3)})
    wait_loadext_sees(cluster, {node: (0.85, 0.3)})
    make_pod(cluster.core, f"{slug}-before", slug, "loadext-scheduler")
    assert "loadext: cpu above 80%" in unschedulable_message(cluster.core, f"{slug}-before")

    good = e2e_config(cluster.proxy.url)
    relaxed = e2e_config(cluster.proxy.url)
    relaxed["signals"][0]["threshold"] = 0.9
    try:
        started = time.monotonic()
        cluster.loadext.set_config(relaxed)
        make_pod(cluster.core, f"{slug}-after", slug, "loadext-scheduler")
        assert scheduled_node(cluster.core, f"{slug}-after") == node
        assert time.monotonic() - started < 15

        applied_hash = cluster.loadext.get_json("/explain")["configHash"]
        broken = dict(relaxed, failurePolicy="sometimes")
        cluster.loadext.set_config(broken, wait=False)
        deadline = time.monotonic() + 20
        while True:
            events = cluster.core.list_namespaced_event(
                "loadext", field_selector="involvedObject.kind=ConfigMap,involvedObject.name=loadext-config"
            )
            invalid = [e for e in events.items if e.reason == "InvalidConfig"]
            if invalid:
                break
            assert time.monotonic() < deadline, "no Event on the ConfigMap for the invalid config"
            time.sleep(0.1)
        assert "failurePolicy: must be one of open, closed; got 'sometimes'" in invalid[-1].message
        assert metric_value(cluster.loadext.metrics(), "loadext_config_reloads_total", result="failure") >= 1
        assert cluster.loadext.get_json("/explain")["configHash"] == applied_hash
        assert "config reload rejected" in cluster.loadext.process.log_tail(20000)
    finally:
        cluster.loadext.set_config(good)
