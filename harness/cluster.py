"""Session fixtures (a pytest plugin) for the end-to-end and Kubernetes fault suites: a real etcd, kube-apiserver
and kube-schedulers (built from their Go modules), the shipped manifests applied to it, and
`loadext serve` with the identity and RBAC those manifests grant, fed by the real Prometheus of
the core tests. Registered for the whole suite by tests/conftest.py (pytest_plugins)."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml
from kubernetes import client

from harness.config import loadext_config
from harness.exporter import Exporter
from harness.faultproxy import FaultProxy
from harness.kubernetes import ROOT, ControlPlane, Process, build_components, ready_node_status, wait_until
from harness.loadext import LOADEXT
from harness.metrics_text import metric_if_present
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
    """The e2e loadext: gauges loadext_e2e_{cpu,memory}, fast refresh, short data age, bind on."""
    settings: dict[str, Any] = {"failurePolicy": "open", "bind": {"enabled": True}, **overrides}
    return loadext_config(
        prometheus_url, "loadext_e2e_cpu", "loadext_e2e_memory", refresh="250ms", max_age="3s", **settings
    )


@dataclass
class LoadextProcess:
    url: str
    process: Process
    core: Any  # CoreV1Api as admin
    plane: ControlPlane
    argv: list[str]

    def crash_and_restart(self, down_for: float) -> None:
        """SIGKILL (no drain at all), stay down `down_for` seconds, start again."""
        self.process.proc.kill()
        self.process.stop()
        time.sleep(down_for)
        self.process = self.plane.spawn("loadext-restarted", self.argv)
        wait_until(lambda: self.get_json("/explain") is not None, "loadext back", process=self.process)

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
        argv = [
            *LOADEXT,
            "serve",
            "--configmap",
            "loadext/loadext-config",
            "--kubeconfig",
            str(loadext_kubeconfig),
            "--watch-nodes",
            "--requeue-stranded",  # as shipped
            "--listen",
            f"127.0.0.1:{port}",
        ]
        process = plane.spawn("loadext", argv)
        loadext = LoadextProcess(f"http://127.0.0.1:{port}", process, core, plane, argv)
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


# --- helpers for tests on the cluster -----------------------------------------------------


def make_node(
    core: Any, name: str, case: str, cpu: str = "8", memory: str = "32Gi", ip: str = "", **extra_labels: str
) -> None:
    labels = {CASE_LABEL: case, "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **extra_labels}
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name, labels=labels)))
    # The TaintNodesByCondition admission plugin taints new nodes not-ready; the node lifecycle
    # controller would lift it once the kubelet reports Ready. Neither runs here: do both.
    core.patch_node(name, {"spec": {"taints": None}})
    core.patch_node_status(name, {"status": ready_node_status(name, cpu, memory, ip)})


def make_pod(
    core: Any,
    name: str,
    case: str,
    scheduler: str,
    cpu: str = "2",
    memory: str = "1Gi",
    node: str | None = None,
    **spec: Any,
) -> None:
    selector = {CASE_LABEL: case}
    if node is not None:
        selector["kubernetes.io/hostname"] = node
    owners = spec.pop("owner_references", None)
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, namespace=E2E_NAMESPACE, owner_references=owners),
        spec=client.V1PodSpec(
            scheduler_name=scheduler,
            node_selector=selector,
            termination_grace_period_seconds=0,
            containers=[
                client.V1Container(
                    name="app",
                    image="registry.k8s.io/pause:3.10",
                    resources=client.V1ResourceRequirements(requests={"cpu": cpu, "memory": memory}),
                )
            ],
            **spec,
        ),
    )
    core.create_namespaced_pod(E2E_NAMESPACE, pod)


def scheduled_node(core: Any, name: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pod = core.read_namespaced_pod(name, E2E_NAMESPACE)
        if pod.spec.node_name:
            return str(pod.spec.node_name)
        time.sleep(0.1)
    raise AssertionError(f"pod {name} not scheduled within {timeout}s: {pod.status.conditions}")


def create_burst(
    core: Any,
    slug: str,
    run: str,
    count: int,
    cpu: tuple[str, str] = ("100m", "8"),
    scheduler: str = "loadext-scheduler",
) -> list[str]:
    """`count` pods at once, each requesting little (cpu: request, limit; by default allowed
    up to 8 cores), for `scheduler`; their names."""
    resources = client.V1ResourceRequirements(
        requests={"cpu": cpu[0], "memory": "128Mi"}, limits={"cpu": cpu[1], "memory": "1Gi"}
    )
    names = [f"{slug}-{run}-{i}" for i in range(count)]
    for name in names:
        pod = client.V1Pod(
            metadata=client.V1ObjectMeta(name=name, namespace=E2E_NAMESPACE, labels={"run": run}),
            spec=client.V1PodSpec(
                scheduler_name=scheduler,
                node_selector={CASE_LABEL: slug},
                termination_grace_period_seconds=0,
                containers=[client.V1Container(name="app", image="registry.k8s.io/pause:3.10", resources=resources)],
            ),
        )
        core.create_namespaced_pod(E2E_NAMESPACE, pod)
    return names


def placements(core: Any, names: list[str], timeout: float = 60) -> dict[str, int]:
    """node -> how many of these pods went there, once each is bound."""
    placed: dict[str, int] = {}
    for name in names:
        node = scheduled_node(core, name, timeout=timeout)
        placed[node] = placed.get(node, 0) + 1
    return placed


def burst(
    cluster: Cluster, slug: str, run: str, count: int, cpu: tuple[str, str] = ("100m", "8"), timeout: float = 60
) -> dict[str, int]:
    """A burst through loadext-scheduler, and where it landed."""
    return placements(cluster.core, create_burst(cluster.core, slug, run, count, cpu), timeout)


def ten_nodes_one_idle(cluster: Cluster, exporter: Exporter, slug: str) -> dict[str, tuple[float, float]]:
    """Issue #15's burst target: 10 nodes of 16 cores, one idle and nine at 35-50 % CPU, as
    loadext sees them; node -> (cpu, memory) load."""
    nodes = [f"{slug}-{i}" for i in range(10)]
    for node in nodes:
        make_node(cluster.core, node, slug, cpu="16", memory="64Gi")
    loads = {node: (0.02 if i == 0 else round(0.35 + 0.15 * (i - 1) / 8, 3), 0.3) for i, node in enumerate(nodes)}
    set_load(exporter, loads)
    wait_loadext_sees(cluster, loads)
    return loads


def level_shares(loads: dict[str, tuple[float, float]], pods: int, per_pod: float) -> dict[str, float]:
    """node -> pods it gets when `pods` pods of `per_pod` CPU ratio each bring every node to one
    level: the placement that evens out load, which the herd guard's estimates aim at."""
    level = (sum(cpu for cpu, _ in loads.values()) + pods * per_pod) / len(loads)
    return {node: (level - cpu) / per_pod for node, (cpu, _) in loads.items()}


