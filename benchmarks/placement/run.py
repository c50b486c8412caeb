"""Closed-loop placement benchmark on the real control plane: default scheduler vs loadext.

    python3 benchmarks/placement/run.py [--nodes 50] [--bursts 6] [--burst-size 50] [--out DIR]

A real kube-apiserver and kube-scheduler (the E2E suite's, built from Go modules) place the same
workload twice in one run: once with the default profile, once with the loadext profile (the
shipped KubeSchedulerConfiguration, herd guard on, the shipped flags). kwok (built from its Go
module, scripts/build-go-tool.sh) plays every kubelet: it keeps the Nodes Ready, turns bound pods
Running, and serves each node's kubelet resource metrics (/metrics/resource:
node_cpu_usage_seconds_total, container_cpu_usage_seconds_total, ...) from the pods' usage
annotations (its Metric and ClusterResourceUsage resources). The benchmark's Prometheus scrapes
those endpoints as it would scrape kubelets, so loadext reads node load and each pod's own usage
(its default herdGuard.podUsage query) from the same series it reads in production; a new pod
shows in its node's load only as the 20 s rate() window fills.

Each node starts with skewed background load (a pod pinned to it: 5 % to 65 % CPU). The workload
is five ReplicaSets whose pods really use 0.1 to 2.5 cores under limits far above that, in
bursts, so loadext's learned estimates can use owner history.

Prints a table and writes results.json and a plot of per-node utilisation over time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness.kubernetes import ControlPlane, build_components, ready_node_status, wait_until  # noqa: E402
from harness.loadext import ready, serve_argv  # noqa: E402
from harness.prometheus import PrometheusServer, free_port  # noqa: E402

CORES = 16
THRESHOLD = 0.8
RATE_WINDOW = 20  # seconds: the node CPU signal's rate() range, so a new pod's usage takes this long to show
NAMESPACE = "bench"
KWOK_VERSION = "v0.8.0"
USAGE_CPU = "kwok.x-k8s.io/usage-cpu"  # the annotation kwok's usage expression reads (millicores)

# kwok's resource usage and kubelet /metrics/resource, as its kustomize/metrics presets define
# them: a pod uses what its annotations say from the moment it runs; a node, the sum of its pods.
KWOK_CONFIG = f"""
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterResourceUsage
metadata:
  name: usage-from-annotation
spec:
  usages:
  - usage:
      cpu:
        expression: >-
          "{USAGE_CPU}" in pod.metadata.annotations
          ? Quantity(pod.metadata.annotations["{USAGE_CPU}"]) : Quantity("1m")
      memory:
        expression: 'Quantity("200Mi")'
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Metric
metadata:
  name: metrics-resource
spec:
  path: /metrics/nodes/{{nodeName}}/metrics/resource
  metrics:
  - name: container_cpu_usage_seconds_total
    dimension: container
    help: Cumulative cpu time consumed by the container in core-seconds
    kind: counter
    labels:
    - {{name: container, value: container.name}}
    - {{name: namespace, value: pod.metadata.namespace}}
    - {{name: pod, value: pod.metadata.name}}
    value: pod.CumulativeUsage("cpu", container.name)
  - name: container_memory_working_set_bytes
    dimension: container
    help: Current working set of the container in bytes
    kind: gauge
    labels:
    - {{name: container, value: container.name}}
    - {{name: namespace, value: pod.metadata.namespace}}
    - {{name: pod, value: pod.metadata.name}}
    value: pod.Usage("memory", container.name)
  - name: node_cpu_usage_seconds_total
    dimension: node
    help: Cumulative cpu time consumed by the node in core-seconds
    kind: counter
    value: node.CumulativeUsage("cpu")
  - name: node_memory_working_set_bytes
    dimension: node
    help: Current working set of the node in bytes
    kind: gauge
    value: node.Usage("memory")
