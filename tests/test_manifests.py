"""The shipped manifests render, and the config they ship is valid loadext config."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from loadext.config import parse_config

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "manifests"
KUSTOMIZATIONS = ["base", "overlays/bind", "overlays/default-scheduler"]


def render(kustomization: str) -> list[dict]:  # type: ignore[type-arg]
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is required to render the manifests (scripts/setup.sh builds it)")
    out = subprocess.run(
        [kubectl, "kustomize", str(MANIFESTS / kustomization)], capture_output=True, text=True, check=True
    )
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def configmap(docs: list[dict], prefix: str) -> dict:  # type: ignore[type-arg]
    return next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith(prefix))


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_shipped_loadext_config_is_valid(kustomization: str) -> None:
    docs = render(kustomization)
    config = parse_config(configmap(docs, "loadext-config")["data"]["config.yaml"])
    assert config.bind_enabled is (kustomization == "overlays/bind")


def test_rbac_grants_binding_only_in_the_bind_overlay() -> None:
    def loadext_resources(docs: list[dict]) -> set[str]:  # type: ignore[type-arg]
        role = next(d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "loadext")
        return {r for rule in role["rules"] for r in rule["resources"]}

    assert "pods/binding" not in loadext_resources(render("base"))
    assert "pods/binding" in loadext_resources(render("overlays/bind"))
    bind_scheduler = yaml.safe_load(
        configmap(render("overlays/bind"), "loadext-scheduler-config")["data"]["scheduler-config.yaml"]
    )
    assert bind_scheduler["extenders"][0]["bindVerb"] == "bind"


def test_workloads_run_as_non_root_with_read_only_root() -> None:
    for doc in render("base"):
        if doc["kind"] != "Deployment":
            continue
        pod = doc["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        for container in pod["containers"]:
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            assert "livenessProbe" in container and "readinessProbe" in container
