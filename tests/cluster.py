"""Session fixtures for the end-to-end and Kubernetes fault suites: a real etcd, kube-apiserver
and kube-schedulers (built from their Go modules), the shipped manifests applied to it, and
`loadext serve` with the identity and RBAC those manifests grant, fed by the real Prometheus of
the core tests. Registered for the whole suite by the root conftest (pytest_plugins)."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from kubernetes import client

from harness.faultproxy import FaultProxy
from harness.kubernetes import ROOT, ControlPlane, Process, build_components, wait_until
from harness.loadext import LOADEXT
from harness.prometheus import free_port
from loadext.config import parse_config

E2E_NAMESPACE = "e2e"
CASE_LABEL = "loadext-e2e/case"


def render(cluster: ControlPlane, kustomization: str) -> list[dict[str, Any]]:
    result = cluster.kubectl("kustomize", str(ROOT / "manifests" / kustomization))
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def shipped_scheduler_config(cluster: ControlPlane, kustomization: str) -> dict[str, Any]:
    """The KubeSchedulerConfiguration exactly as manifests/ ship it."""
    configmap = next(
        d
        for d in render(cluster, kustomization)
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("loadext-scheduler-config")
    )
    parsed: dict[str, Any] = yaml.safe_load(configmap["data"]["scheduler-config.yaml"])
    return parsed


def e2e_config(prometheus_url: str, **overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "prometheus": {"url": prometheus_url, "timeout": "500ms"},
        "refreshInterval": "250ms",
        "maxDataAge": "3s",
        "nodeIdentity": {"label": "node", "kind": "name"},
        "signals": [
            {"name": "cpu", "query": "loadext_e2e_cpu", "threshold": 0.8, "weight": 1},
            {"name": "memory", "query": "loadext_e2e_memory", "threshold": 0.9, "weight": 1},
        ],
        "failurePolicy": "open",
        "bind": {"enabled": True},
    }
    config.update(overrides)
    return config


@dataclass
class LoadextProcess:
    url: str
    process: Process
    core: Any  # CoreV1Api as admin

    def get_json(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=5) as reply:
            return json.load(reply)

    def metrics(self) -> str:
        with urllib.request.urlopen(self.url + "/metrics", timeout=5) as reply:
            return str(reply.read().decode())

    def set_config(self, config: dict[str, Any] | str, wait: bool = True) -> None:
        """Update the ConfigMap through the API, as `kubectl edit` would, and wait until applied."""
        text = config if isinstance(config, str) else yaml.safe_dump(config)
        self.core.patch_namespaced_config_map("loadext-config", "loadext", {"data": {"config.yaml": text}})
        if wait:
            expected = parse_config(text).hash
            wait_until(
                lambda: self.get_json("/explain")["configHash"] == expected,
                "loadext to apply the config",
                timeout=30,
                process=self.process,
            )


@dataclass
class Cluster:
    plane: ControlPlane
    core: Any
    loadext: LoadextProcess
    schedulers: dict[str, Process]
    proxy: FaultProxy


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory, proxy: FaultProxy) -> Iterator[Cluster]:
    bin_dir = build_components()
    plane = ControlPlane(tmp_path_factory.mktemp("k8s"), bin_dir)
    try:
        plane.start()
        # The shipped manifests, for real: namespace, service accounts, RBAC, ConfigMaps, workloads.
        applied = plane.kubectl("apply", "--server-side", "-k", str(ROOT / "manifests" / "overlays" / "bind"))
        assert applied.returncode == 0, applied.stderr
        core = client.CoreV1Api(plane.api())
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=E2E_NAMESPACE)))
        config_text = yaml.safe_dump(e2e_config(proxy.url))
        core.patch_namespaced_config_map("loadext-config", "loadext", {"data": {"config.yaml": config_text}})

        port = free_port()
        loadext_kubeconfig = plane.service_account_kubeconfig("loadext", "loadext")
        process = plane.spawn(
            "loadext",
            [
                *LOADEXT,
                "serve",
                "--configmap",
                "loadext/loadext-config",
                "--kubeconfig",
                str(loadext_kubeconfig),
                "--watch-nodes",
                "--listen",
                f"127.0.0.1:{port}",
            ],
        )
        loadext = LoadextProcess(f"http://127.0.0.1:{port}", process, core)
        wait_until(lambda: loadext.get_json("/explain") is not None, "loadext", process=process)

        scheduler_kubeconfig = plane.service_account_kubeconfig("loadext", "loadext-scheduler")
        schedulers = {}
        for name, kustomization, changes in [
            ("loadext-scheduler", "base", {}),
            ("loadext-scheduler-nocache", "base", {"nodeCacheCapable": False}),
            ("loadext-scheduler-bind", "overlays/bind", {}),
        ]:
            shipped = shipped_scheduler_config(plane, kustomization)
            shipped["profiles"][0]["schedulerName"] = name
            shipped["extenders"][0].update(changes, urlPrefix=loadext.url)  # loopback instead of the Service
            schedulers[name] = plane.start_scheduler(name, shipped, scheduler_kubeconfig)
        # The shipped extender entry, but nothing listens at its URL: ignorable must carry the day.
        unreachable = shipped_scheduler_config(plane, "base")
        unreachable["profiles"][0]["schedulerName"] = "loadext-scheduler-unreachable"
        unreachable["extenders"][0]["urlPrefix"] = f"http://127.0.0.1:{free_port()}"
        schedulers["loadext-scheduler-unreachable"] = plane.start_scheduler(
            "loadext-scheduler-unreachable", unreachable, scheduler_kubeconfig
        )
        plain = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [{"schedulerName": "plain-scheduler"}],
        }
        schedulers["plain-scheduler"] = plane.start_scheduler("plain-scheduler", plain, scheduler_kubeconfig)
        yield Cluster(plane, core, loadext, schedulers, proxy)
    finally:
        plane.stop()


@pytest.fixture
def slug(request: pytest.FixtureRequest) -> str:
    """A DNS-safe name unique to the test, for its nodes, pods and case label."""
    name = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower().removeprefix("test_")).strip("-")
    return name[:40].strip("-")