"""


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


def millicores(cores: float) -> str:
    return f"{round(cores * 1000)}m"


def cores_of(pod: dict[str, Any]) -> float:
    return int(pod["metadata"]["annotations"][USAGE_CPU].removesuffix("m")) / 1000


def list_pods(api: Any) -> list[dict[str, Any]]:
    """The namespace's pods as plain JSON (the client's models cost seconds per list here)."""
    reply = client.CoreV1Api(api).list_namespaced_pod(NAMESPACE, _preload_content=False)
    items: list[dict[str, Any]] = json.loads(reply.data)["items"]
    return items


class Truth:
    """What kwok serves as each node's CPU use, sampled twice a second: the usage annotations of
    the pods Running there (its background pod and whatever was placed), over its cores. The
    plot and the over-threshold minutes use this; loadext sees it only through Prometheus."""

    def __init__(self, api: Any, nodes: list[str]) -> None:
        self.api = api
        self.series: dict[str, list[tuple[float, float]]] = {n: [] for n in nodes}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Truth:
        self.sample()
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.sample()

    def sample(self) -> None:
        now = time.time()
        used = dict.fromkeys(self.series, 0.0)
        for pod in list_pods(self.api):
            node = pod["spec"].get("nodeName")
            if node in used and pod.get("status", {}).get("phase") == "Running":
                used[node] += cores_of(pod)
        for node, cores in used.items():
            self.series[node].append((now, cores / CORES))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def make_nodes(core: Any, prefix: str, count: int) -> list[str]:
    """Ready 16-core Nodes (kwok keeps them so), each with its background load as a pinned pod."""
    names = []
    for i in range(count):
        name = f"{prefix}-{i:02d}"
        core.create_node(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {"bench/run": prefix, "kubernetes.io/hostname": name}},
                "status": ready_node_status(name, str(CORES), "64Gi", message="kwok"),
            }
        )
        # The TaintNodesByCondition admission plugin taints a new Node not-ready; the node
        # lifecycle controller (not run here) would lift it once the Node reports Ready.
        core.patch_node(name, {"spec": {"taints": None}})
        core.create_namespaced_pod(
            NAMESPACE,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-background",
                    "annotations": {USAGE_CPU: millicores(background(i, count) * CORES)},
                },
                "spec": {
                    "nodeName": name,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "system", "image": "registry.k8s.io/pause:3.10"}],
                },
            },
        )
        names.append(name)
    return names


def kubelet_scrape_config(kwok_address: str, nodes: list[str]) -> str:
    """Prometheus scraping kwok's per-node /metrics/resource as it scrapes kubelets, the node's
    name as the `node` label (as kube-prometheus-stack's kubelet job relabels it)."""
    targets = [
        {"targets": [kwok_address], "labels": {"node": n, "__metrics_path__": f"/metrics/nodes/{n}/metrics/resource"}}
        for n in nodes
    ]
    return yaml.safe_dump(
        {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": "kubelet", "static_configs": targets}],
        }
    )


def real_usage(workload: Workload, index: int) -> float:
    """The workload's usage, varied per pod by -30 % .. +30 % (a fixed spread, so runs compare):
    owner history then has to estimate a distribution, not a constant."""
    return workload.usage * (0.7 + 0.6 * ((index * 37) % 11) / 10)


def run_workload(
    api: Any, prefix: str, scheduler: str, bursts: int, size: int, gap: float, after_burst: Any
) -> list[list[str]]:
    """Creates the bursts (calling after_burst(names) once each is bound, or after 30 s);
    returns the pod names of each burst."""
    core = client.CoreV1Api(api)
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
                        annotations={USAGE_CPU: millicores(real_usage(workload, index))},
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
            p["spec"].get("nodeName") for p in list_pods(api) if p["metadata"]["name"] in burst
        ):
            time.sleep(0.2)
        after_burst(burst)
        time.sleep(max(0.0, gap - (time.monotonic() - started)))
    return names


