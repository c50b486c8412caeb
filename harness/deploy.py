"""Render what platform teams apply: the kustomize manifests (kubectl kustomize) and the Helm
chart (helm template), with the real tools that scripts/test.sh builds from their Go modules and
puts on PATH."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "loadext"
MANIFESTS = ROOT / "manifests"


def kustomize(kustomization: str | Path) -> list[dict[str, Any]]:
    """manifests/<kustomization> (or any kustomization folder) as `kubectl apply -k` would send it."""
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is required to render the manifests (scripts/test.sh builds it)"
    folder = kustomization if isinstance(kustomization, Path) else MANIFESTS / kustomization
    result = subprocess.run([kubectl, "kustomize", str(folder)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


# helm template assumes Kubernetes 1.20 unless told; the chart needs 1.30 (Chart.yaml kubeVersion).
KUBE_VERSION = "1.36.3"


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("helm")
    assert binary, "helm is required (charts/build-helm.sh builds it; scripts/test.sh puts it on PATH)"
    if args and args[0] == "template":
        args = (*args, "--kube-version", KUBE_VERSION)
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=120)


def template(
    release: str = "loadext",
    namespace: str = "loadext",
    values: dict[str, Any] | None = None,
    workdir: Path | None = None,
) -> list[dict[str, Any]]:
    """The chart's objects for these values (written to a values file, as a user would)."""
    args = ["template", release, str(CHART), "--namespace", namespace]
    if values:
        assert workdir is not None, "values need a folder for their file"
        path = workdir / f"values-{release}.yaml"
        path.write_text(yaml.safe_dump(values))
        args += ["--values", str(path)]
    result = helm(*args)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


# Every value a platform team needs to fit the chart to its cluster, set at once.
FITTED: dict[str, Any] = {
    "replicas": 3,
    "nodeSelector": {"node-role.kubernetes.io/infra": ""},
    "tolerations": [{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["infra"]}]}}
    ]}},
    "topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "loadext"}}}
    ],
    "priorityClassName": "system-cluster-critical",
    "podAnnotations": {"example.com/owner": "platform"},
    "podLabels": {"team": "platform"},
    "extraEnv": [{"name": "NO_PROXY", "value": ".svc,.cluster.local"}],
    "extraVolumes": [{"name": "scratch", "emptyDir": {}}],
    "extraVolumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
    "prometheusAuth": {"secretName": "prometheus-credentials"},
    "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/loadext"}},
    "serviceMonitor": {"enabled": True, "labels": {"release": "monitoring"}},
    "dashboards": {"enabled": True},
    "scheduler": {"replicas": 1, "nodeSelector": {"node-role.kubernetes.io/infra": ""},
                  "tolerations": [{"key": "infra", "operator": "Exists"}], "priorityClassName": "system-node-critical"},
}  # fmt: skip