def unschedulable_message(core: Any, name: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pod = core.read_namespaced_pod(name, E2E_NAMESPACE)
        assert not pod.spec.node_name, f"{name} was scheduled to {pod.spec.node_name}"
        for condition in pod.status.conditions or []:
            if condition.type == "PodScheduled" and condition.status == "False" and condition.message:
                return str(condition.message)
        time.sleep(0.1)
    raise AssertionError(f"pod {name} has no PodScheduled=False condition")


def set_load(exporter: Exporter, loads: dict[str, tuple[float, float]]) -> None:
    for node, (cpu, memory) in loads.items():
        exporter.set_gauge("loadext_e2e_cpu", cpu, node=node)
        exporter.set_gauge("loadext_e2e_memory", memory, node=node)


def wait_loadext_sees(cluster: Cluster, loads: dict[str, tuple[float, float]]) -> None:
    def sees() -> bool:
        rows = {r["node"]: r["signals"] for r in cluster.loadext.get_json("/explain")["nodes"]}
        return all(rows.get(n, {}).get("cpu", {}).get("value") == cpu for n, (cpu, _) in loads.items())

    deadline = time.monotonic() + 20
    while not sees():
        assert time.monotonic() < deadline, "loadext never saw the nodes' load"
        time.sleep(0.1)


def scenario(cluster: Cluster, exporter: Exporter, slug: str) -> dict[str, str]:
    """`big` has by far the most free allocatable but runs hot; `warm` and `cool` are equal in
    size, 60 % and 20 % busy."""
    nodes = {"big": f"{slug}-big", "warm": f"{slug}-warm", "cool": f"{slug}-cool"}
    make_node(cluster.core, nodes["big"], slug, cpu="64", memory="256Gi")
    make_node(cluster.core, nodes["warm"], slug)
    make_node(cluster.core, nodes["cool"], slug)
    loads = {nodes["big"]: (0.95, 0.3), nodes["warm"]: (0.6, 0.3), nodes["cool"]: (0.2, 0.3)}
    set_load(exporter, loads)
    wait_loadext_sees(cluster, loads)
    return nodes


@pytest.fixture
def slug(request: pytest.FixtureRequest) -> str:
    """A DNS-safe name unique to the test, for its nodes, pods and case label."""
    name = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower().removeprefix("test_")).strip("-")
    return name[:40].strip("-")


def pod_watch_healthy(metrics: str) -> bool:
    """loadext's pod watch has listed: its health series is 1 (absent while the guard is off)."""
    return metric_if_present(metrics, "loadext_kube_watch_healthy", resource="pods") == 1


class FakeKubelet:
    """Plays the kubelets of `nodes` for the pods bound there (no kubelet runs in the e2e
    cluster): marks each Running and Ready, as a kubelet would once its containers started, and
    calls `started` with it (a test sets the pod's usage). What evictions and the disruption
    controller need: only running, ready pods count towards a PodDisruptionBudget."""

    def __init__(self, core: Any, nodes: set[str], started: Callable[[Any], None]) -> None:
        self.core, self.nodes, self.started = core, nodes, started
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="fake-kubelet")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                pods = self.core.list_namespaced_pod(E2E_NAMESPACE).items
            except Exception:  # the API server may be restarting in another test: try again
                continue
            for pod in pods:
                placed = pod.spec.node_name in self.nodes and not pod.metadata.deletion_timestamp
                if placed and pod.status.phase != "Running":
                    self._start(pod)

    def _start(self, pod: Any) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        conditions = [
            {"type": kind, "status": "True", "lastTransitionTime": now}
            for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ]
        status = {"status": {"phase": "Running", "startTime": now, "conditions": conditions}}
        try:
            self.core.patch_namespaced_pod_status(pod.metadata.name, E2E_NAMESPACE, status)
        except Exception:  # deleted meanwhile: nothing to start
            return
        self.started(pod)
