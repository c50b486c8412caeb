"""What the real kube-scheduler does when Prometheus or loadext cannot be reached, and loadext
served over mTLS as the scheduler reaches it.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.request
from pathlib import Path

import yaml

from harness.certs import make_ca, make_cert
from harness.cluster import (
    Cluster,
    e2e_config,
    make_node,
    make_pod,
    scheduled_node,
    set_load,
    shipped_scheduler_config,
    wait_loadext_sees,
)
from harness.exporter import Exporter
from harness.kubernetes import wait_until
from harness.loadext import serve_argv
from harness.metrics_text import metric_value
from harness.prometheus import free_port


def test_prometheus_unreachable_fails_open(cluster: Cluster, exporter: Exporter, slug: str) -> None:
    node = f"{slug}-hot"
    make_node(cluster.core, node, slug)
    set_load(exporter, {node: (0.99, 0.99)})
    wait_loadext_sees(cluster, {node: (0.99, 0.99)})
    cluster.proxy.set("down")
    try:
        deadline = time.monotonic() + 20
        while metric_value(cluster.loadext.metrics(), "loadext_degraded") != 1:
            assert time.monotonic() < deadline, "loadext never went degraded"
            time.sleep(0.1)
        make_pod(cluster.core, f"{slug}-pod", slug, "loadext-scheduler")
        assert scheduled_node(cluster.core, f"{slug}-pod") == node  # failurePolicy open
    finally:
        cluster.proxy.set("pass")


def test_the_real_scheduler_over_mtls(cluster: Cluster, exporter: Exporter, slug: str, tmp_path: Path) -> None:
    """kube-scheduler's extender client with enableHTTPS and a client certificate (tlsConfig)
    against loadext serving mTLS: the only way to authenticate the scheduler."""
    ca = make_ca(tmp_path, "extender-ca")
    server = make_cert(tmp_path, ca, "loadext", "IP:127.0.0.1,DNS:loadext.loadext.svc")
    client_cert = make_cert(tmp_path, ca, "kube-scheduler")
    config = tmp_path / "loadext.yaml"
    config.write_text(yaml.safe_dump(e2e_config(cluster.proxy.url)))
    port = free_port()
    loadext = cluster.plane.spawn(
        f"loadext-mtls-{slug}",
        serve_argv(
            config, port, "--tls-cert", str(server[0]), "--tls-key", str(server[1]), "--tls-client-ca", str(ca[0])
        ),
    )
    # The extender entry of the shipped mTLS overlay; only the address, the certificate paths
    # (Secret mounts in a pod) and ignorable (to make a failed handshake visible) differ.
    shipped = shipped_scheduler_config(cluster.plane, "overlays/mtls")
    shipped["profiles"][0]["schedulerName"] = "loadext-scheduler-mtls"
    extender = shipped["extenders"][0]
    assert extender["enableHTTPS"] is True and extender["tlsConfig"]["serverName"] == "loadext.loadext.svc"
    extender.update(urlPrefix=f"https://127.0.0.1:{port}", ignorable=False)
    extender["tlsConfig"].update(caFile=str(ca[0]), certFile=str(client_cert[0]), keyFile=str(client_cert[1]))
    scheduler = cluster.plane.start_scheduler(
        "loadext-scheduler-mtls", shipped, cluster.plane.workdir / "loadext-loadext-scheduler.kubeconfig"
    )
    try:
        hot, cool = f"{slug}-hot", f"{slug}-cool"
        for node in (hot, cool):
            make_node(cluster.core, node, slug)
        set_load(exporter, {hot: (0.97, 0.3), cool: (0.3, 0.3)})
        context = ssl.create_default_context(cafile=str(ca[0]))
        context.load_cert_chain(str(client_cert[0]), str(client_cert[1]))
        context.check_hostname = False  # the serving certificate names the Service; we dial 127.0.0.1

        def sees_hot() -> bool:
            with urllib.request.urlopen(
                f"https://127.0.0.1:{port}/explain?node={hot}", context=context, timeout=2
            ) as reply:
                rows = json.load(reply)["nodes"]
            return bool(rows) and rows[0]["signals"].get("cpu", {}).get("value") == 0.97

        wait_until(sees_hot, "the mTLS loadext to see the nodes", timeout=30, process=loadext)
        make_pod(cluster.core, f"{slug}-pod", slug, "loadext-scheduler-mtls")
        # not ignorable: had the TLS handshake failed, the pod would stay Pending with an error
        assert scheduled_node(cluster.core, f"{slug}-pod", timeout=45) == cool
    finally:
        scheduler.stop()
        loadext.stop()


def test_loadext_unreachable_is_ignorable(cluster: Cluster, exporter: Exporter, slug: str) -> None:
    node = f"{slug}-only"
    make_node(cluster.core, node, slug)
    make_pod(cluster.core, f"{slug}-pod", slug, "loadext-scheduler-unreachable")
    assert scheduled_node(cluster.core, f"{slug}-pod") == node
