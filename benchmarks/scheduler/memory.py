"""loadext's memory and CPU as the cluster grows: Nodes and bound Pods on the real API server.

    python3 benchmarks/scheduler/memory.py [--nodes 5000] [--pods 0 30000 60000 150000]
        [--more-nodes 15000] [--pod-bytes 5000] [--before DIR] [--out FILE]

One control plane (etcd, kube-apiserver, built from their Go modules; no scheduler, no kubelets)
gets `--nodes` Ready Nodes, then bound Pods (created with spec.nodeName set, owned by 300
ReplicaSets, `--pod-bytes` each as the API server stores them: a last-applied-configuration
annotation pads them to a realistic size) in steps up to each `--pods` level. At each level a
fresh `loadext serve` runs as shipped (--watch-nodes, the herd guard on so it watches every Pod,
a real Prometheus holding a series per node; a 30 s herd window, waited out after the pods are
created, so they are bound pods and not pods in flight), and the table gives:

- ready s: until /readyz answers 200; pods synced s: until the pod watch reports its list;
- RSS MB settled (after a quiet spell) and high-water (VmHWM);
- bytes per pod: settled RSS above the 0-pod level, over the pods;
- CPU s per quiet minute; with `--churn`, CPU s during a minute in which 2000 pods are deleted
  and created again (at the last level);
- /metrics: CPU s and bytes per scrape.

Then `--more-nodes` Nodes in all (15 000) and the same row. With `--before DIR` (a checkout of an
older loadext) each level also runs that code, side by side in the same cluster and run.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
from kubernetes import client

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE.parent))

from run import bench_config, cpu_seconds, rss_mb  # noqa: E402

from benchmarks.scheduler.run import create_nodes, node_series  # noqa: E402
from harness.kubernetes import ADMIN_TOKEN, ControlPlane, build_components  # noqa: E402
from harness.loadext import from_tree, ready, serve_argv  # noqa: E402
from harness.metrics_text import metric_if_present  # noqa: E402
from harness.prometheus import free_port  # noqa: E402

NAMESPACES = [f"team-{i:02d}" for i in range(10)]
OWNERS = 300
WINDOW = 30.0  # the herd window: pods older than this are bound pods, not pods in flight
SETTLE = 20.0  # seconds of quiet before RSS is read as settled
QUIET = 30.0  # seconds over which quiet CPU is measured (reported per minute)


def pod_identity(i: int) -> tuple[int, str, str]:
    """Pod number i's owner (0..OWNERS-1), namespace and name."""
    owner = i % OWNERS
    return owner, NAMESPACES[owner % len(NAMESPACES)], f"web-{owner:03d}-5d8f7c9b4-{i:06d}"


