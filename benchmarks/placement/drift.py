"""Closed-loop drift benchmark: load rises after placement; the default scheduler, the default
scheduler with the descheduler, loadext, and loadext with its rebalancer, side by side on one real
control plane, each arm on nodes of its own.

    python3 benchmarks/placement/drift.py [--scenario strong|mild|constrained] [--seeds 1 2 3]
                                          [--nodes 12] [--observe 300] [--out DIR]

The same setup as run.py (real kube-apiserver and kube-scheduler from their Go modules; kwok plays
the kubelets and serves /metrics/resource from the pods' usage annotations, which a real
Prometheus scrapes), plus the real kube-controller-manager: its ReplicaSet controller recreates
evicted pods, its disruption controller keeps each workload's PodDisruptionBudget current. Each
arm has its own scheduler (and the loadext arms a loadext of their own, reading only their nodes'
load), so one seed costs one observation window for all four:

1. six ReplicaSets are placed while every pod uses 0.4 cores (the cluster is cool), created in
   an order the seed shuffles (with kube-scheduler's random tie-breaks, what varies by seed);
2. then the scenario's first `drifting` workloads drift: their pods (and their template, so replacements
   do too) use `hot cores` each, and the nodes that hold them run hot where their other load is
   high;
3. for `--observe` seconds each arm does what it does: nothing (default scheduler, loadext), its
   descheduler (v0.36.0, from its Go module: LowNodeUtilization on its Prometheus source, fed the
   node CPU ratio loadext reads), or loadext's rebalancer (`rebalance: {mode: evict}`).

Scenarios: strong (2 workloads of 5 pods drift to 5 cores a pod), mild (2 of 6 to 4 cores), and
constrained: of the drifting workloads `web` requires zone a (node affinity), `api` tolerates a
tainted pool that the others do not, `cart` has a PodDisruptionBudget that allows no disruption;
one cool node of zone a is cordoned before the drift.

Reported per arm and scenario, as the median and range over the seeds: node-minutes over the
threshold after the drift, max node CPU, evictions, the fewest moves that would bring every node
under the threshold (offline, from the pods' usage at the drift), pods that landed back on a node
over the threshold (ping-pong), replacements Pending for more than 60 s, PDB violations (samples
with more of a workload unavailable than its budget allows), pods evicted twice, nodes made hot
by a move (a replacement's node going over the threshold within hotFor + the herd window of its
landing), and for loadext's rebalancer how often the replacement landed on the planned target and
how many planned targets the scheduler would refuse; and a plot per scenario (the first seed).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from run import (  # noqa: E402
    CORES,
    KWOK_CONFIG,
    NAMESPACE,
    RATE_WINDOW,
    THRESHOLD,
    USAGE_CPU,
    Truth,
    build_kwok,
    cores_of,
    kubelet_scrape_config,
    list_pods,
    make_nodes,
    millicores,
)

from harness.kubernetes import ControlPlane, Process, build_components, wait_until  # noqa: E402
from harness.loadext import ready, serve_argv  # noqa: E402
from harness.prometheus import PrometheusServer, free_port  # noqa: E402

DESCHEDULER = ("sigs.k8s.io/descheduler", "descheduler", "./cmd/descheduler", "v0.36.0")
WORKLOADS = ("web", "api", "cart", "search", "feed", "mail")
COOL_CORES = 0.4
HOT_FOR, CYCLE = 3, 5  # loadext's rebalancer: refreshes at or above evictAt, seconds between cycles
OVER_FOR = 30  # refreshes over the threshold to be hot too: 30 s at 1 s refreshes (the default 40 refreshes
# are 10 minutes at the default 15 s, longer than the whole observation window)
EVICT_AT = THRESHOLD + 0.05  # loadext's default evictAt
WINDOW = RATE_WINDOW + 5  # the herd window: a new pod's usage fills the node signal's rate() by then
PENDING_TOO_LONG = 60.0
ZONE, POOL = "topology.kubernetes.io/zone", "bench/pool"
CORDONED, POOL_NODES = 1, (6, 7)  # node indexes in the constrained scenario (nodes 0-5 are zone a)
Move = tuple[float, str, str]  # (when, pod, planned target) of a rebalancer's eviction


@dataclass(frozen=True)
class Scenario:
    drifting: int
    replicas: int
    hot_cores: float
    constrained: bool = False


SCENARIOS = {
    "strong": Scenario(drifting=2, replicas=5, hot_cores=5.0),
    "mild": Scenario(drifting=2, replicas=6, hot_cores=4.0),
    "constrained": Scenario(drifting=3, replicas=5, hot_cores=4.0, constrained=True),
}


@dataclass(frozen=True)
class Arm:
    label: str
    prefix: str
    loadext: bool = False
    rebalance: bool = False
    descheduler: bool = False

    @property
    def scheduler(self) -> str:
        return f"{self.prefix}-scheduler" if self.loadext else "default-profile"


ARMS = (
    Arm("default scheduler", "dflt"),
    Arm("default + descheduler", "desc", descheduler=True),
    Arm("loadext", "lext", loadext=True),
    Arm("loadext + rebalance", "rbal", loadext=True, rebalance=True),
)


# --- the workloads ----------------------------------------------------------------------------


def replica_set(arm: Arm, workload: str, scenario: Scenario, cores: float) -> dict[str, Any]:
    labels = {"app": f"{arm.prefix}-{workload}"}
    spec: dict[str, Any] = {
        "schedulerName": arm.scheduler,
        "nodeSelector": {"bench/run": arm.prefix},
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "app",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"cpu": "4", "memory": "1Gi"}},
            }
        ],
    }
    if scenario.constrained and workload == "web":
        term = {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["a"]}]}
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        }
    if scenario.constrained and workload == "api":
        spec["tolerations"] = [{"key": POOL, "operator": "Equal", "value": "batch", "effect": "NoSchedule"}]
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": f"{arm.prefix}-{workload}", "namespace": NAMESPACE},
        "spec": {
            "replicas": scenario.replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels, "annotations": {USAGE_CPU: millicores(cores)}}, "spec": spec},
        },
    }


def allowed_unavailable(scenario: Scenario, workload: str) -> int:
    return 0 if scenario.constrained and workload == "cart" else 1


def budget(arm: Arm, workload: str, scenario: Scenario) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": f"{arm.prefix}-{workload}", "namespace": NAMESPACE},
        "spec": {
            "maxUnavailable": allowed_unavailable(scenario, workload),
            "selector": {"matchLabels": {"app": f"{arm.prefix}-{workload}"}},
        },
    }


def constrain_nodes(core: Any, names: list[str]) -> None:
    """Zones a (first half) and b; a tainted pool in zone b that only `api` tolerates."""
    for i, name in enumerate(names):
        labels = {ZONE: "a" if i < len(names) // 2 else "b"}
        patch: dict[str, Any] = {"metadata": {"labels": labels}}
        if i in POOL_NODES:
            patch["metadata"]["labels"][POOL] = "batch"
            patch["spec"] = {"taints": [{"key": POOL, "value": "batch", "effect": "NoSchedule"}]}
        core.patch_node(name, patch)


def refused_target(scenario: Scenario, workload: str, target: str) -> bool:
    """Whether the scheduler would refuse a move of `workload` to `target` (the constrained
    scenario's own rules; nothing else refuses in the others)."""
    if not scenario.constrained:
        return False
    index = int(target.rsplit("-", 1)[1])
    if index == CORDONED:
        return True
    if index in POOL_NODES and workload != "api":
        return True
    return workload == "web" and index >= 6


# --- watching ---------------------------------------------------------------------------------


@dataclass
class Seen:
    app: str
    born: float
    node: str = ""
    bound: float = 0.0  # when first seen bound
    gone: float = 0.0


@dataclass
class Watch:
    """Samples every pod twice a second: when each was first seen, bound and gone, and per
    workload the samples with more pods unavailable than its budget allows."""

    api: Any
    replicas: int
    allowed: dict[str, int]  # app -> the budget's maxUnavailable
    pods: dict[str, Seen] = field(default_factory=dict)
    violations: dict[str, int] = field(default_factory=dict)  # arm prefix -> samples

    def __post_init__(self) -> None:
        self.sample()  # the pods there are now were born before whatever comes next
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.sample()

    def sample(self) -> None:
        now = time.time()
        current = set()
        available: dict[str, int] = {}
        for pod in list_pods(self.api):
            name, app = pod["metadata"]["name"], pod["metadata"].get("labels", {}).get("app", "")
            if not app or pod["metadata"].get("deletionTimestamp"):
                continue
            current.add(name)
            seen = self.pods.setdefault(name, Seen(app, now))
            node = pod["spec"].get("nodeName", "")
            if node and not seen.node:
                seen.node, seen.bound = node, now
            if pod.get("status", {}).get("phase") == "Running":
                available[app] = available.get(app, 0) + 1
        for name, seen in self.pods.items():
            if name not in current and not seen.gone:
                seen.gone = now
        for app, allowed in self.allowed.items():
            if self.replicas - available.get(app, 0) > allowed:
                prefix = app.split("-", 1)[0]
                self.violations[prefix] = self.violations.get(prefix, 0) + 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def fewest_moves(api: Any, nodes: list[str]) -> int:
    """The fewest pods that, moved off, bring every node under the threshold: per node, its
    largest pods first (for one resource, no smaller set can do it)."""
    by_node: dict[str, list[float]] = {n: [] for n in nodes}
    for pod in list_pods(api):
        node = pod["spec"].get("nodeName")
        if node in by_node and pod.get("status", {}).get("phase") == "Running":
            by_node[node].append(cores_of(pod))
    moves = 0
    for usages in by_node.values():
        excess = sum(usages) - THRESHOLD * CORES
        movable = sorted(usages, reverse=True)
        while excess > 0 and movable:
            excess -= movable.pop(0)
            moves += 1
    return moves


def evicted_to(port: int) -> list[Move]:
    """(when, pod, planned target) of each eviction in loadext's last moves (/explain)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/explain", timeout=5) as reply:
        report = json.loads(reply.read())
    moves = report.get("rebalance", {}).get("last", [])
    return [(m["time"], m["pod"].split("/", 1)[1], m["target"]) for m in moves if m["result"] == "evicted"]


def value_at(series: list[tuple[float, float]], when: float) -> float:
    """A node's CPU (truth) at `when`: the last sample at or before it."""
    before = [v for t, v in series if t <= when]
    return before[-1] if before else 0.0


@dataclass
class Recorded:
    """What one seed's run saw, kept in its workdir (raw.json), so that it can be measured again
    (`--measure DIR`) without running again."""

    scenario: str
    drift: float
    end: float
    truth: dict[str, list[tuple[float, float]]]  # node -> (time, CPU ratio as kwok serves it)
    pods: dict[str, Seen]
    violations: dict[str, int]  # arm prefix -> samples over a budget
    moves: dict[str, list[Move]]  # arm prefix -> its rebalancer's evictions
    fewest: dict[str, int]  # arm prefix -> fewest moves that would do, at the drift
    pdb_refused: int = 0  # evictions the descheduler tried that a PodDisruptionBudget refused

    def save(self, workdir: Path) -> None:
        record = {**vars(self), "pods": {name: vars(seen) for name, seen in self.pods.items()}}
        (workdir / "raw.json").write_text(json.dumps(record))

    @classmethod
    def load(cls, workdir: Path) -> Recorded:
        record = json.loads((workdir / "raw.json").read_text())
        if "scenario" not in record:  # recorded before these two were: the workdir's name and log say
            record["scenario"] = workdir.name.split("-")[2]
            log = (workdir / "descheduler-desc.log").read_text(errors="replace")
            record["pdb_refused"] = len(re.findall(r'"Error evicting pod".*disruption budget', log))
        record["pods"] = {name: Seen(**seen) for name, seen in record["pods"].items()}
        record["moves"] = {prefix: [tuple(m) for m in moves] for prefix, moves in record["moves"].items()}
        return cls(**record)


def measure(arm: Arm, scenario: Scenario, run: Recorded) -> dict[str, Any]:
    drift, end = run.drift, run.end
    series = {n: s for n, s in run.truth.items() if n.startswith(f"{arm.prefix}-")}

    def minutes_over(level: float) -> float:
        over = 0.0
        for samples in series.values():
            for (t0, value), (t1, _) in pairwise(samples):
                if drift <= t0 < end and value > level:
                    over += t1 - t0
        return over / 60

    mine = {name: seen for name, seen in run.pods.items() if seen.app.startswith(f"{arm.prefix}-")}
    evicted = [name for name, seen in mine.items() if drift <= seen.gone <= end]
    replacements = {name: seen for name, seen in mine.items() if seen.born > drift}
    ping_pong = pending = 0
    hot_nodes = set()
    for seen in replacements.values():
        waited = (seen.bound or end) - seen.born
        pending += waited > PENDING_TOO_LONG
        if not seen.node:
            continue
        landed = series.get(seen.node, [])
        if value_at(landed, seen.bound) > THRESHOLD:
            ping_pong += 1
        elif any(v > THRESHOLD for t, v in landed if seen.bound < t <= seen.bound + HOT_FOR + WINDOW):
            hot_nodes.add(seen.node)
    result: dict[str, Any] = {
        "node-minutes over 80% after the drift": minutes_over(THRESHOLD),
        "node-minutes over 85% (evictAt)": minutes_over(EVICT_AT),
        "max node CPU after the drift": max((v for s in series.values() for t, v in s if drift <= t < end), default=0),
        "evictions": len(evicted),
        "fewest moves needed": run.fewest[arm.prefix],
        "pods evicted twice": sum(1 for name in evicted if mine[name].born > drift),
        "landed back on a hot node (ping-pong)": ping_pong,
        f"replacements Pending > {PENDING_TOO_LONG:.0f} s": pending,
        "PDB violations (samples)": run.violations.get(arm.prefix, 0),
        "nodes made hot by a move": len(hot_nodes),
    }
    if arm.descheduler:
        result["evictions a PDB refused"] = run.pdb_refused
    if arm.rebalance:
        claimed: set[str] = set()
        on_target = refused = 0
        moves = sorted(run.moves.get(arm.prefix, ()))
        for when, pod, target in moves:
            app = mine[pod].app if pod in mine else pod.rsplit("-", 1)[0]
            refused += refused_target(scenario, app.split("-", 1)[1], target)
            later = sorted((s.born, n) for n, s in replacements.items() if s.app == app and s.born >= when - 1)
            replacement = next((n for _, n in later if n not in claimed), None)
            if replacement is not None:
                claimed.add(replacement)
                on_target += replacements[replacement].node == target
        result["replacement on the planned target"] = f"{on_target}/{len(moves)}"
        result["moves to a node the scheduler refuses"] = refused
    return result


# --- the arms' components ---------------------------------------------------------------------


def loadext_config(arm: Arm, prom_url: str) -> dict[str, Any]:
    """The arm's loadext reads only its own nodes' load, so its rebalancer moves only its pods."""
    cpu = f'rate(node_cpu_usage_seconds_total{{node=~"{arm.prefix}-.*"}}[{RATE_WINDOW}s]) / {CORES}'
    return {
        "prometheus": {"url": prom_url, "timeout": "1s"},
        "refreshInterval": "1s",
        "maxDataAge": "30s",
        "signals": [
            {"name": "cpu", "query": cpu, "threshold": THRESHOLD, "weight": 1},
            {"name": "memory", "query": "node_memory_working_set_bytes / (64 * 2^30)", "threshold": 0.9, "weight": 0},
        ],
        "herdGuard": {"enabled": True, "window": f"{WINDOW}s"},
        "rebalance": {
            "enabled": arm.rebalance,
            "mode": "evict",
            "hotFor": HOT_FOR,
            "coolFor": 3,
            "overFor": OVER_FOR,
            "cycle": f"{CYCLE}s",
            "minPodAge": "10s",
            "maxPerCycle": 5,
        },
    }


def start_loadext(plane: ControlPlane, arm: Arm, prom_url: str, workdir: Path, shipped: dict[str, Any]) -> int:
    config = workdir / f"loadext-{arm.prefix}.yaml"
    config.write_text(yaml.safe_dump(loadext_config(arm, prom_url)))
    port = free_port()
    argv = serve_argv(config, port, "--kubeconfig", str(plane.admin_kubeconfig), "--watch-nodes")
    process = plane.spawn(f"loadext-{arm.prefix}", argv)
    wait_until(lambda: ready(f"http://127.0.0.1:{port}"), f"loadext for {arm.label}", process=process)
    scheduler = json.loads(json.dumps(shipped))
    scheduler["profiles"][0]["schedulerName"] = arm.scheduler
    scheduler["extenders"][0]["urlPrefix"] = f"http://127.0.0.1:{port}"
    plane.start_scheduler(arm.scheduler, scheduler, plane.admin_kubeconfig)
    return port


def descheduler_policy(arm: Arm, prom_url: str) -> dict[str, Any]:
    """LowNodeUtilization on its Prometheus source, fed loadext's node CPU signal (clamped to
    [0, 1] as loadext clamps it; `instance` is the node's name, as it wants). The mapping to
    loadext's thresholds: overutilized above 85 % (loadext's evictAt), underutilized below 80 %
    (loadext's filter threshold, the most a node may be to receive). Everything else is its
    default (DefaultEvictor; nodeFit off)."""
    ratio = f'rate(node_cpu_usage_seconds_total{{node=~"{arm.prefix}-.*"}}[{RATE_WINDOW}s]) / {CORES}'
    query = f'label_replace(clamp_max({ratio}, 1), "instance", "$1", "node", "(.*)")'
    return {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerPolicy",
        "nodeSelector": f"bench/run={arm.prefix}",
        "metricsProviders": [{"source": "Prometheus", "prometheus": {"url": prom_url}}],
        "profiles": [
            {
                "name": "load",
                "pluginConfig": [
                    {"name": "DefaultEvictor", "args": {}},
                    {
                        "name": "LowNodeUtilization",
                        "args": {
                            "thresholds": {"MetricResource": round(THRESHOLD * 100)},
                            "targetThresholds": {"MetricResource": round(EVICT_AT * 100)},
                            "metricsUtilization": {"source": "Prometheus", "prometheus": {"query": query}},
                        },
                    },
                ],
                "plugins": {"balance": {"enabled": ["LowNodeUtilization"]}},
            }
        ],
    }


def start_descheduler(plane: ControlPlane, arm: Arm, prom_url: str, workdir: Path) -> Process:
    """The descheduler looping every loadext cycle. Its Prometheus client is built only from an
    in-cluster service account (a token and the cluster CA at the pod's usual paths), which a
    process outside a pod lacks: it runs in a mount namespace of its own whose /run holds them
    (Prometheus here needs no token; the CA is the control plane's)."""
    binary = subprocess.run(
        ["bash", str(ROOT / "scripts/build-go-tool.sh"), "--module", DESCHEDULER[0], *DESCHEDULER[1:], "about 3 min"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    policy = workdir / "descheduler-policy.yaml"
    policy.write_text(yaml.safe_dump(descheduler_policy(arm, prom_url)))
    account = workdir / "serviceaccount"
    account.mkdir(exist_ok=True)
    shutil.copy(plane.ca, account / "ca.crt")
    (account / "token").write_text("benchmark")
    setup = (
        "mount -t tmpfs none /run && mkdir -p /run/secrets/kubernetes.io && "
        f'cp -r {account} /run/secrets/kubernetes.io/serviceaccount && exec "$@"'
    )
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    argv = [
        "unshare", *user, "--mount", "--propagation", "private", "env", "KUBERNETES_SERVICE_HOST=127.0.0.1",
        "KUBERNETES_SERVICE_PORT=443", "sh", "-c", setup, "descheduler", binary,
        f"--kubeconfig={plane.admin_kubeconfig}", f"--policy-config-file={policy}",
        f"--descheduling-interval={CYCLE}s", "--bind-address=127.0.0.1", f"--secure-port={free_port()}", "--v=3",
    ]  # fmt: skip
    return plane.spawn(f"descheduler-{arm.prefix}", argv)


# --- one seed ---------------------------------------------------------------------------------


def run_seed(scenario_name: str, seed: int, nodes: int, observe: float, workdir: Path) -> Recorded:
    scenario = SCENARIOS[scenario_name]
    rng = random.Random(seed)
    hot = WORKLOADS[: scenario.drifting]  # constrained: web, api and cart, each with its constraint
    kwok, kwok_stages = build_kwok()
    plane = ControlPlane(workdir, build_components())
    names = {arm.prefix: [f"{arm.prefix}-{i:02d}" for i in range(nodes)] for arm in ARMS}
    everything = [n for arm in ARMS for n in names[arm.prefix]]
    kwok_address = f"127.0.0.1:{free_port()}"
    prom = PrometheusServer(str(workdir), kubelet_scrape_config(kwok_address, everything))
    try:
        plane.start()
        api = plane.api()
        core, apps, policy = client.CoreV1Api(api), client.AppsV1Api(api), client.PolicyV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
        (workdir / "kwok.yaml").write_text(kwok_stages + "\n---\n" + KWOK_CONFIG)
        kwok_process = plane.spawn(
            "kwok",
            [str(kwok), f"--kubeconfig={plane.admin_kubeconfig}", f"--config={workdir / 'kwok.yaml'}",
             "--manage-all-nodes=true", f"--server-address={kwok_address}", "--node-ip=127.0.0.1",
             "--cidr=127.8.0.0/16"],
        )  # fmt: skip
        wait_until(
            lambda: urllib.request.urlopen(f"http://{kwok_address}/healthz", timeout=1).status == 200,
            "kwok /healthz",
            process=kwok_process,
        )
        plane.start_controller_manager("replicaset", "disruption")
        shipped = yaml.safe_load(
            next(
                d
                for d in yaml.safe_load_all(plane.kubectl("kustomize", str(ROOT / "manifests" / "base")).stdout)
                if d and d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("loadext-scheduler-config")
            )["data"]["scheduler-config.yaml"]
        )
        default_profile: dict[str, Any] = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
        }
        plane.start_scheduler(
            "default-profile",
            {**default_profile, "profiles": [{"schedulerName": "default-profile"}]},
            plane.admin_kubeconfig,
        )
        ports = {arm.prefix: start_loadext(plane, arm, prom.url, workdir, shipped) for arm in ARMS if arm.loadext}
        for arm in ARMS:
            make_nodes(core, arm.prefix, nodes)
            if scenario.constrained:
                constrain_nodes(core, names[arm.prefix])
        prom.wait_for(
            "count(rate(node_cpu_usage_seconds_total[20s]) > 0)",
            lambda r: bool(r) and float(r[0]["value"][1]) == len(everything),
            timeout=60,
        )
        order = list(WORKLOADS)
        rng.shuffle(order)
        for workload in order:
            for arm in ARMS:
                policy.create_namespaced_pod_disruption_budget(NAMESPACE, budget(arm, workload, scenario))
                apps.create_namespaced_replica_set(NAMESPACE, replica_set(arm, workload, scenario, COOL_CORES))
        wanted = len(WORKLOADS) * scenario.replicas * len(ARMS)
        wait_until(
            lambda: sum(
                1 for p in list_pods(api)
                if p.get("status", {}).get("phase") == "Running" and p["metadata"].get("labels", {}).get("app")
            ) == wanted,
            "every pod placed and running",
            timeout=180,
        )  # fmt: skip
        if scenario.constrained:
            for arm in ARMS:  # a cool node of zone a, tempting for web, is cordoned
                core.patch_node(names[arm.prefix][CORDONED], {"spec": {"unschedulable": True}})
        truth = Truth(api, everything).start()
        time.sleep(RATE_WINDOW + 3)  # the placed pods' usage fills the rate() window
        allowed = {f"{arm.prefix}-{w}": allowed_unavailable(scenario, w) for arm in ARMS for w in WORKLOADS}
        watch = Watch(api, scenario.replicas, allowed)
        deschedulers = [start_descheduler(plane, arm, prom.url, workdir) for arm in ARMS if arm.descheduler]
        drift = time.time()
        usage = millicores(scenario.hot_cores)
        for arm in ARMS:
            for workload in hot:
                name = f"{arm.prefix}-{workload}"
                patch = {"spec": {"template": {"metadata": {"annotations": {USAGE_CPU: usage}}}}}
                apps.patch_namespaced_replica_set(name, NAMESPACE, patch)
                for pod in list_pods(api):
                    if pod["metadata"].get("labels", {}).get("app") == name:
                        core.patch_namespaced_pod(
                            pod["metadata"]["name"], NAMESPACE, {"metadata": {"annotations": {USAGE_CPU: usage}}}
                        )
        time.sleep(2)
        least = {arm.prefix: fewest_moves(api, names[arm.prefix]) for arm in ARMS}
        moves: dict[str, set[Move]] = {arm.prefix: set() for arm in ARMS if arm.rebalance}
        end = drift + 2 + observe
        while time.time() < end:  # /explain keeps the last 50 steps: read them as they come
            time.sleep(min(10.0, max(end - time.time(), 0.0)))
            for prefix in moves:
                moves[prefix] |= set(evicted_to(ports[prefix]))
        watch.stop()
        truth.stop()
        for process in deschedulers:
            process.stop()
        log = workdir / "descheduler-desc.log"
        refused = len(re.findall(r'"Error evicting pod".*disruption budget', log.read_text(errors="replace")))
        run = Recorded(
            scenario_name,
            drift,
            end,
            truth.series,
            watch.pods,
            watch.violations,
            {prefix: sorted(found) for prefix, found in moves.items()},
            least,
            refused,
        )
        run.save(workdir)
        print(f"seed {seed}: recorded in {workdir}", file=sys.stderr)
        return run
    finally:
        plane.stop()
        prom.stop()


# --- reporting --------------------------------------------------------------------------------


def plot(run: Recorded, results: dict[str, Any], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(ARMS), figsize=(5 * len(ARMS), 4.5), sharey=True)
    for ax, arm in zip(axes, ARMS, strict=True):
        for node, series in run.truth.items():
            if node.startswith(f"{arm.prefix}-"):
                ax.plot([t - run.drift for t, _ in series], [v for _, v in series], linewidth=1)
        ax.axhline(THRESHOLD, color="red", linestyle="--", linewidth=1)
        ax.axvline(0, color="grey", linestyle=":", linewidth=1)
        m = results[arm.label]
        ax.set_title(
            f"{arm.label}: {m['node-minutes over 80% after the drift']:.1f} node-min, {m['evictions']} evictions",
            fontsize=9,
        )
        ax.set_xlabel("seconds since the drift")
    axes[0].set_ylabel("node CPU (truth, as kwok serves it)")
    fig.suptitle(f"Drift after placement, {run.scenario} scenario (benchmarks/placement/drift.py)", fontsize=11)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"drift-{run.scenario}.png"
    fig.savefig(path, dpi=70)
    plt.close(fig)
    return path


def summary(runs: list[dict[str, Any]]) -> str:
    """Per metric and arm: the median and [min-max] over the seeds."""
    labels = [arm.label for arm in ARMS]
    rows = ["| metric | " + " | ".join(labels) + " |", "|---|" + "---:|" * len(labels)]
    metrics = dict.fromkeys(m for run in runs for label in labels for m in run[label])
    for metric in metrics:
        cells = [_cell(metric, [run[label][metric] for run in runs if metric in run[label]]) for label in labels]
        rows.append(f"| {metric} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _cell(metric: str, values: list[Any]) -> str:
    if not values:
        return "-"
    if isinstance(values[0], str):
        return ", ".join(values)
    middle, low, high = statistics.median(values), min(values), max(values)
    shown = (lambda v: f"{v:.0%}") if "CPU" in metric else (lambda v: f"{v:.2f}" if isinstance(v, float) else f"{v:g}")
    return shown(middle) if low == high else f"{shown(middle)} [{shown(low)}-{shown(high)}]"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="strong")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--nodes", type=int, default=12, help="nodes per arm")
    parser.add_argument("--observe", type=float, default=300.0, help="seconds after the drift")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    parser.add_argument(
        "--measure", type=Path, nargs="+", metavar="DIR", help="measure earlier runs (their workdirs) again instead"
    )
    args = parser.parse_args()
    if args.measure:
        runs = [Recorded.load(workdir) for workdir in args.measure]
    else:
        runs = []
        for seed in args.seeds:
            workdir = Path(tempfile.mkdtemp(prefix=f"loadext-drift-{args.scenario}-{seed}-"))
            runs.append(run_seed(args.scenario, seed, args.nodes, args.observe, workdir))
    results = [{arm.label: measure(arm, SCENARIOS[run.scenario], run) for arm in ARMS} for run in runs]
    print(f"plot: {plot(runs[0], results[0], args.out)}", file=sys.stderr)
    print(f"{runs[0].scenario} drift, {len(runs)} run(s), median [range]:\n")
    print(summary(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
