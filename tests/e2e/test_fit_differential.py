"""The rebalancer's fit (core/rebalance/fit/) against the real kube-scheduler: seeded random worlds of
nodes (labels, taints, cordons, allocatable, extended resources) and pods already bound to them
(labels, requests, host ports, anti-affinity), and probe pods with random constraints (nodeSelector,
required node affinity with every operator, tolerations, requests with sidecars, host ports, required
pod affinity and anti-affinity, DoNotSchedule topology spread with minDomains, inclusion policies and
matchLabelKeys). Each probe asks the real default scheduler about one node of its world alone: a
pinning extender, called after every filter plugin, keeps only that node, so the pod binds there if
and only if the plugins accept it. loadext's verdict, from the same cluster read the rebalancer makes
(actors/placement.py), must be the same for every probe: a disagreement is a bug in the fit.

Worlds are isolated from each other by namespace (every term and selector is the pod's own
namespace's), and share topology keys and values, so domains of other worlds' nodes count as the
scheduler counts them. Probes that bind stay, and the next round meets them as placed pods.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client

from harness.cluster import Cluster
from harness.kubernetes import ready_node_status, wait_until
from loadext.actors import placement
from loadext.actors.wire import ScheduledPod
from loadext.core.rebalance.fit import Judge
from loadext.sources.listwatch import list_all

SEED = 20261207
WORLDS = 20
ROUNDS = 11  # 220 probes
SCHEDULER = "fit-differential"
PIN = "loadext-test/pin"
WORLD_LABEL = "fd.loadext.test/world"
ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
APPS = ("web", "db", "cache")
BARRIERS = "fd-barriers"


class PinningExtender(BaseHTTPRequestHandler):
    """filter: only the node the pod's annotation names."""

    def do_POST(self) -> None:
        args = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        pin = ((args.get("Pod") or {}).get("metadata", {}).get("annotations") or {}).get(PIN, "")
        names = args.get("NodeNames") or []
        reply = {
            "NodeNames": [n for n in names if n == pin],
            "FailedNodes": {n: "pinned to another node" for n in names if n != pin},
            "Error": "",
        }
        body = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture(scope="module")
def pinning_scheduler(cluster: Cluster) -> Iterator[None]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), PinningExtender)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "percentageOfNodesToScore": 100,  # every node reaches the extender, however many the suite made
        "profiles": [{"schedulerName": SCHEDULER}],
        "extenders": [
            {
                "urlPrefix": f"http://127.0.0.1:{server.server_address[1]}",
                "filterVerb": "filter",
                "nodeCacheCapable": True,
                "ignorable": False,
                "httpTimeout": "5s",
            }
        ],
    }
    kubeconfig = cluster.plane.service_account_kubeconfig("loadext", "loadext-scheduler")
    process = cluster.plane.start_scheduler(SCHEDULER, config, kubeconfig)
    yield
    process.stop()
    cluster.plane.processes.remove(process)
    server.shutdown()


# --- generation ----------------------------------------------------------------------------------


