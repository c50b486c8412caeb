"""Scheduler throughput on the real kube-scheduler: no extender, the Go reference, the Python
HTTP floor, loadext.

    python3 benchmarks/scheduler/run.py [--nodes 500 5000] [--pods 2000] [--runs 3] [--before DIR] [--out FILE]

For each cluster size, one control plane (etcd, kube-apiserver, built from their Go modules by
tests/e2e/build-k8s.sh; no kubelets) holds that many Ready Node objects with allocatable. For
each configuration in turn, `--pods` pods are created up front, then a kube-scheduler starts
with client QPS and burst raised so its API client is not the limit, and binds them. Pods bound
per second come from the scheduler's own "Successfully bound pod" log timestamps (the first 10 %
dropped as warm-up), the mean scheduling attempt from its scheduler_scheduling_attempt_duration
metric. The extender entries differ only in their URL: filter + prioritize, names only
(nodeCacheCapable), weight 5, as manifests/ ship it. loadext runs with the shipped flags
(--watch-nodes, herd guard on), fed by a real Prometheus holding a series per node; the Go
reference (benchmarks/reference/) decides the same values from a file; the floor
(benchmarks/floor.py --echo) is aiohttp and orjson alone answering correctly (every node passes,
every score 0): the fastest a Python extender on this HTTP stack can be, so loadext's distance
to it is what loadext's own work costs the scheduler. Each row also gives the CPU the extender
and the scheduler spent per pod bound (from /proc), which varies less between runs than pods/s,
and the extender's peak RSS (VmHWM: for loadext, names-only traffic with its watches).

One run swings by 20 % here, so each configuration runs `--runs` times, the configurations
interleaved within each round; the table gives medians, and the range of the runs for pods/s and
the extender's CPU per pod. `--before DIR` adds loadext from another checkout (its own process,
the same flags) as one more configuration: before and after in the same cluster and hour.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import signal
import ssl
import statistics
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes import client

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE.parent))

from run import answers, bench_config, build_reference, cpu_seconds, feed, node_name, rss_mb  # noqa: E402  (the same synthetic load)

from harness.exporter import Exporter  # noqa: E402
from harness.kubernetes import ControlPlane, Process, build_components, ready_node_status, wait_until  # noqa: E402
from harness.loadext import from_tree, ready, serve_argv  # noqa: E402
from harness.prometheus import PrometheusServer, free_port, scrape_config  # noqa: E402

NAMESPACE = "bench"
BEFORE = "loadext-before"
BOUND = re.compile(r'^I(\d{4} \d{2}:\d{2}:\d{2}\.\d{6}).*"Successfully bound pod to node" pod="bench/')
ATTEMPT = re.compile(
    r'^scheduler_scheduling_attempt_duration_seconds_(sum|count)\{[^}]*result="scheduled"[^}]*\} (\S+)'
)


def create_nodes(core: Any, count: int, first: int = 1) -> None:
    """Ready nodes `first`..`count` with allocatable, as a kubelet would report them
    (TaintNodesByCondition is off in this control plane, so no not-ready taint needs lifting)."""

    def make(i: int) -> None:
        name = node_name(i)
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
        core.create_node({"metadata": {"name": name, "labels": labels}})
        core.patch_node_status(name, {"status": ready_node_status(name, "16", "64Gi", message="benchmark")})

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(make, range(first, count + 1)))


def create_pods(core: Any, count: int) -> None:
    def make(i: int) -> None:
        container = {
            "name": "app",
            "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "500m"}},
        }
        pod = {
            "metadata": {"name": f"pod-{i:05d}", "namespace": NAMESPACE},
            "spec": {"terminationGracePeriodSeconds": 0, "containers": [container]},
        }
        core.create_namespaced_pod(NAMESPACE, pod)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(make, range(count)))


def delete_pods(core: Any) -> None:
    core.delete_collection_namespaced_pod(NAMESPACE, grace_period_seconds=0)
    wait_until(lambda: not core.list_namespaced_pod(NAMESPACE, limit=1).items, "pods deleted", timeout=300)


def bound_times(log: Path) -> list[float]:
    year = datetime.now().year
    times = []
    for line in log.read_text(errors="replace").splitlines():
        match = BOUND.match(line)
        if match:
            times.append(datetime.strptime(f"{year}{match.group(1)}", "%Y%m%d %H:%M:%S.%f").timestamp())
    return sorted(times)


def attempt_mean_ms(port: int) -> float | None:
    context = ssl._create_unverified_context()  # the scheduler's self-signed cert, loopback only
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", timeout=5, context=context) as reply:
        text = reply.read().decode()
    values = {m.group(1): float(m.group(2)) for line in text.splitlines() if (m := ATTEMPT.match(line))}
    if not values.get("count"):
        return None
    return 1000 * values["sum"] / values["count"]


def scheduler_config(extender_url: str | None, qps: int) -> dict[str, Any]:
    config: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"qps": qps, "burst": qps},
        "profiles": [{"schedulerName": "default-scheduler"}],
    }
    if extender_url is not None:
        config["extenders"] = [
            {
                "urlPrefix": extender_url,
                "filterVerb": "filter",
                "prioritizeVerb": "prioritize",
                "weight": 5,
                "nodeCacheCapable": True,
                "ignorable": True,
                "httpTimeout": "2s",
            }
        ]
    return config


def measure(
    plane: ControlPlane,
    core: Any,
    label: str,
    extender: tuple[str, Process] | None,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Bind `--pods` pods; pods/s, and the CPU the extender and the scheduler spent per pod
    (on a shared 2-core machine the extender's CPU is taken from the scheduler and the API
    server, so this is what an extender really costs, steadier than pods/s)."""
    extender_url = extender[0] if extender is not None else None
    create_pods(core, args.pods)
    name = f"scheduler-{label}"
    started = time.time()
    scheduler = plane.start_scheduler(
        name,
        scheduler_config(extender_url, args.qps),
        plane.admin_kubeconfig,
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
    )
    before = server_seconds(extender_url) if extender_url and label.startswith("loadext") else None
    extender_cpu = cpu_seconds(extender[1].proc.pid) if extender is not None else 0.0
    extender_peak: float | None = None
    try:
        wait_until(
            lambda: len(bound_times(scheduler.log_path)) >= args.pods,
            f"{args.pods} pods bound by {name}",
            timeout=args.timeout,
            process=scheduler,
        )
        times = bound_times(scheduler.log_path)
        if extender is not None:
            extender_cpu = cpu_seconds(extender[1].proc.pid) - extender_cpu
            extender_peak = rss_mb(extender[1].proc.pid)["VmHWM"]
        scheduler_cpu = cpu_seconds(scheduler.proc.pid)
        attempt = attempt_mean_ms(plane.scheduler_ports[name])
    finally:
        scheduler.stop()
        plane.processes.remove(scheduler)
    steady = times[len(times) // 10 :]
    rate = (len(steady) - 1) / (steady[-1] - steady[0]) if len(steady) > 1 else 0.0
    delete_pods(core)
    result = {
        "pods_per_s": rate,
        "attempt_ms": attempt,
        "all_bound_s": times[-1] - started,
        "scheduler_cpu_ms_per_pod": 1000 * scheduler_cpu / args.pods,
        "extender_cpu_ms_per_pod": 1000 * extender_cpu / args.pods if extender is not None else None,
        "extender_peak_rss_mb": extender_peak,
    }
    if before is not None and extender_url is not None:  # loadext's own metrics
        after = server_seconds(extender_url)
        for verb in ("filter", "prioritize"):
            (sum0, count0), (sum1, count1) = before[verb], after[verb]
            result[f"server_ms_{verb}"] = 1000 * (sum1 - sum0) / (count1 - count0) if count1 > count0 else None
    return result


def server_seconds(url: str) -> dict[str, tuple[float, float]]:
    """loadext's own time per verb so far: (sum, count) of loadext_request_duration_seconds."""
    with urllib.request.urlopen(url + "/metrics", timeout=5) as reply:
        text = reply.read().decode()
    out = {}
    for verb in ("filter", "prioritize"):
        values = {}
        for part in ("sum", "count"):
            match = re.search(rf'^loadext_request_duration_seconds_{part}{{verb="{verb}"}} (\S+)$', text, re.M)
            values[part] = float(match.group(1)) if match else 0.0
        out[verb] = (values["sum"], values["count"])
    return out


def start_loadext(
    plane: ControlPlane,
    workdir: Path,
    label: str,
    nodes: int,
    prometheus_url: str,
    herd_guard: bool,
    tree: Path | None = None,
) -> tuple[str, Process]:
    """`loadext serve` with the shipped flags (--watch-nodes; the herd guard on, as the shipped
    config has it, unless this is the diagnostic loadext-noherd), from `tree` when given."""
    config = workdir / f"{label}-{nodes}.yaml"
    config.write_text(bench_config(prometheus_url, herdGuard={"enabled": herd_guard}))
    port = free_port()
    argv = serve_argv(
        config, port, "--kubeconfig", str(plane.admin_kubeconfig), "--watch-nodes", options=["--log-level", "warning"]
    )
    process = plane.spawn(f"{label}-{nodes}", from_tree(argv, tree))
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: ready(url), f"{label} ready", timeout=120, process=process)
    return url, process


