"""What the pod watch costs `loadext serve`, per event, on a real API server.

    python3 benchmarks/watch_cost.py [--pods 3000] [--runs 3] [--before DIR]

One control plane (etcd and kube-apiserver, built from their Go modules) and 100 Nodes; loadext
runs as shipped for the pod watch (--watch-nodes, herd guard on), pinned to CPU 1, with no
extender traffic. Each run creates `--pods` pods already bound to the node (one ADDED event
each, as a scheduler's bind gives) and waits until /explain counts them all in flight; then it
patches each pod's status (one MODIFIED event each that changes nothing loadext keeps, as a
kubelet's status updates do); then deletes them. loadext's CPU (from /proc, its idle rate over
the same time subtracted) divided by the events is the row; the table gives the median of the
runs and their range. `--before DIR` runs a second loadext from another checkout beside it
(the same CPU, the same events at the same moments), for before and after side by side.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from run import SERVER_CPU, cpu_seconds, pinned  # noqa: E402

from harness.config import as_yaml, loadext_config  # noqa: E402
from harness.kubernetes import ControlPlane, build_components, ready_node_status, wait_until  # noqa: E402
from harness.loadext import from_tree, ready, serve_argv  # noqa: E402
from harness.prometheus import free_port  # noqa: E402

NAMESPACE = "watch-cost"
NODES = [f"watch-node-{i:03d}" for i in range(100)]


def settled(check: Any, what: str) -> None:
    """Until check() holds, asked once a second: each /explain costs loadext CPU of its own."""
    deadline = time.monotonic() + 300
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(1)


def in_flight(url: str) -> int:
    with urllib.request.urlopen(url + "/explain", timeout=10) as reply:
        rows = json.load(reply)["nodes"]
    return sum((row.get("inFlight") or {}).get("pods", 0) for row in rows)


def each_pod(core: Any, count: int, action: Any) -> None:
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: action(core, i), range(count)))


def create(core: Any, i: int) -> None:
    container = {
        "name": "app",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "500m"}},
    }
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d4f8", "uid": "0", "controller": True}
    pod = {
        "metadata": {
            "name": f"pod-{i:05d}",
            "namespace": NAMESPACE,
            "labels": {"app": "web", "pod-template-hash": "5d4f8"},
            "ownerReferences": [owner],
        },
        "spec": {"nodeName": NODES[i % len(NODES)], "terminationGracePeriodSeconds": 0, "containers": [container]},
    }
    core.create_namespaced_pod(NAMESPACE, pod)


def touch_status(core: Any, i: int) -> None:
    """A status update as a kubelet makes one: a condition that loadext does not read."""
    name = f"pod-{i:05d}"
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {"type": "Ready", "status": "True", "lastTransitionTime": now}
    core.patch_namespaced_pod_status(name, NAMESPACE, {"status": {"conditions": [condition]}})


class Measured:
    """Each arm's CPU seconds over a stretch, less its idle rate over the same time."""

    def __init__(self, arms: dict[str, Arm]) -> None:
        self.arms = arms
        self.cpu = {name: cpu_seconds(arm.pid) for name, arm in arms.items()}
        self.wall = time.monotonic()

    def per(self, events: int) -> dict[str, float]:
        took = time.monotonic() - self.wall
        return {
            name: (cpu_seconds(arm.pid) - self.cpu[name] - arm.idle_rate * took) / events * 1e6
            for name, arm in self.arms.items()
        }


@dataclass
class Arm:
    """One `loadext serve` watching the pods."""

    url: str
    pid: int
    idle_rate: float = 0.0


def run_once(core: Any, arms: dict[str, Arm], pods: int) -> dict[str, dict[str, float]]:
    start = {name: cpu_seconds(arm.pid) for name, arm in arms.items()}
    time.sleep(10)
    for name, arm in arms.items():
        arm.idle_rate = (cpu_seconds(arm.pid) - start[name]) / 10
    out = {"idle CPU %": {name: arm.idle_rate * 100 for name, arm in arms.items()}}
    measured = Measured(arms)
    each_pod(core, pods, create)
    for arm in arms.values():
        settled(lambda arm=arm: in_flight(arm.url) == pods, "loadext to count every pod")
    out["bound pod (ADDED) us"] = measured.per(pods)
    measured = Measured(arms)
    each_pod(core, pods, touch_status)
    expected = pods  # every pod's status changed once: wait for the API server to have sent them
    settled(lambda: _status_touched(core) >= expected, "the status updates")
    time.sleep(2)  # the watch lags the list by a moment; nothing else to await from loadext
    out["status update (MODIFIED) us"] = measured.per(pods)
    core.delete_collection_namespaced_pod(NAMESPACE, grace_period_seconds=0)
    for arm in arms.values():
        settled(lambda arm=arm: in_flight(arm.url) == 0, "loadext to forget the pods")
    return out


def _status_touched(core: Any) -> int:
    listed = core.list_namespaced_pod(NAMESPACE).items
    return sum(1 for pod in listed if any(c.type == "Ready" for c in pod.status.conditions or ()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", type=Path, help="a checkout of older loadext code, watching beside it")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="loadext-watchcost-"))
    plane = ControlPlane(workdir, build_components())
    trees = {"now": None} | ({"before": args.before} if args.before else {})
    try:
        plane.start()
        core = client.CoreV1Api(plane.api())
        core.create_namespace({"metadata": {"name": NAMESPACE}})
        for node in NODES:
            core.create_node({"metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}}})
            core.patch_node_status(node, {"status": ready_node_status(node, "64", "256Gi", message="benchmark")})
        config = workdir / "loadext.yaml"
        herd = {"enabled": True, "window": "10m"}
        prometheus = f"http://127.0.0.1:{free_port()}"  # none: the watch alone is measured
        config.write_text(as_yaml(loadext_config(prometheus, "up", "up", refresh="5s", herdGuard=herd)))
        arms = {}
        for name, tree in trees.items():
            port = free_port()
            serve = serve_argv(
                config, port, "--kubeconfig", str(plane.admin_kubeconfig), "--watch-nodes",
                options=["--log-level", "error"],
            )  # fmt: skip
            process = plane.spawn(f"loadext-{name}", pinned(SERVER_CPU, from_tree(serve, tree)))
            arms[name] = Arm(f"http://127.0.0.1:{port}", process.proc.pid)
            wait_until(lambda url=arms[name].url: ready(url), f"loadext {name}", timeout=60, process=process)
        runs = []
        for i in range(args.runs):
            print(f"run {i + 1} of {args.runs} ...", file=sys.stderr)
            runs.append(run_once(core, arms, args.pods))
    finally:
        plane.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"| loadext CPU per event ({args.pods} pods, {args.runs} runs) | " + " | ".join(trees) + " |")
    print("|---|" + "---:|" * len(trees))
    for key in runs[0]:
        cells = []
        for name in trees:
            values = [run[key][name] for run in runs]
            cells.append(f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})")
        print(f"| {key} | " + " | ".join(cells) + " |")
    if args.out:
        args.out.write_text(json.dumps(runs, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