def measure(
    truth: Truth, api: Any, bursts: list[list[str]], start: float, estimates: dict[str, tuple[float, str]]
) -> dict[str, Any]:
    listed = {p["metadata"]["name"]: p for p in list_pods(api)}
    pods = {name: pod["spec"].get("nodeName") for name, pod in listed.items()}
    waits = []
    for burst in bursts:
        for name in burst:
            pod = listed[name]
            bound = next(
                (
                    c["lastTransitionTime"]
                    for c in pod.get("status", {}).get("conditions", ())
                    if c["type"] == "PodScheduled" and c["status"] == "True"
                ),
                None,
            )
            ended = timestamp(bound) if bound else time.time()
            waits.append(ended - timestamp(pod["metadata"]["creationTimestamp"]))
    final = {node: series[-1][1] for node, series in truth.series.items()}
    over = 0.0
    for series in truth.series.values():
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
        "max node CPU": max(v for s in truth.series.values() for t, v in s if t >= start),
        "p90 node CPU (end)": values[min(len(values) - 1, int(0.9 * len(values)))],
        "stddev across nodes (end)": statistics.pstdev(values),
        "node-minutes over 80%": over / 60,
        "most pods to one node in a burst": largest_burst,
        "pods pending": sum(1 for burst in bursts for n in burst if not pods.get(n)),
        "longest wait to be bound (s, 1 s resolution)": max(waits),
        **estimate_errors(listed, estimates),
    }


def timestamp(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339).timestamp()


def estimate_errors(listed: dict[str, dict[str, Any]], estimates: dict[str, tuple[float, str]]) -> dict[str, Any]:
    """From loadext's explain --pod: how far each pod's CPU estimate was from what it really
    uses, |estimate - real| / real, by where the estimate came from."""
    if not estimates:
        return {}
    errors: dict[str, list[float]] = {"owner": [], "factor": []}
    for name, (cores, source) in estimates.items():
        real = cores_of(listed[name])
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


def plot(results: dict[str, Any], truths: dict[str, Truth], starts: dict[str, float], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), sharey=True)
    for ax, (label, truth) in zip(axes, truths.items(), strict=True):
        for node, series in truth.series.items():
            ax.plot([t - starts[label] for t, _ in series], [v for _, v in series], linewidth=1, label=node[-2:])
        ax.axhline(THRESHOLD, color="red", linestyle="--", linewidth=1)
        m = results[label]
        ax.set_title(
            f"{label}: max {m['max node CPU']:.0%}, {m['node-minutes over 80%']:.1f} node-min over 80%", fontsize=10
        )
        ax.set_xlabel("seconds since the first burst")
    axes[0].set_ylabel("node CPU (truth, as kwok serves it)")
    if len(next(iter(truths.values())).series) <= 16:  # beyond that a legend hides the lines
        axes[1].legend(fontsize=6, ncol=2, title="node")
    fig.suptitle("Closed-loop placement benchmark (benchmarks/placement/run.py)", fontsize=11)
    fig.tight_layout()
    path = out / "placement-benchmark.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


# kwok's own stages, as shipped in its module: Nodes kept Ready with heartbeats, pods Running
# at once (and completed or deleted as kubelets do).
KWOK_STAGES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat/node-heartbeat.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)