def world_nodes(rng: random.Random, world: int) -> list[dict[str, Any]]:
    nodes = []
    for i in range(3):
        name = f"fd{world}-{i}"
        labels = {HOSTNAME: name, WORLD_LABEL: str(world), ZONE: rng.choice("abc")}
        labels["fd.loadext.test/tier"] = rng.choice(["1", "5", "10", "x"])
        if rng.random() < 0.6:
            labels["fd.loadext.test/disk"] = rng.choice(["ssd", "hdd"])
        taints = rng.sample(
            [
                {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
                {"key": "maintenance", "effect": "NoExecute"},
                {"key": "soft", "value": "x", "effect": "PreferNoSchedule"},
            ],
            k=rng.choice([0, 0, 0, 1]),
        )
        allocatable = {
            "cpu": rng.choice(["4", "8", "1500m"]),
            "memory": rng.choice(["4Gi", "8Gi"]),
            "pods": rng.choice(["4", "110", "110"]),
            "ephemeral-storage": "10Gi",
        }
        if rng.random() < 0.4:
            allocatable["example.com/gpu"] = rng.choice(["1", "2"])
        nodes.append(
            {
                "name": name,
                "labels": labels,
                "taints": taints,
                "unschedulable": rng.random() < 0.15,
                "alloc": allocatable,
            }
        )
    return nodes


def selector(rng: random.Random, app: str) -> dict[str, Any]:
    roll = rng.random()
    if roll < 0.5:
        return {"matchLabels": {"app": app}}
    if roll < 0.8:
        return {"matchExpressions": [{"key": "app", "operator": rng.choice(["In", "NotIn"]), "values": [app]}]}
    return {"matchExpressions": [{"key": "tier", "operator": rng.choice(["Exists", "DoesNotExist"])}]}


def affinity_term(rng: random.Random, world: int) -> dict[str, Any]:
    term: dict[str, Any] = {
        "labelSelector": selector(rng, rng.choice(APPS)),
        "topologyKey": rng.choice([ZONE, HOSTNAME]),
    }
    roll = rng.random()
    if roll < 0.2:
        term["namespaces"] = [f"fd-{world}"]
    elif roll < 0.35:
        term["namespaceSelector"] = {"matchLabels": {WORLD_LABEL: str(world)}}
    return term


def node_term(rng: random.Random, nodes: list[dict[str, Any]]) -> dict[str, Any]:
    pool = [
        {"key": ZONE, "operator": "In", "values": rng.sample("abc", k=rng.choice([1, 2]))},
        {"key": ZONE, "operator": "NotIn", "values": [rng.choice("abc")]},
        {"key": "fd.loadext.test/disk", "operator": rng.choice(["Exists", "DoesNotExist"])},
        {"key": "fd.loadext.test/tier", "operator": rng.choice(["Gt", "Lt"]), "values": [rng.choice(["2", "7"])]},
    ]
    term: dict[str, Any] = {"matchExpressions": rng.sample(pool, k=rng.choice([1, 1, 2]))}
    if rng.random() < 0.2:
        term["matchFields"] = [
            {"key": "metadata.name", "operator": rng.choice(["In", "NotIn"]), "values": [rng.choice(nodes)["name"]]}
        ]
    return term


def container(rng: random.Random, name: str, ports: bool) -> dict[str, Any]:
    requests = {"cpu": rng.choice(["100m", "250m", "500m", "1500m"]), "memory": rng.choice(["256Mi", "512Mi", "3Gi"])}
    if rng.random() < 0.15:
        requests["ephemeral-storage"] = rng.choice(["1Gi", "6Gi"])
    if rng.random() < 0.1:
        requests["example.com/gpu"] = "1"
    resources: dict[str, Any] = {"requests": requests}
    if "example.com/gpu" in requests:
        resources["limits"] = {"example.com/gpu": "1"}  # extended resources need equal limits
    spec: dict[str, Any] = {"name": name, "image": "registry.k8s.io/pause:3.10", "resources": resources}
    if ports and rng.random() < 0.3:
        port = rng.choice([(8080, "TCP", ""), (8080, "UDP", ""), (9090, "TCP", "127.0.0.5"), (9090, "TCP", "")])
        spec["ports"] = [{"containerPort": port[0], "hostPort": port[0], "protocol": port[1]}]
        if port[2]:
            spec["ports"][0]["hostIP"] = port[2]
    return spec


def pod_spec(rng: random.Random, world: int, nodes: list[dict[str, Any]], probe: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 0,
        "containers": [container(rng, "app", ports=True)],
        "tolerations": rng.sample(
            [
                {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
                {"key": "dedicated", "operator": "Exists"},
                {"key": "maintenance", "operator": "Exists", "effect": "NoExecute"},
                {"operator": "Exists", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "dedicated", "operator": "Equal", "value": "cpu"},
            ],
            k=rng.choice([0, 0, 1, 2]),
        ),
    }
    anti = [affinity_term(rng, world) for _ in range(rng.choice([0, 0, 0, 1]))]
    if not probe:
        if anti:
            spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": anti}}
        return spec
    if rng.random() < 0.3:
        spec["initContainers"] = [container(rng, "init", ports=False)]
        if rng.random() < 0.5:
            spec["initContainers"][0]["restartPolicy"] = "Always"  # a sidecar
    if rng.random() < 0.1:
        spec["nodeSelector"] = {"fd.loadext.test/disk": rng.choice(["ssd", "hdd"])}
    affinity: dict[str, Any] = {}
    if rng.random() < 0.25:
        terms = [node_term(rng, nodes) for _ in range(rng.choice([1, 1, 2]))]
        affinity["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
    if rng.random() < 0.25:
        terms = [affinity_term(rng, world) for _ in range(rng.choice([1, 1, 2]))]
        affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": terms}
    if anti:
        affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": anti}
    if affinity:
        spec["affinity"] = affinity
    spread = []
    for key in rng.sample([ZONE, HOSTNAME, "fd.loadext.test/disk"], k=rng.choice([0, 0, 1, 1, 2])):  # one per key
        constraint: dict[str, Any] = {
            "maxSkew": rng.choice([1, 1, 2]),
            "topologyKey": key,
            "whenUnsatisfiable": rng.choice(["DoNotSchedule", "DoNotSchedule", "ScheduleAnyway"]),
            "labelSelector": selector(rng, rng.choice(APPS)),
        }
        if rng.random() < 0.3:
            constraint["minDomains"] = rng.choice([2, 3, 4])
            constraint["whenUnsatisfiable"] = "DoNotSchedule"  # minDomains requires it
        if rng.random() < 0.3:
            constraint["nodeAffinityPolicy"] = rng.choice(["Honor", "Ignore"])
        if rng.random() < 0.3:
            constraint["nodeTaintsPolicy"] = rng.choice(["Honor", "Ignore"])
        if rng.random() < 0.2 and "tier" not in json.dumps(constraint["labelSelector"]):
            constraint["matchLabelKeys"] = ["tier"]  # the API refuses a key in both
        spread.append(constraint)
    if spread:
        spec["topologySpreadConstraints"] = spread
    return spec


def pod_labels(rng: random.Random) -> dict[str, str]:
    labels = {"app": rng.choice(APPS)}
    if rng.random() < 0.5:
        labels["tier"] = rng.choice(["front", "back"])
    return labels


# --- the run ------------------------------------------------------------------------------------


@dataclass
class Probe:
    namespace: str
    name: str
    node: str
    loadext: str | None = None  # None: fits
    scheduler: str | None = None  # None: bound there
    decided: bool = False  # the scheduler has bound it or found it unschedulable


def make_world(core: Any, rng: random.Random, world: int) -> list[dict[str, Any]]:
    namespace = f"fd-{world}"
    core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace, labels={WORLD_LABEL: str(world)}))
    )
    nodes = world_nodes(rng, world)
    for node in nodes:
        core.create_node({"metadata": {"name": node["name"], "labels": node["labels"]}})
        core.patch_node(
            node["name"], {"spec": {"taints": node["taints"] or None, "unschedulable": node["unschedulable"]}}
        )
        status = ready_node_status(node["name"], node["alloc"]["cpu"], node["alloc"]["memory"])
        status["capacity"] = status["allocatable"] = node["alloc"]
        core.patch_node_status(node["name"], {"status": status})
    for i in range(rng.choice([0, 1, 2, 3, 4])):
        spec = pod_spec(rng, world, nodes, probe=False)
        spec["nodeName"] = rng.choice(nodes)["name"]
        metadata = {"name": f"placed-{i}", "labels": pod_labels(rng)}
        core.create_namespaced_pod(namespace, {"metadata": metadata, "spec": spec})
    return nodes