def one_size(nodes: int, args: argparse.Namespace, bin_dir: Path, workdir: Path, prometheus_url: str) -> dict[str, Any]:
    """One control plane with `nodes` Nodes; the three configurations in turn."""
    plane = ControlPlane(workdir / f"plane-{nodes}", bin_dir, ("ServiceAccount", "TaintNodesByCondition"))
    (workdir / f"plane-{nodes}").mkdir()
    try:
        plane.start()
        core = client.CoreV1Api(plane.api())
        core.create_namespace({"metadata": {"name": NAMESPACE}})
        print(f"creating {nodes} nodes ...", file=sys.stderr)
        create_nodes(core, nodes)
        reference, snapshot = build_reference(workdir, nodes)
        go_port = free_port()
        go = plane.spawn(
            f"go-reference-{nodes}",
            [str(reference), "--listen", f"127.0.0.1:{go_port}", "--snapshot", str(snapshot)],
        )
        go_url = f"http://127.0.0.1:{go_port}"
        wait_until(lambda: answers(go_url), "the Go reference", process=go)
        extenders: dict[str, tuple[str, Process] | None] = {"none": None, "go": (go_url, go)}
        if "floor" in args.configs:
            floor_port = free_port()
            floor = plane.spawn(
                f"floor-{nodes}", [sys.executable, str(HERE.parent / "floor.py"), str(floor_port), "--echo"]
            )
            extenders["floor"] = (f"http://127.0.0.1:{floor_port}", floor)
            wait_until(lambda: answers(f"http://127.0.0.1:{floor_port}"), "the floor", process=floor)
        for label, herd_guard in (("loadext", True), ("loadext-noherd", False)):
            if label in args.configs:
                extenders[label] = start_loadext(plane, workdir, label, nodes, prometheus_url, herd_guard)
        configs = list(args.configs)
        if args.before is not None:
            extenders[BEFORE] = start_loadext(plane, workdir, BEFORE, nodes, prometheus_url, True, args.before)
            configs.append(BEFORE)
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label in configs}
        for run in range(1, args.runs + 1):  # the configurations interleaved, so drift hits them alike
            for label in configs:
                print(f"  {nodes} nodes, run {run}, {label}: scheduling {args.pods} pods ...", file=sys.stderr)
                runs[label].append(measure(plane, core, f"{label}-{nodes}-{run}", extenders[label], args))
                print(f"    {runs[label][-1]['pods_per_s']:.0f} pods/s", file=sys.stderr)
    finally:
        plane.stop()
    return {label: summarised(measured) for label, measured in runs.items()}