def pod_body(i: int, node: str, pad: int) -> bytes:
    owner, namespace, name = pod_identity(i)
    labels = {"app": f"web-{owner:03d}", "pod-template-hash": "5d8f7c9b4"}
    container = {
        "name": "app",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "500m"}},
    }
    meta = {
        "name": name,
        "namespace": namespace,
        "labels": labels,
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": f"web-{owner:03d}-5d8f7c9b4",
                "uid": f"00000000-0000-0000-0000-{owner:012d}",
                "controller": True,
            }
        ],
    }
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0, "containers": [container]},
    }
    if pad:
        meta["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "x" * pad}
    return orjson.dumps(pod)


class Pods:
    """Creates and deletes bound pods through the API with raw bodies (the client's models cost
    more than the API server's work)."""

    def __init__(self, plane: ControlPlane, nodes: int, pod_bytes: int) -> None:
        api = plane.api()
        self.host = api.configuration.host
        self.http = api.rest_client.pool_manager  # the admin kubeconfig's CA
        self.headers = {"Content-Type": "application/json", "Authorization": f"Bearer {ADMIN_TOKEN}"}
        self.nodes = nodes
        self.count = 0
        self.created_at = 0.0  # when the newest pod was created
        base = len(pod_body(0, self._node(0), 0))
        self.pad = max(0, pod_bytes - base - 600)  # the API server adds uid, times, status, defaults

    def _node(self, i: int) -> str:
        return f"node-{(i % self.nodes) + 1:05d}"

    def create(self, indexes: range) -> None:
        def make(i: int) -> None:
            _, namespace, _ = pod_identity(i)
            body = pod_body(i, self._node(i), self.pad)
            reply = self.http.request(
                "POST", f"{self.host}/api/v1/namespaces/{namespace}/pods", body=body, headers=self.headers
            )
            if reply.status != 201:
                raise RuntimeError(f"creating pod {i}: {reply.status} {reply.data[:200]!r}")

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(make, indexes))

    def delete(self, indexes: range) -> None:
        def remove(i: int) -> None:
            _, namespace, name = pod_identity(i)
            path = f"/api/v1/namespaces/{namespace}/pods/{name}?gracePeriodSeconds=0"
            reply = self.http.request("DELETE", self.host + path, headers=self.headers)
            if reply.status not in (200, 202):
                raise RuntimeError(f"deleting pod {name}: {reply.status}")

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(remove, indexes))

    def grow_to(self, total: int) -> None:
        step = 10000
        while self.count < total:
            upto = min(total, self.count + step)
            self.create(range(self.count, upto))
            self.count = upto
            self.created_at = time.time()
            print(f"    {self.count} pods", file=sys.stderr)


