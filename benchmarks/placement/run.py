"""Closed-loop placement benchmark on the real control plane: default scheduler vs loadext.

    python3 benchmarks/placement/run.py [--nodes 50] [--bursts 6] [--burst-size 50] [--out DIR]

A real kube-apiserver and kube-scheduler (the E2E suite's, built from Go modules) place the same
workload twice in one run: once with the default profile, once with the loadext profile (the
shipped KubeSchedulerConfiguration, herd guard on). Nodes start with skewed background load.
Pods request 500m CPU but really use 0.1 to 2.5 cores. A simulator plays kubelet and
node-exporter: it turns "pods bound to a node" into that node's CPU series, each pod's usage
appearing only after a delay (the rate window), which is what Prometheus and loadext see.

Pods come from five workloads (ReplicaSets, so loadext's learned estimates can use owner
history), each with its own real usage and a limit far above it. The simulator also plays
cAdvisor: POD_DELAY seconds after a pod is bound, its own usage series appears
(container_cpu_usage_seconds_total, which loadext's default herdGuard.podUsage query reads).

Prints a table and writes results.json and a plot of per-node utilisation over time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness.exporter import Exporter  # noqa: E402
from harness.kubernetes import ControlPlane, build_components, wait_until  # noqa: E402
from harness.loadext import ready, serve_argv  # noqa: E402
from harness.prometheus import PrometheusServer, free_port, scrape_config  # noqa: E402

CORES = 16
THRESHOLD = 0.8
DELAY = 20.0  # seconds until a new pod's usage shows in the node's metrics (the rate window)
POD_DELAY = 5.0  # seconds until cAdvisor's series for the pod itself shows it (two scrapes)
NAMESPACE = "bench"


@dataclass(frozen=True)
class Workload:
    name: str
    usage: float  # cores really used
    request: str
    limit: str  # far above use, as is common


WORKLOADS = (
    Workload("web", 0.3, "500m", "3"),
    Workload("api", 1.0, "500m", "3"),
    Workload("batch", 2.5, "1", "3"),
    Workload("cache", 0.6, "250m", "2"),
    Workload("tiny", 0.1, "100m", "1"),
)


def background(i: int, nodes: int) -> float:
    """Skewed: from 5 % on the first node to 65 % on the last."""
    return 0.05 + 0.6 * i / max(nodes - 1, 1)


class Simulator:
    """Plays kubelet and node-exporter: node CPU = background + pods bound over DELAY seconds ago."""

    def __init__(self, core: Any, exporter: Exporter, nodes: dict[str, float]) -> None:
        self.core, self.exporter, self.nodes = core, exporter, nodes
        self.bound_at: dict[str, tuple[str, float, float]] = {}  # pod -> (node, when seen bound, usage)
        self.measured: set[str] = set()  # pods whose own cAdvisor series are published
        self.series: dict[str, list[tuple[float, float]]] = {n: [] for n in nodes}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Simulator:
        self._publish(time.time())
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self._publish(time.time())

    def _publish(self, now: float) -> None:
        for pod in self.core.list_namespaced_pod(NAMESPACE).items:
            if pod.spec.node_name in self.nodes and pod.metadata.name not in self.bound_at:
                usage = float(pod.metadata.annotations["bench/usage-cores"])
                self.bound_at[pod.metadata.name] = (pod.spec.node_name, now, usage)
        visible: dict[str, float] = dict.fromkeys(self.nodes, 0.0)
        for name, (node, since, usage) in self.bound_at.items():
            if now - since >= DELAY:
                visible[node] += usage
            if now - since >= POD_DELAY and name not in self.measured:
                self.measured.add(name)
                labels = {"namespace": NAMESPACE, "pod": name, "container": "app"}
                self.exporter.set_counter_rate("container_cpu_usage_seconds_total", usage, **labels)
                self.exporter.set_gauge("container_memory_working_set_bytes", 200 * 2**20, **labels)
        for node, base in self.nodes.items():
            ratio = base + visible[node] / CORES
            self.exporter.set_gauge("sim_cpu", ratio, node=node)
            self.exporter.set_gauge("sim_memory", 0.3, node=node)
            self.series[node].append((now, ratio))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def make_nodes(core: Any, prefix: str, count: int) -> dict[str, float]:
    nodes = {}
    for i in range(count):
        name = f"{prefix}-{i:02d}"
        core.create_node(
            client.V1Node(
                metadata=client.V1ObjectMeta(name=name, labels={"bench/run": prefix, "kubernetes.io/hostname": name})
            )
        )
        core.patch_node(name, {"spec": {"taints": None}})
        resources = {"cpu": str(CORES), "memory": "64Gi", "pods": "110"}
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        core.patch_node_status(
            name,
            {
                "status": {
                    "capacity": resources,
                    "allocatable": resources,
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "KubeletReady",
                            "message": "sim",
                            "lastHeartbeatTime": now,
                            "lastTransitionTime": now,
                        }
                    ],
                }
            },
        )
        nodes[name] = background(i, count)
    return nodes


def real_usage(workload: Workload, index: int) -> float:
    """The workload's usage, varied per pod by -30 % .. +30 % (a fixed spread, so runs compare):
    owner history then has to estimate a distribution, not a constant."""
    return workload.usage * (0.7 + 0.6 * ((index * 37) % 11) / 10)


def run_workload(
    core: Any, prefix: str, scheduler: str, bursts: int, size: int, gap: float, after_burst: Any
) -> list[list[str]]:
    """Creates the bursts (calling after_burst(names) once each is bound, or after 30 s);
    returns the pod names of each burst."""
    names = []
    for b in range(bursts):
        burst = []
        started = time.monotonic()
        for j in range(size):
            index = b * size + j
            name = f"{prefix}-pod-{index:03d}"
            workload = WORKLOADS[index % len(WORKLOADS)]
            template_hash = f"{index % len(WORKLOADS)}7f9c"
            owner = client.V1OwnerReference(
                api_version="apps/v1",
                kind="ReplicaSet",
                name=f"{prefix}-{workload.name}-{template_hash}",
                uid=f"00000000-0000-4000-8000-{index % len(WORKLOADS):012d}",
                controller=True,
            )
            core.create_namespaced_pod(
                NAMESPACE,
                client.V1Pod(
                    metadata=client.V1ObjectMeta(
                        name=name,
                        annotations={"bench/usage-cores": f"{real_usage(workload, index):.3f}"},
                        labels={"pod-template-hash": template_hash},
                        owner_references=[owner],
                    ),
                    spec=client.V1PodSpec(
                        scheduler_name=scheduler,
                        node_selector={"bench/run": prefix},
                        termination_grace_period_seconds=0,
                        containers=[
                            client.V1Container(
                                name="app",
                                image="registry.k8s.io/pause:3.10",
                                resources=client.V1ResourceRequirements(
                                    requests={"cpu": workload.request, "memory": "256Mi"},
                                    limits={"cpu": workload.limit, "memory": "1Gi"},
                                ),
                            )
                        ],
                    ),
                ),
            )
            burst.append(name)
        names.append(burst)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(
            p.spec.node_name for p in core.list_namespaced_pod(NAMESPACE).items if p.metadata.name in burst
        ):
            time.sleep(0.2)
        after_burst(burst)
        time.sleep(max(0.0, gap - (time.monotonic() - started)))
    return names


def measure(
    sim: Simulator, core: Any, bursts: list[list[str]], start: float, estimates: dict[str, tuple[float, str]]
) -> dict[str, Any]:
    listed = {p.metadata.name: p for p in core.list_namespaced_pod(NAMESPACE).items}
    pods = {name: pod.spec.node_name for name, pod in listed.items()}
    waits = []
    for burst in bursts:
        for name in burst:
            pod = listed[name]
            bound = next(
                (
                    c.last_transition_time
                    for c in pod.status.conditions or ()
                    if c.type == "PodScheduled" and c.status == "True"
                ),
                None,
            )
            ended = bound.timestamp() if bound else time.time()
            waits.append(ended - pod.metadata.creation_timestamp.timestamp())
    final = {node: series[-1][1] for node, series in sim.series.items()}
    over = 0.0
    for series in sim.series.values():
        for (t0, value), (t1, _) in pairwise(series):
            if t0 >= start and value > THRESHOLD:
                over += t1 - t0
    largest_burst = 0
    for burst in bursts:
        counts: dict[str, int] = {}
        for name in burst:
            if pods.get(name):
                counts[pods[name]] = counts.get(pods[name], 0) + 1
        largest_burst = max([largest_burst, *counts.values()])
    values = sorted(final.values())
    return {
        "max node CPU": max(v for s in sim.series.values() for t, v in s if t >= start),
        "p90 node CPU (end)": values[min(len(values) - 1, int(0.9 * len(values)))],
        "stddev across nodes (end)": statistics.pstdev(values),
        "node-minutes over 80%": over / 60,
        "most pods to one node in a burst": largest_burst,
        "pods pending": sum(1 for burst in bursts for n in burst if not pods.get(n)),
        "longest wait to be bound (s, 1 s resolution)": max(waits),
        **estimate_errors(listed, estimates),
    }


def estimate_errors(listed: dict[str, Any], estimates: dict[str, tuple[float, str]]) -> dict[str, Any]:
    """From loadext's explain --pod: how far each pod's CPU estimate was from what it really
    uses, |estimate - real| / real, by where the estimate came from."""
    if not estimates:
        return {}
    errors: dict[str, list[float]] = {"owner": [], "factor": []}
    for name, (cores, source) in estimates.items():
        real = float(listed[name].metadata.annotations["bench/usage-cores"])
        errors.setdefault(source, []).append(abs(cores - real) / real)
    out: dict[str, Any] = {}
    for source, values in errors.items():
        out[f"pods estimated from {source}"] = len(values)
        if values:
            out[f"median estimate error ({source})"] = statistics.median(values)
    return out


def explain_estimates(port: int, pods: list[str], into: dict[str, tuple[float, str]]) -> None:
    """pod -> (CPU cores, source) of loadext's estimate at its last filter, from explain --pod
    (asked after each burst: loadext keeps the last 256 pods' decisions)."""
    for name in pods:
        url = f"http://127.0.0.1:{port}/explain?pod={NAMESPACE}/{name}"
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                estimate = json.loads(reply.read())["filter"]["estimate"]
        except (OSError, KeyError):
            continue  # never filtered (still Pending) or not kept
        into[name] = (float(estimate["cpuCores"]), str(estimate["source"]["cpu"]))


def plot(results: dict[str, Any], sims: dict[str, Simulator], starts: dict[str, float], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), sharey=True)
    for ax, (label, sim) in zip(axes, sims.items(), strict=True):
        for node, series in sim.series.items():
            ax.plot([t - starts[label] for t, _ in series], [v for _, v in series], linewidth=1, label=node[-2:])
        ax.axhline(THRESHOLD, color="red", linestyle="--", linewidth=1)
        m = results[label]
        ax.set_title(
            f"{label}: max {m['max node CPU']:.0%}, {m['node-minutes over 80%']:.1f} node-min over 80%", fontsize=10
        )
        ax.set_xlabel("seconds since the first burst")
    axes[0].set_ylabel("node CPU (truth, as the simulator sets it)")
    if len(next(iter(sims.values())).series) <= 16:  # beyond that a legend hides the lines
        axes[1].legend(fontsize=6, ncol=2, title="node")
    fig.suptitle("Closed-loop placement benchmark (benchmarks/placement/run.py)", fontsize=11)
    fig.tight_layout()
    path = out / "placement-benchmark.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--bursts", type=int, default=6)
    parser.add_argument("--burst-size", type=int, default=50)
    parser.add_argument("--gap", type=float, default=10.0, help="seconds between bursts")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="loadext-placement-"))
    plane = ControlPlane(workdir, build_components())
    exporter = Exporter()
    exporter.set_gauge("sim_ready", 1)
    prom = PrometheusServer(str(workdir), scrape_config(exporter.target))
    try:
        plane.start()
        core = client.CoreV1Api(plane.api())
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
        config = workdir / "loadext.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "prometheus": {"url": prom.url, "timeout": "1s"},
                    "refreshInterval": "1s",
                    "maxDataAge": "30s",
                    "signals": [
                        {"name": "cpu", "query": "sim_cpu", "threshold": THRESHOLD, "weight": 1},
                        {"name": "memory", "query": "sim_memory", "threshold": 0.9, "weight": 0},
                    ],
                    "herdGuard": {"enabled": True, "window": f"{DELAY + 5:.0f}s"},
                }
            )
        )
        port = free_port()
        shipped_flags = ("--watch-nodes", "--requeue-stranded")  # as manifests/base runs it
        argv = serve_argv(config, port, "--kubeconfig", str(plane.admin_kubeconfig), *shipped_flags)
        loadext = plane.spawn("loadext", argv)
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
        sims: dict[str, Simulator] = {}
        starts: dict[str, float] = {}
        for label, prefix, scheduler in (
            ("default scheduler", "dflt", "default-profile"),
            ("loadext", "lext", "loadext-scheduler"),
        ):
            nodes = make_nodes(core, prefix, args.nodes)
            sim = sims[label] = Simulator(core, exporter, nodes).start()
            prom.wait_for(
                f'count(sim_cpu{{node=~"{prefix}-.*"}})',
                lambda r, n=args.nodes: bool(r) and float(r[0]["value"][1]) == n,
            )
            time.sleep(3)  # loadext refreshes and sees these nodes
            starts[label] = time.time()
            estimates: dict[str, tuple[float, str]] = {}
            after = partial(explain_estimates, port, into=estimates) if prefix == "lext" else len
            bursts = run_workload(core, prefix, scheduler, args.bursts, args.burst_size, args.gap, after)
            time.sleep(DELAY + 5)  # every pod's usage visible
            sim.stop()
            results[label] = measure(sim, core, bursts, starts[label], estimates)
            if estimates:
                by_burst = [sum(estimates.get(n, (0, ""))[1] == "owner" for n in burst) for burst in bursts]
                print(f"{label}: pods estimated from owner history, per burst: {by_burst}", file=sys.stderr)
            print(f"{label}: {results[label]}", file=sys.stderr)
        picture = plot(results, sims, starts, args.out)
        (workdir / "results.json").write_text(json.dumps(results, indent=2))
        print(table(results))
        print(f"\nplot: {picture}")
    finally:
        plane.stop()
        prom.stop()
        exporter.close()
    return 0


def table(results: dict[str, Any]) -> str:
    labels = list(results)
    rows = ["| metric | " + " | ".join(labels) + " |", "|---|" + "---:|" * len(labels)]
    metrics = list(dict.fromkeys(m for label in labels for m in results[label]))  # loadext's estimates too
    for metric in metrics:
        cells = []
        for label in labels:
            value = results[label].get(metric)
            percent = "CPU" in metric or "error" in metric
            cells.append(
                "-"
                if value is None
                else f"{value:.0%}"
                if percent
                else f"{value:.2f}"
                if isinstance(value, float)
                else str(value)
            )
        rows.append(f"| {metric} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


if __name__ == "__main__":
    raise SystemExit(main())
