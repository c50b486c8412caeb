"""Closed-loop drift benchmark: load rises after placement; the default scheduler, loadext, and
loadext with its rebalancer, side by side in one run on the real control plane.

    python3 benchmarks/placement/drift.py [--nodes 12] [--replicas 8] [--drifting 1] [--hot-cores 5]
                                          [--observe 300] [--out DIR]

The same setup as run.py (real kube-apiserver and kube-scheduler from their Go modules; kwok plays
the kubelets and serves /metrics/resource from the pods' usage annotations, which a real
Prometheus scrapes), plus the real kube-controller-manager: its ReplicaSet controller recreates
evicted pods, its disruption controller keeps each workload's PodDisruptionBudget
(maxUnavailable 1) current. Per arm, on nodes of its own:

1. six ReplicaSets are placed while every pod uses 0.4 cores (the cluster is cool);
2. then `--drifting` of them drift: their pods (and their template, so replacements do too)
   use `--hot-cores` each, and the nodes that hold them run hot where their other load is high;
3. for `--observe` seconds the arm does what it does: nothing (default scheduler, loadext
   without rebalancing), or moves pods off hot nodes (loadext with `rebalance: {mode: evict}`).

Reported per arm: node-minutes over the threshold after the drift, max node CPU over time,
evictions, the fewest moves that would bring every node under the threshold (computed offline
from the pods' usage at the drift: largest pods first per hot node), PDB violations (samples
with more than one pod of a workload unavailable), pods evicted twice, nodes made hot by a move
(over the threshold within hotFor + the herd window after receiving a moved pod), pods Pending
at the end; and a plot of every node's CPU (the truth kwok serves) over time.
"""

from __future__ import annotations

import argparse
import json
import re
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

from harness.kubernetes import ControlPlane, build_components, wait_until  # noqa: E402
from harness.loadext import ready, serve_argv  # noqa: E402
from harness.prometheus import PrometheusServer, free_port  # noqa: E402

WORKLOADS = ("web", "api", "cart", "search", "feed", "mail")  # the first --drifting of them drift
COOL_CORES = 0.4
HOT_FOR, CYCLE = 3, "5s"
WINDOW = RATE_WINDOW + 5  # the herd window: a new pod's usage fills the node signal's rate() by then
ARMS = (
    ("default scheduler", "dflt", "default-profile", False),
    ("loadext", "lext", "loadext-scheduler", False),
    ("loadext + rebalance", "rbal", "loadext-scheduler", True),
)


def replica_set(prefix: str, workload: str, scheduler: str, replicas: int, cores: float) -> dict[str, Any]:
    labels = {"app": f"{prefix}-{workload}"}
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": f"{prefix}-{workload}", "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": {USAGE_CPU: millicores(cores)}},
                "spec": {
                    "schedulerName": scheduler,
                    "nodeSelector": {"bench/run": prefix},
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "app",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {
                                "requests": {"cpu": "500m", "memory": "256Mi"},
                                "limits": {"cpu": "4", "memory": "1Gi"},
                            },
                        }
                    ],
                },
            },
        },
    }


def budget(prefix: str, workload: str) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": f"{prefix}-{workload}", "namespace": NAMESPACE},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": f"{prefix}-{workload}"}}},
    }