def barrier(core: Any, tag: str) -> None:
    """A node and then a pod that only it takes, both made last: once the scheduler binds the
    pod, its node and pod informers have delivered everything made before (each watch is
    ordered), so every probe after this is judged on the same cluster loadext lists."""
    name = f"fd-barrier-{tag}"
    core.create_node({"metadata": {"name": name, "labels": {HOSTNAME: name}}})
    core.patch_node(name, {"spec": {"taints": None}})  # the not-ready taint admission put on it
    core.patch_node_status(name, {"status": ready_node_status(name, "1", "1Gi")})
    spec = {
        "schedulerName": SCHEDULER,
        "nodeSelector": {HOSTNAME: name},
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
    }
    core.create_namespaced_pod(BARRIERS, {"metadata": {"name": name, "annotations": {PIN: name}}, "spec": spec})
    wait_until(lambda: bool(core.read_namespaced_pod(name, BARRIERS).spec.node_name), f"the {tag} barrier pod bound")


def settle(core: Any, probe: Probe) -> None:
    """Read the scheduler's verdict on `probe`, once it has one."""
    pod = core.read_namespaced_pod(probe.name, probe.namespace)
    if pod.spec.node_name:
        probe.scheduler = None if pod.spec.node_name == probe.node else f"bound to {pod.spec.node_name}"
        probe.decided = True
    for condition in pod.status.conditions or ():
        if condition.type == "PodScheduled" and condition.status == "False" and condition.reason == "Unschedulable":
            probe.scheduler, probe.decided = condition.message or "unschedulable", True