def build_kwok() -> tuple[Path, str]:
    """kwok's binary (built once into the tool cache) and its shipped stages' YAML."""
    package = "sigs.k8s.io/kwok/cmd/kwok"
    script = ROOT / "scripts" / "build-go-tool.sh"
    about = "about 4 minutes on 2 cores"
    built = subprocess.run(
        ["bash", str(script), "kwok", package, KWOK_VERSION, about], stdout=subprocess.PIPE, text=True, check=True
    )
    module = subprocess.run(
        ["go", "mod", "download", "-json", f"sigs.k8s.io/kwok@{KWOK_VERSION}"],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    stages = Path(json.loads(module.stdout)["Dir"]) / "kustomize" / "stage"
    return Path(built.stdout.strip()), "\n---\n".join((stages / name).read_text() for name in KWOK_STAGES)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--bursts", type=int, default=6)
    parser.add_argument("--burst-size", type=int, default=50)
    parser.add_argument("--gap", type=float, default=10.0, help="seconds between bursts")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="loadext-placement-"))
    kwok, kwok_stages = build_kwok()
    plane = ControlPlane(workdir, build_components())
    runs = (("default scheduler", "dflt", "default-profile"), ("loadext", "lext", "loadext-scheduler"))
    node_names = {prefix: [f"{prefix}-{i:02d}" for i in range(args.nodes)] for _, prefix, _ in runs}
    kwok_address = f"127.0.0.1:{free_port()}"
    prom = PrometheusServer(
        str(workdir), kubelet_scrape_config(kwok_address, [n for names in node_names.values() for n in names])
    )
    try:
        plane.start()
        api = plane.api()
        core = client.CoreV1Api(api)
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
                "--node-ip=127.0.0.1",  # fake addresses in API objects only; loopback all the same
                "--cidr=127.8.0.0/16",
            ],
        )
        wait_until(
            lambda: urllib.request.urlopen(f"http://{kwok_address}/healthz", timeout=1).status == 200,
            "kwok /healthz",
            process=kwok_process,
        )
        config = workdir / "loadext.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "prometheus": {"url": prom.url, "timeout": "1s"},
                    "refreshInterval": "1s",
                    "maxDataAge": "30s",
                    "signals": [
                        {
                            "name": "cpu",
                            "query": f"rate(node_cpu_usage_seconds_total[{RATE_WINDOW}s]) / {CORES}",
                            "threshold": THRESHOLD,
                            "weight": 1,
                        },
                        {
                            "name": "memory",
                            "query": "node_memory_working_set_bytes / (64 * 2^30)",
                            "threshold": 0.9,
                            "weight": 0,
                        },
                    ],
                    "herdGuard": {"enabled": True, "window": f"{RATE_WINDOW + 5}s"},
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
        truths: dict[str, Truth] = {}
        starts: dict[str, float] = {}
        for label, prefix, scheduler in runs:
            make_nodes(core, prefix, args.nodes)
            truth = truths[label] = Truth(api, node_names[prefix]).start()
            # Every node's load visible to loadext: the rate() window has filled since the
            # background pods started running.
            prom.wait_for(
                f'count(rate(node_cpu_usage_seconds_total{{node=~"{prefix}-.*"}}[{RATE_WINDOW}s]) > 0)',
                lambda r, n=args.nodes: bool(r) and float(r[0]["value"][1]) == n,
                timeout=60,
            )
            time.sleep(RATE_WINDOW + 3)  # the window holds nothing but the background pods' usage
            starts[label] = time.time()
            estimates: dict[str, tuple[float, str]] = {}
            after = partial(explain_estimates, port, into=estimates) if prefix == "lext" else len
            bursts = run_workload(api, prefix, scheduler, args.bursts, args.burst_size, args.gap, after)
            time.sleep(RATE_WINDOW + 5)  # every pod's usage visible
            truth.stop()
            results[label] = measure(truth, api, bursts, starts[label], estimates)
            if estimates:
                by_burst = [sum(estimates.get(n, (0, ""))[1] == "owner" for n in burst) for burst in bursts]
                print(f"{label}: pods estimated from owner history, per burst: {by_burst}", file=sys.stderr)
            print(f"{label}: {results[label]}", file=sys.stderr)
        picture = plot(results, truths, starts, args.out)
        (workdir / "results.json").write_text(json.dumps(results, indent=2))
        print(table(results))
        print(f"\nplot: {picture}")
    finally:
        plane.stop()
        prom.stop()
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