@dataclass
class Watch:
    """Samples the arm's pods twice a second: which pods went away (evicted: deleted while their
    ReplicaSet wants them), workloads with more than one pod unavailable (a PDB violation)."""

    api: Any
    prefix: str
    replicas: int
    seen: dict[str, tuple[str, str]] = field(default_factory=dict)  # pod -> (node, app)
    gone: dict[str, tuple[float, str]] = field(default_factory=dict)  # pod -> (when, node)
    born: dict[str, float] = field(default_factory=dict)  # pod -> first seen
    violations: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            now = time.time()
            pods = [p for p in list_pods(self.api) if p["metadata"]["name"].startswith(f"{self.prefix}-")]
            current = {}
            available: dict[str, int] = {}
            for pod in pods:
                name, app = pod["metadata"]["name"], pod["metadata"].get("labels", {}).get("app", "")
                if not app or pod["metadata"].get("deletionTimestamp"):
                    continue
                current[name] = (pod["spec"].get("nodeName", ""), app)
                self.born.setdefault(name, now)
                if pod.get("status", {}).get("phase") == "Running":
                    available[app] = available.get(app, 0) + 1
            for name, (node, _) in self.seen.items():
                if name not in current and name not in self.gone:
                    self.gone[name] = (now, node)
            self.seen.update(current)
            apps = {app for _, app in current.values()}
            self.violations += sum(1 for app in apps if self.replicas - available.get(app, 0) > 1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def fewest_moves(api: Any, prefix: str, nodes: list[str]) -> int:
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


def outcomes(port: int) -> dict[str, float]:
    """loadext_rebalance_evictions_total by result, now."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    found = re.findall(r'^loadext_rebalance_evictions_total\{result="(\w+)"\} (\S+)$', text, re.MULTILINE)
    return {result: float(value) for result, value in found}


def moved_to(port: int) -> list[tuple[float, str]]:
    """(when, target) of each eviction in loadext's last moves (/explain)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/explain", timeout=5) as reply:
        report = json.loads(reply.read())
    return [(m["time"], m["target"]) for m in report.get("rebalance", {}).get("last", []) if m["result"] == "evicted"]


def measure(
    truth: Truth, watch: Watch, drift: float, originals: set[str], targets: list[tuple[float, str]]
) -> dict[str, Any]:
    over = 0.0
    for series in truth.series.values():
        for (t0, value), (t1, _) in pairwise(series):
            if t0 >= drift and value > THRESHOLD:
                over += t1 - t0
    evicted = {name: when for name, (when, _) in watch.gone.items() if when >= drift}
    made_hot = set()
    for when, target in targets:
        after = [v for t, v in truth.series.get(target, ()) if when <= t <= when + HOT_FOR + WINDOW]
        if any(v > THRESHOLD for v in after):
            made_hot.add(target)
    pods = [p for p in list_pods(truth.api) if p["metadata"]["name"].startswith(f"{watch.prefix}-")]
    return {
        "node-minutes over 80% after the drift": over / 60,
        "max node CPU after the drift": max(v for s in truth.series.values() for t, v in s if t >= drift),
        "evictions": len(evicted),
        "pods evicted twice": sum(1 for name in evicted if name not in originals),
        "PDB violations (samples)": watch.violations,
        "nodes made hot by a move": len(made_hot),
        "pods pending at the end": sum(1 for p in pods if not p["spec"].get("nodeName")),
    }


def loadext_config(prom_url: str, rebalance: bool) -> dict[str, Any]:
    return {
        "prometheus": {"url": prom_url, "timeout": "1s"},
        "refreshInterval": "1s",
        "maxDataAge": "30s",
        "signals": [
            {
                "name": "cpu",
                "query": f"rate(node_cpu_usage_seconds_total[{RATE_WINDOW}s]) / {CORES}",
                "threshold": THRESHOLD,
                "weight": 1,
            },
            {"name": "memory", "query": "node_memory_working_set_bytes / (64 * 2^30)", "threshold": 0.9, "weight": 0},
        ],
        "herdGuard": {"enabled": True, "window": f"{WINDOW}s"},
        "rebalance": {
            "enabled": rebalance,
            "mode": "evict",
            "hotFor": HOT_FOR,
            "coolFor": 3,
            "cycle": CYCLE,
            "minPodAge": "10s",
            "maxPerCycle": 5,
        },
    }


def plot(results: dict[str, Any], truths: dict[str, Truth], drifts: dict[str, float], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(truths), figsize=(6 * len(truths), 4.5), sharey=True)
    for ax, (label, truth) in zip(axes, truths.items(), strict=True):
        for node, series in truth.series.items():
            ax.plot([t - drifts[label] for t, _ in series], [v for _, v in series], linewidth=1, label=node[-2:])
        ax.axhline(THRESHOLD, color="red", linestyle="--", linewidth=1)
        ax.axvline(0, color="grey", linestyle=":", linewidth=1)
        m = results[label]
        ax.set_title(
            f"{label}: {m['node-minutes over 80% after the drift']:.1f} node-min over 80%, {m['evictions']} evictions",
            fontsize=10,
        )
        ax.set_xlabel("seconds since the drift")
    axes[0].set_ylabel("node CPU (truth, as kwok serves it)")
    fig.suptitle("Drift after placement (benchmarks/placement/drift.py)", fontsize=11)
    fig.tight_layout()
    path = out / "drift-benchmark.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=12)
    parser.add_argument("--replicas", type=int, default=8, help="pods per workload (six workloads)")
    parser.add_argument("--drifting", type=int, default=1, help="workloads whose usage rises")
    parser.add_argument("--hot-cores", type=float, default=5.0, help="what a drifting pod uses after the drift")
    parser.add_argument("--observe", type=float, default=300.0, help="seconds after the drift")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="loadext-drift-"))
    kwok, kwok_stages = build_kwok()
    plane = ControlPlane(workdir, build_components())
    node_names = {prefix: [f"{prefix}-{i:02d}" for i in range(args.nodes)] for _, prefix, _, _ in ARMS}
    kwok_address = f"127.0.0.1:{free_port()}"
    prom = PrometheusServer(
        str(workdir), kubelet_scrape_config(kwok_address, [n for names in node_names.values() for n in names])
    )
    try:
        plane.start()
        api = plane.api()
        core, apps, policy = client.CoreV1Api(api), client.AppsV1Api(api), client.PolicyV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
        (workdir / "kwok.yaml").write_text(kwok_stages + "\n---\n" + KWOK_CONFIG)
        kwok_process = plane.spawn(
            "kwok",
            [
                str(kwok),
                f"--kubeconfig={plane.admin_kubeconfig}",
                f"--config={workdir / 'kwok.yaml'}",
                "--manage-all-nodes=true",
                f"--server-address={kwok_address}",
                "--node-ip=127.0.0.1",
                "--cidr=127.8.0.0/16",
            ],
        )
        wait_until(
            lambda: urllib.request.urlopen(f"http://{kwok_address}/healthz", timeout=1).status == 200,
            "kwok /healthz",
            process=kwok_process,
        )
        plane.start_controller_manager("replicaset", "disruption")
        config = workdir / "loadext.yaml"
        config.write_text(yaml.safe_dump(loadext_config(prom.url, rebalance=False)))
        port = free_port()
        argv = serve_argv(config, port, "--kubeconfig", str(plane.admin_kubeconfig), "--watch-nodes")
        loadext = plane.spawn("loadext", [*argv, "--reload-interval", "500ms"])
        wait_until(lambda: ready(f"http://127.0.0.1:{port}"), "loadext", process=loadext)
        shipped = yaml.safe_load(
            next(
                d
                for d in yaml.safe_load_all(plane.kubectl("kustomize", str(ROOT / "manifests" / "base")).stdout)
                if d and d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("loadext-scheduler-config")
            )["data"]["scheduler-config.yaml"]
        )
        shipped["extenders"][0]["urlPrefix"] = f"http://127.0.0.1:{port}"
        plane.start_scheduler("loadext-scheduler", shipped, plane.admin_kubeconfig)
        plane.start_scheduler(
            "default-profile",
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "profiles": [{"schedulerName": "default-profile"}],
            },
            plane.admin_kubeconfig,
        )
        results: dict[str, Any] = {}
        truths: dict[str, Truth] = {}
        drifts: dict[str, float] = {}
        for label, prefix, scheduler, rebalance in ARMS:
            make_nodes(core, prefix, args.nodes)
            truth = truths[label] = Truth(api, node_names[prefix]).start()
            prom.wait_for(
                f'count(rate(node_cpu_usage_seconds_total{{node=~"{prefix}-.*"}}[{RATE_WINDOW}s]) > 0)',
                lambda r, n=args.nodes: bool(r) and float(r[0]["value"][1]) == n,
                timeout=60,
            )
            for workload in WORKLOADS:
                policy.create_namespaced_pod_disruption_budget(NAMESPACE, budget(prefix, workload))
                rs = replica_set(prefix, workload, scheduler, args.replicas, COOL_CORES)
                apps.create_namespaced_replica_set(NAMESPACE, rs)
            wanted = len(WORKLOADS) * args.replicas
            wait_until(
                lambda p=prefix, w=wanted: (
                    sum(
                        1
                        for pod in list_pods(api)
                        if pod["metadata"]["name"].startswith(f"{p}-")
                        and pod.get("status", {}).get("phase") == "Running"
                        and pod["metadata"].get("labels", {}).get("app")
                    )
                    == w
                ),
                f"{label}: every pod placed and running",
                timeout=120,
            )
            time.sleep(RATE_WINDOW + 3)  # loadext sees the placed pods' usage
            originals = {
                p["metadata"]["name"] for p in list_pods(api) if p["metadata"]["name"].startswith(f"{prefix}-")
            }
            config.write_text(yaml.safe_dump(loadext_config(prom.url, rebalance=rebalance)))
            before = outcomes(port)
            watch = Watch(api, prefix, args.replicas)
            drifts[label] = time.time()
            hot = millicores(args.hot_cores)
            for workload in WORKLOADS[: args.drifting]:
                name = f"{prefix}-{workload}"
                apps.patch_namespaced_replica_set(
                    name, NAMESPACE, {"spec": {"template": {"metadata": {"annotations": {USAGE_CPU: hot}}}}}
                )
                for pod in list_pods(api):
                    if pod["metadata"].get("labels", {}).get("app") == name:
                        core.patch_namespaced_pod(
                            pod["metadata"]["name"], NAMESPACE, {"metadata": {"annotations": {USAGE_CPU: hot}}}
                        )
            time.sleep(2)
            least = fewest_moves(api, prefix, node_names[prefix])
            time.sleep(args.observe)
            targets = moved_to(port) if rebalance else []
            watch.stop()
            truth.stop()
            results[label] = {**measure(truth, watch, drifts[label], originals, targets), "fewest moves needed": least}
            after = outcomes(port)
            planned = {r: int(after[r] - before.get(r, 0.0)) for r in after if after[r] > before.get(r, 0.0)}
            results[label]["rebalancer steps by result"] = ", ".join(f"{r} {n}" for r, n in sorted(planned.items()))
            print(f"{label}: {results[label]}", file=sys.stderr)
            config.write_text(yaml.safe_dump(loadext_config(prom.url, rebalance=False)))
            for workload in WORKLOADS:  # the arm's pods go, so that the next arm's rebalancer sees none
                apps.patch_namespaced_replica_set(f"{prefix}-{workload}", NAMESPACE, {"spec": {"replicas": 0}})
        picture = plot(results, truths, drifts, args.out)
        (workdir / "results.json").write_text(json.dumps(results, indent=2))
        print(table(results))
        print(f"\nplot: {picture}")
    finally:
        plane.stop()
        prom.stop()
    return 0


def _cell(metric: str, value: Any) -> str:
    if value == "":
        return "-"
    if "CPU" in metric:
        return f"{value:.0%}"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def table(results: dict[str, Any]) -> str:
    labels = list(results)
    rows = ["| metric | " + " | ".join(labels) + " |", "|---|" + "---:|" * len(labels)]
    for metric in dict.fromkeys(m for label in labels for m in results[label]):
        cells = []
        for label in labels:
            value = results[label].get(metric)
            cells.append(_cell(metric, value))
        rows.append(f"| {metric} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


if __name__ == "__main__":
    raise SystemExit(main())
