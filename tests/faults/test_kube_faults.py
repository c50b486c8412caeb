"""Kubernetes-side faults on the real control plane, with the real kube-scheduler calling
loadext, and what the scheduler sees in each:

- ConfigMap deleted: loadext keeps deciding with the last good config (reload metric 0, the
  deletion logged); pods keep avoiding the hot node. Re-created: applied again.
- loadext killed (SIGKILL) mid-burst and restarted: the scheduler's calls are refused, and the
  shipped `ignorable: true` lets it schedule on requests alone meanwhile; every pod of the burst
  is bound, none lost or stuck, and loadext's decisions resume after the restart.
- API server down and back: loadext keeps answering from memory (the watches report unhealthy);
  afterwards the watches re-list, so a node deleted and one created right after the restart are
  seen (no stale cache kept), a ConfigMap edit applies, and pods are placed through loadext.

- A replica started while the API server is down: alive and not ready, saying why, until it can
  read its ConfigMap; then it serves. One refused its ConfigMap (403) exits once the refusal has
  held for 30 s, saying so.

The API server tests run last: they take the shared control plane down for a few seconds.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from kubernetes import client

from harness.cluster import (
    E2E_NAMESPACE,
    Cluster,
    e2e_config,
    make_node,
    make_pod,
    scenario,
    scheduled_node,
    set_load,
    wait_loadext_sees,
)
from harness.exporter import Exporter
from harness.kubernetes import wait_until
from harness.metrics_text import metric_if_present, metric_value
from harness.prometheus import free_port
from harness.wire import fixture_bytes
from loadext.sources.kube import REFUSAL_WAITED

pytestmark = pytest.mark.e2e


def test_configmap_deleted_keeps_the_last_good_config(cluster: Cluster, exporter: Exporter, slug: str) -> None:
    nodes = scenario(cluster, exporter, slug)
    in_force = cluster.loadext.get_json("/explain")["configHash"]
    saved = cluster.core.read_namespaced_config_map("loadext-config", "loadext")
    cluster.core.delete_namespaced_config_map("loadext-config", "loadext")
    try:
        wait_until(
            lambda: metric_value(cluster.loadext.metrics(), "loadext_config_last_reload_successful") == 0,
            "loadext to notice the deletion",
            timeout=20,
        )
        assert cluster.loadext.get_json("/explain")["configHash"] == in_force
        assert "was deleted" in cluster.loadext.process.log_tail(20000)
        make_pod(cluster.core, f"{slug}-0", slug, "loadext-scheduler")
        assert scheduled_node(cluster.core, f"{slug}-0") == nodes["cool"]
    finally:
        cluster.core.create_namespaced_config_map(
            "loadext", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="loadext-config"), data=saved.data)
        )
    wait_until(
        lambda: metric_value(cluster.loadext.metrics(), "loadext_config_last_reload_successful") == 1,
        "the re-created ConfigMap to be accepted",
        timeout=20,
    )


def _bound(cluster: Cluster, prefix: str) -> dict[str, str]:
    pods = cluster.core.list_namespaced_pod(E2E_NAMESPACE).items
    return {p.metadata.name: p.spec.node_name for p in pods if p.metadata.name.startswith(prefix) and p.spec.node_name}


def test_loadext_killed_mid_burst_the_scheduler_keeps_scheduling(
    cluster: Cluster, exporter: Exporter, slug: str
) -> None:
    nodes = scenario(cluster, exporter, slug)
    count = 20
    for i in range(count):
        make_pod(cluster.core, f"{slug}-burst-{i}", slug, "loadext-scheduler", cpu="100m", memory="64Mi")
    wait_until(lambda: len(_bound(cluster, f"{slug}-burst-")) >= 3, "the burst to start", timeout=30)
    cluster.loadext.crash_and_restart(down_for=3.0)
    wait_until(lambda: len(_bound(cluster, f"{slug}-burst-")) == count, "every pod of the burst bound", timeout=90)
    # loadext is back: its decisions steer placement again.
    wait_loadext_sees(cluster, {nodes["big"]: (0.95, 0.3), nodes["cool"]: (0.2, 0.3)})
    for i in range(3):
        make_pod(cluster.core, f"{slug}-after-{i}", slug, "loadext-scheduler", cpu="100m", memory="64Mi")
        assert scheduled_node(cluster.core, f"{slug}-after-{i}") == nodes["cool"]


def _watch_healthy(cluster: Cluster, resource: str) -> float | None:
    return metric_if_present(cluster.loadext.metrics(), "loadext_kube_watch_healthy", resource=resource)


def _explained_nodes(cluster: Cluster) -> set[str]:
    return {row["node"] for row in cluster.loadext.get_json("/explain")["nodes"]}


def _filter(cluster: Cluster, names: list[str]) -> dict[str, Any]:
    body = json.loads(fixture_bytes("filter-names.json"))
    body["NodeNames"] = names
    request = urllib.request.Request(cluster.loadext.url + "/filter", data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=5) as reply:
        assert reply.status == 200
        result: dict[str, Any] = json.load(reply)
        return result


def test_apiserver_down_and_back_watches_resume(cluster: Cluster, exporter: Exporter, slug: str) -> None:
    gone, stays, new = f"{slug}-gone", f"{slug}-stays", f"{slug}-new"
    make_node(cluster.core, gone, slug)
    make_node(cluster.core, stays, slug)
    set_load(exporter, {stays: (0.2, 0.2)})
    wait_until(lambda: {gone, stays} <= _explained_nodes(cluster), "loadext to list both nodes", timeout=20)
    assert _watch_healthy(cluster, "nodes") == 1 and _watch_healthy(cluster, "configmap") == 1

    cluster.plane.stop_apiserver()
    try:
        wait_until(lambda: _watch_healthy(cluster, "nodes") == 0, "the node watch to report the outage", timeout=30)
        # The scheduler's calls are still answered, from memory: decisions on data, not errors.
        assert _filter(cluster, [stays])["NodeNames"] == [stays]
        assert {gone, stays} <= _explained_nodes(cluster)  # the last known nodes are kept meanwhile
    finally:
        cluster.plane.start_apiserver()

    cluster.core.delete_node(gone)  # changes right after the restart, before loadext is back
    make_node(cluster.core, new, slug)
    wait_until(
        lambda: new in _explained_nodes(cluster) and gone not in _explained_nodes(cluster),
        "the node watch to resume and drop the deleted node",
        timeout=90,
    )
    wait_until(lambda: _watch_healthy(cluster, "configmap") == 1, "the ConfigMap watch to resume", timeout=90)
    relaxed = e2e_config(cluster.proxy.url)
    relaxed["signals"][0]["threshold"] = 0.85
    try:
        cluster.loadext.set_config(relaxed)  # waits until loadext reports the new hash
    finally:
        cluster.loadext.set_config(e2e_config(cluster.proxy.url))
    make_pod(cluster.core, f"{slug}-pod", slug, "loadext-scheduler", node=stays)
    assert scheduled_node(cluster.core, f"{slug}-pod", timeout=90) == stays


def _argv_with(cluster: Cluster, values: dict[str, str]) -> list[str]:
    """The shared loadext's command line with these flags' values changed."""
    argv = list(cluster.loadext.argv)
    for flag, value in values.items():
        argv[argv.index(flag) + 1] = value
    return argv


def _answer(url: str, data: bytes | None = None) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_a_replica_started_during_an_api_server_outage_waits_then_serves(cluster: Cluster) -> None:
    """Its ConfigMap unreadable at start, a replica stays up: alive, not ready, the cause said to
    the probes and the scheduler, and serving the ConfigMap's config once the API server is back.
    Exiting would leave its restart to the kubelet's growing backoff."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cluster.plane.stop_apiserver()
    try:
        late = cluster.plane.spawn("loadext-late", _argv_with(cluster, {"--listen": f"127.0.0.1:{port}"}))
        wait_until(lambda: _answer(url + "/healthz") == (200, "ok\n"), "the replica to listen", 30, late)
        cause = f"reading ConfigMap loadext/loadext-config failed: connection refused to {cluster.plane.url}"
        assert _answer(url + "/readyz") == (503, f"waiting for the config: {cause}\n")
        status, body = _answer(url + "/filter", fixture_bytes("filter-names.json"))
        assert (status, json.loads(body)) == (503, {"error": f"loadext is starting, waiting for its config: {cause}"})
    finally:
        cluster.plane.start_apiserver()
    wait_until(lambda: _answer(url + "/readyz") == (200, "ready\n"), "the replica to be ready", 60, late)
    status, body = _answer(url + "/explain")
    assert status == 200
    assert json.loads(body)["configHash"] == cluster.loadext.get_json("/explain")["configHash"]
    assert "config read after waiting" in late.log_tail(20000)
    late.stop()


def test_a_replica_refused_its_configmap_exits_once_the_refusal_holds_saying_so(cluster: Cluster) -> None:
    """A refusal is waited out for REFUSAL_WAITED (an API server just back refuses what it will
    allow), then believed: the process ends with the cause, for its kubelet to show."""
    argv = _argv_with(cluster, {"--configmap": "loadext/no-such-config", "--listen": f"127.0.0.1:{free_port()}"})
    started = time.monotonic()
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert result.returncode == 4, result.stderr
    assert time.monotonic() - started >= REFUSAL_WAITED
    assert "Traceback" not in result.stderr
    cause = f"reading ConfigMap loadext/no-such-config failed: 403 Forbidden ({cluster.plane.url})"
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == [f"error: {cause}"]
    assert f"waiting for the config: {cause}; trying again in 1s" in result.stderr
