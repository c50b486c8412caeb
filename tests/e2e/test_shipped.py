"""The shipped manifests and scheduler configuration on the real API server: they pass
server-side validation, the schedulers run them, and loadext's one write to Nodes is its
annotation.
"""

from __future__ import annotations

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from harness.cluster import (
    CASE_LABEL,
    Cluster,
    make_node,
    render,
)


@pytest.mark.parametrize("kustomization", ["base", "overlays/bind", "overlays/default-scheduler", "overlays/mtls"])
def test_manifests_pass_server_side_dry_run(cluster: Cluster, kustomization: str) -> None:
    # cert-manager's kinds need its CRDs, which this cluster does not have: everything else is
    # checked by the real API server (test_manifests.py checks how the Certificates are wired).
    docs = [d for d in render(cluster.plane, kustomization) if not d["apiVersion"].startswith("cert-manager.io/")]
    result = cluster.plane.kubectl(
        "apply", "--dry-run=server", "--server-side", "--force-conflicts", "-f", "-", stdin=yaml.safe_dump_all(docs)
    )
    assert result.returncode == 0, result.stderr
    kinds = {doc["kind"] for doc in docs}
    assert {"Deployment", "Service", "ConfigMap", "ClusterRole", "NetworkPolicy"} <= kinds
    assert result.stdout.count("(server dry run)") == len(docs)


def test_the_schedulers_run_the_shipped_config(cluster: Cluster) -> None:
    shipped = yaml.safe_load(
        next(d for d in render(cluster.plane, "base") if d["metadata"]["name"].startswith("loadext-scheduler-config"))[
            "data"
        ]["scheduler-config.yaml"]
    )
    running = yaml.safe_load((cluster.plane.workdir / "loadext-scheduler.yaml").read_text())
    assert running["extenders"][0] == dict(shipped["extenders"][0], urlPrefix=cluster.loadext.url)
    with pytest.raises(ApiException):  # least privilege: loadext's identity cannot read Secrets
        client.CoreV1Api(
            cluster.plane.api(cluster.plane.workdir / "loadext-loadext.kubeconfig")
        ).list_secret_for_all_namespaces()


def test_loadexts_node_writes_are_its_annotation_and_its_taints(cluster: Cluster, slug: str) -> None:
    """RBAC grants loadext `patch` on nodes for --requeue-stranded and rebalance taints; the
    shipped admission policy narrows it to the annotation loadext.io/reopened and loadext's own
    two taints (docs/security.md)."""
    make_node(cluster.core, slug, slug)
    as_loadext = client.CoreV1Api(cluster.plane.api(cluster.plane.workdir / "loadext-loadext.kubeconfig"))
    as_loadext.patch_node(slug, {"metadata": {"annotations": {"loadext.io/reopened": "now"}}})
    ours = [
        {"key": "loadext.io/hot", "effect": "PreferNoSchedule"},
        {"key": "loadext.io/refused", "effect": "NoSchedule"},
    ]
    as_loadext.patch_node(slug, {"spec": {"taints": ours}})
    for change in (
        {"spec": {"taints": [{"key": "loadext.io/hot", "effect": "NoExecute"}]}},  # its key, another effect
        {"metadata": {"labels": {CASE_LABEL: "elsewhere"}}},
        {"metadata": {"annotations": {"other.example/key": "x"}}},
        {"spec": {"unschedulable": True}},
        {"spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}},
    ):
        with pytest.raises(ApiException) as refused:
            as_loadext.patch_node(slug, change)
        assert refused.value.status in (403, 422) and "loadext.io/reopened" in str(refused.value.body), change
    node = cluster.core.read_node(slug)
    assert node.metadata.annotations["loadext.io/reopened"] == "now" and not node.spec.unschedulable
    assert [(t.key, t.effect) for t in node.spec.taints] == [(t["key"], t["effect"]) for t in ours]
    assert node.metadata.labels[CASE_LABEL] == slug
    cluster.core.patch_node(slug, {"metadata": {"labels": {"admin": "may"}}})  # others are not bound by it