def metrics_text(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as reply:
        return str(reply.read().decode())


def watch_synced(url: str) -> bool:
    try:
        return metric_if_present(metrics_text(url), "loadext_kube_watch_healthy", resource="pods") == 1
    except OSError:
        return False


def measure(
    plane: ControlPlane, label: str, source: Path, prometheus_url: str, workdir: Path, pods: Pods, churn: bool
) -> dict[str, Any]:
    config = workdir / f"{label}.yaml"
    config.write_text(bench_config(prometheus_url, herdGuard={"enabled": True, "window": f"{WINDOW:g}s"}))
    port = free_port()
    argv = serve_argv(
        config, port, "--kubeconfig", str(plane.admin_kubeconfig), "--watch-nodes", options=["--log-level", "warning"]
    )
    process = plane.spawn(label, from_tree(argv, source))
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    synced_at: float | None = None
    ready_at: float | None = None
    try:
        while ready_at is None or synced_at is None:
            assert process.alive(), process.log_tail()
            assert time.monotonic() - started < 600, f"{label} not ready and synced in 600 s"
            now = time.monotonic() - started
            if ready_at is None and ready(url):
                ready_at = now
            if synced_at is None and watch_synced(url):
                synced_at = now
            time.sleep(0.1)
        time.sleep(SETTLE)
        pid = process.proc.pid
        memory = rss_mb(pid)
        cpu = cpu_seconds(pid)
        time.sleep(QUIET)
        quiet = (cpu_seconds(pid) - cpu) * 60 / QUIET
        cpu = cpu_seconds(pid)
        scrapes = 5
        size = 0
        for _ in range(scrapes):
            size = len(metrics_text(url))
        scrape_cpu = (cpu_seconds(pid) - cpu) / scrapes
        row = {
            "ready_s": ready_at,
            "pods_synced_s": synced_at,
            "rss_mb": memory["VmRSS"],
            "hwm_mb": rss_mb(pid)["VmHWM"],
            "quiet_cpu_s_per_min": quiet,
            "scrape_cpu_s": scrape_cpu,
            "scrape_bytes": size,
        }
        if churn:
            cpu = cpu_seconds(pid)
            begun = time.monotonic()
            for batch in range(10):  # 2000 pods deleted and created again, spread over a minute
                indexes = range(batch * 200, batch * 200 + 200)
                pods.delete(indexes)
                time.sleep(0.5)
                pods.create(indexes)
                pods.created_at = time.time()
                time.sleep(max(0.0, begun + 6 * (batch + 1) - time.monotonic()))
            row["churn_cpu_s_per_min"] = (cpu_seconds(pid) - cpu) * 60 / (time.monotonic() - begun)
            row["churn_hwm_mb"] = rss_mb(pid)["VmHWM"]
        return row
    finally:
        process.stop()
        plane.processes.remove(process)


def run(args: argparse.Namespace) -> dict[str, Any]:
    bin_dir = build_components()
    workdir = Path(tempfile.mkdtemp(prefix="loadext-membench-"))
    arms = {"now": ROOT} | ({"before": args.before.resolve()} if args.before else {})
    plane = ControlPlane(workdir / "plane", bin_dir, ("ServiceAccount", "TaintNodesByCondition"))
    (workdir / "plane").mkdir()
    results: dict[str, Any] = {}
    with node_series(workdir, max(args.nodes, args.more_nodes or 0)) as prometheus_url:
        try:
            plane.start()
            core = client.CoreV1Api(plane.api())
            for namespace in NAMESPACES:
                core.create_namespace({"metadata": {"name": namespace}})
            print(f"creating {args.nodes} nodes ...", file=sys.stderr)
            create_nodes(core, args.nodes)
            pods = Pods(plane, args.nodes, args.pod_bytes)
            levels = [(args.nodes, count) for count in sorted(args.pods)]
            if args.more_nodes:
                levels.append((args.more_nodes, max(args.pods)))
            for nodes, count in levels:
                if nodes > pods.nodes:
                    print(f"creating nodes up to {nodes} ...", file=sys.stderr)
                    create_nodes(core, nodes, first=pods.nodes + 1)
                    pods.nodes = nodes
                pods.grow_to(count)
                time.sleep(max(0.0, pods.created_at + WINDOW + 5 - time.time()))  # every pod placed, none in flight
                last = (nodes, count) == levels[-1]
                for arm, source in arms.items():
                    key = f"{nodes} nodes, {count} pods, {arm}"
                    print(f"  {key} ...", file=sys.stderr)
                    label = f"loadext-{arm}-{nodes}-{count}"
                    results[key] = {"nodes": nodes, "pods": count, "arm": arm} | measure(
                        plane, label, source, prometheus_url, workdir, pods, args.churn and last
                    )
                    print(f"    {json.dumps(results[key])}", file=sys.stderr)
        finally:
            plane.stop()
    return results


def table(results: dict[str, Any]) -> str:
    lines = [
        "| nodes | pods | code | ready s | pods synced s | RSS settled MB | high-water MB | bytes/pod"
        " | CPU s per quiet min | CPU s per churn min | /metrics CPU s | /metrics MB |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base = {r["arm"]: r["rss_mb"] for r in results.values() if r["pods"] == 0}
    for r in results.values():
        per_pod = "-"
        if r["pods"] and r["arm"] in base:
            per_pod = f"{(r['rss_mb'] - base[r['arm']]) * 2**20 / r['pods']:.0f}"
        churn = f"{r['churn_cpu_s_per_min']:.1f}" if "churn_cpu_s_per_min" in r else "-"
        lines.append(
            f"| {r['nodes']} | {r['pods']} | {r['arm']} | {r['ready_s']:.1f} | {r['pods_synced_s']:.1f}"
            f" | {r['rss_mb']:.0f} | {r['hwm_mb']:.0f} | {per_pod} | {r['quiet_cpu_s_per_min']:.2f} | {churn}"
            f" | {r['scrape_cpu_s']:.3f} | {r['scrape_bytes'] / 2**20:.1f} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, nargs="+", default=[0, 30000, 60000, 150000])
    parser.add_argument("--more-nodes", type=int, default=15000, help="a last row at this many nodes (0: none)")
    parser.add_argument("--pod-bytes", type=int, default=5000, help="each pod's size as stored (default 5000)")
    parser.add_argument("--churn", action="store_true", help="measure CPU during churn at the last level")
    parser.add_argument("--before", type=Path, help="a checkout of older loadext code, run side by side")
    parser.add_argument("--out", type=Path, default=HERE / "memory.json")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    results = run(args)
    args.out.write_text(json.dumps(results, indent=2))
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
