"""The Helm chart installed on the real API server, and a pod placed through the chart's own
scheduler config and loadext, each running with the identity and RBAC the chart grants.

No kubelet runs, so the chart's Deployments never start containers: loadext and kube-scheduler
run here as processes with the chart's arguments, ConfigMaps and ServiceAccounts, exactly as
their pods would (only the listen and extender addresses are swapped for loopback)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import yaml
from kubernetes import client

from harness.cluster import Cluster, e2e_config, make_node, make_pod, scheduled_node, set_load
from harness.deploy import FITTED, find, template
from harness.exporter import Exporter
from harness.kubernetes import wait_until
from harness.loadext import LOADEXT
from harness.prometheus import free_port

RELEASE, NAMESPACE, SCHEDULER = "chart", "loadext-chart", "chart-loadext-scheduler"


def test_chart_installs_and_places_a_pod_by_load(
    cluster: Cluster, exporter: Exporter, slug: str, tmp_path: Path
) -> None:
    values = {
        "scheduler": {"name": "chart-scheduler"},
        "config": {key: value for key, value in e2e_config(cluster.proxy.url).items() if key != "bind"},
    }
    docs = template(RELEASE, NAMESPACE, values, tmp_path)
    plane = cluster.plane
    cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
    applied = plane.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(docs))
    assert applied.returncode == 0, applied.stderr

    pod = find(docs, "Deployment", "chart-loadext")["spec"]["template"]["spec"]
    port = free_port()
    args = [
        a.replace("$(POD_NAMESPACE)", NAMESPACE).replace("--listen=0.0.0.0:8888", f"--listen=127.0.0.1:{port}")
        for a in pod["containers"][0]["args"]
    ]
    # In a pod the service account's token is mounted; here it comes as a kubeconfig.
    identity = plane.service_account_kubeconfig(NAMESPACE, pod["serviceAccountName"])
    args.insert(args.index("serve") + 1, f"--kubeconfig={identity}")
    loadext = plane.spawn("chart-loadext", [*LOADEXT, *args])

    scheduler_pod = find(docs, "Deployment", SCHEDULER)["spec"]["template"]["spec"]
    scheduler_config = yaml.safe_load(find(docs, "ConfigMap", f"{SCHEDULER}-config")["data"]["scheduler-config.yaml"])
    scheduler_config["extenders"][0]["urlPrefix"] = f"http://127.0.0.1:{port}"
    scheduler_identity = plane.service_account_kubeconfig(NAMESPACE, scheduler_pod["serviceAccountName"])
    plane.start_scheduler("chart-scheduler", scheduler_config, scheduler_identity)

    hot, cool = f"{slug}-hot", f"{slug}-cool"
    make_node(cluster.core, hot, slug, cpu="64", memory="256Gi")  # most free room by requests
    make_node(cluster.core, cool, slug)
    set_load(exporter, {hot: (0.95, 0.3), cool: (0.2, 0.3)})

    def sees_load() -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/explain", timeout=5) as reply:
            rows = {row["node"]: row["signals"] for row in json.load(reply)["nodes"]}
        return bool(rows.get(hot, {}).get("cpu", {}).get("value") == 0.95)

    wait_until(sees_load, "the chart's loadext to see the nodes' load", process=loadext)
    make_pod(cluster.core, f"{slug}-0", slug, "chart-scheduler")
    assert scheduled_node(cluster.core, f"{slug}-0", timeout=60) == cool


def test_a_chart_fitted_with_every_placement_value_applies(cluster: Cluster, tmp_path: Path) -> None:
    """The render with every placement, volume, env and Secret value set is accepted by the real
    API server, and what it stored is what the values said (no ServiceMonitor: this API server
    has no Prometheus Operator CRDs)."""
    namespace = "loadext-fitted"
    values = {**FITTED, "serviceMonitor": {"enabled": False}}
    docs = template("fitted", namespace, values, tmp_path)
    cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    applied = cluster.plane.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(docs))
    assert applied.returncode == 0, applied.stderr
    stored = client.AppsV1Api(cluster.core.api_client).read_namespaced_deployment("fitted-loadext", namespace)
    pod = stored.spec.template.spec
    assert pod.priority_class_name == "system-cluster-critical" and pod.node_selector == FITTED["nodeSelector"]
    assert [t.key for t in pod.tolerations] == ["infra"]
    assert pod.topology_spread_constraints[0].when_unsatisfiable == "DoNotSchedule"
    assert {v.name for v in pod.volumes} >= {"prometheus-auth", "scratch"}