def summarised(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the runs, and the runs' range of pods/s and extender CPU."""
    out: dict[str, Any] = {"runs": runs}
    for key in runs[0]:
        values = [run[key] for run in runs if run[key] is not None]
        out[key] = statistics.median(values) if values else None
        if key in ("pods_per_s", "extender_cpu_ms_per_pod") and values:
            out[f"{key}_range"] = (min(values), max(values))
    return out


@contextlib.contextmanager
def node_series(workdir: Path, nodes: int) -> Iterator[str]:
    """A real Prometheus scraping bench_cpu and bench_memory for `nodes` nodes; yields its URL
    once every series is in."""
    exporter = Exporter()
    feed(exporter, nodes)
    prom = PrometheusServer(str(workdir), scrape_config(exporter.target, interval="5s"))
    try:
        prom.wait_for("count(bench_cpu)", lambda r: bool(r) and float(r[0]["value"][1]) == nodes, timeout=120)
        yield prom.url
    finally:
        prom.stop()
        exporter.close()


def run(args: argparse.Namespace) -> dict[str, Any]:
    bin_dir = build_components()
    workdir = Path(tempfile.mkdtemp(prefix="loadext-schedbench-"))
    results: dict[str, Any] = {}
    with node_series(workdir, max(args.nodes)) as prometheus_url:
        for nodes in args.nodes:
            results[str(nodes)] = one_size(nodes, args, bin_dir, workdir, prometheus_url)
    return results


def table(results: dict[str, Any]) -> str:
    """A row per cluster size and configuration; ratios against the Go reference and no extender."""
    lines = [
        "| nodes | configuration | pods/s (range) | vs Go | vs none | attempt ms | extender CPU ms/pod (range)"
        " | vs Go | scheduler CPU ms/pod | extender peak RSS MB | loadext ms per filter / prioritize |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for nodes, row in results.items():
        for label, r in row.items():
            rate, (low, high) = r["pods_per_s"], r["pods_per_s_range"]
            vs_go = f"{rate / row['go']['pods_per_s']:.2f}x" if "go" in row else "-"
            vs_none = f"{rate / row['none']['pods_per_s']:.2f}x" if "none" in row else "-"
            attempt = f"{r['attempt_ms']:.2f}" if r["attempt_ms"] is not None else "-"
            server = " / ".join(
                f"{r[key]:.2f}" if r.get(key) is not None else "-"
                for key in ("server_ms_filter", "server_ms_prioritize")
            )
            cpu = r.get("extender_cpu_ms_per_pod")
            extender_cpu = "-"
            if cpu is not None:
                cpu_low, cpu_high = r["extender_cpu_ms_per_pod_range"]
                extender_cpu = f"{cpu:.2f} ({cpu_low:.2f}-{cpu_high:.2f})"
            go_cpu = row.get("go", {}).get("extender_cpu_ms_per_pod")
            cpu_vs_go = f"{cpu / go_cpu:.2f}x" if cpu is not None and go_cpu else "-"
            scheduler_cpu = f"{r.get('scheduler_cpu_ms_per_pod', 0):.2f}"
            peak = f"{r['extender_peak_rss_mb']:.0f}" if r.get("extender_peak_rss_mb") is not None else "-"
            lines.append(
                f"| {nodes} | {label} | {rate:.0f} ({low:.0f}-{high:.0f}) | {vs_go} | {vs_none} | {attempt}"
                f" | {extender_cpu} | {cpu_vs_go} | {scheduler_cpu} | {peak} | {server} |"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[500, 5000], help="cluster sizes (default 500 5000)")
    parser.add_argument("--pods", type=int, default=2000, help="pods per configuration (default 2000)")
    parser.add_argument("--qps", type=int, default=5000, help="the scheduler's client QPS and burst (default 5000)")
    parser.add_argument(
        "--configs",
        nargs="+",
        default=["none", "go", "floor", "loadext"],
        choices=["none", "go", "floor", "loadext", "loadext-noherd"],
        help="what to run, in order (floor: benchmarks/floor.py --echo, the least a Python extender on"
        " aiohttp does; loadext-noherd: diagnostic, the herd guard off)",
    )
    parser.add_argument("--runs", type=int, default=3, help="runs per configuration, interleaved (default 3)")
    parser.add_argument("--before", type=Path, help=f"a checkout of older loadext code, run side by side as {BEFORE!r}")
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for all pods to bind")
    parser.add_argument("--out", type=Path, default=HERE / "results.json")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the control plane on the way out
    results = run(args)
    args.out.write_text(json.dumps(results, indent=2))
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