def test_the_fit_agrees_with_the_real_scheduler(cluster: Cluster, pinning_scheduler: None) -> None:
    core, rng = cluster.core, random.Random(SEED)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=BARRIERS)))
    worlds = [make_world(core, rng, world) for world in range(WORLDS)]
    barrier(core, "worlds")
    probes: list[Probe] = []
    for round_ in range(ROUNDS):
        seen = placement.read(core)  # what the scheduler's cache holds now: nothing changes until the probes
        batch = []
        for world, nodes in enumerate(worlds):
            namespace, node = f"fd-{world}", rng.choice(nodes)["name"]
            metadata = {"name": f"probe-{round_}", "labels": pod_labels(rng), "annotations": {PIN: node}}
            spec = {"schedulerName": SCHEDULER, **pod_spec(rng, world, nodes, probe=True)}
            core.create_namespaced_pod(namespace, {"metadata": metadata, "spec": spec})
            batch.append(Probe(namespace, f"probe-{round_}", node))
        for probe in batch:  # the probes as the API server stored them (defaults and admission applied)
            stored = list_all(
                core.list_namespaced_pod,
                ScheduledPod,
                namespace=probe.namespace,
                field_selector=f"metadata.name={probe.name}",
            )
            probe.loadext = Judge(placement.pod_facts(stored[0]).constraints, seen.world).refusal(probe.node)
        deadline = time.monotonic() + 90
        while undecided := [p for p in batch if not p.decided]:
            assert time.monotonic() < deadline, f"{len(undecided)} probes neither bound nor unschedulable in 90 s"
            for probe in undecided:
                settle(core, probe)
            time.sleep(0.2)
        for probe in batch:
            if probe.scheduler is not None:  # not bound: gone before the next round, as the scheduler sees it
                core.delete_namespaced_pod(probe.name, probe.namespace, grace_period_seconds=0)
        probes += batch
        barrier(core, f"round-{round_}")
    disagreements = [p for p in probes if (p.loadext is None) != (p.scheduler is None)]
    accepted = sum(p.scheduler is None for p in probes)
    reasons = Counter((p.loadext or "fits").split(":")[0] for p in probes)
    print("fit differential verdicts:", dict(reasons.most_common()))
    print(
        f"fit differential: {len(probes)} probes, {accepted} accepted by the scheduler, {len(disagreements)} disagree"
    )
    assert 0.2 < accepted / len(probes) < 0.8, "the generator should make both verdicts common"
    assert len(reasons) >= 12, "the generator should reach most filters"
    assert not disagreements, "\n".join(
        f"{p.namespace}/{p.name} on {p.node}: loadext {p.loadext or 'fits'}; scheduler {p.scheduler or 'bound'}"
        for p in disagreements
    )
