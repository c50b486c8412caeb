"""loadext's benchmark suite: one command, a table of medians and ratios, and a JSON file.

    python3 benchmarks/run.py [--duration 5] [--connections 4] [--quick] [--out results.json]

Side by side in one run, on the same payloads: `loadext serve` (fed by a real Prometheus
scraping 5000 synthetic nodes), the Go reference extender in benchmarks/reference/ (same
values, same decisions, standard library only), and a bare aiohttp handler (the HTTP floor).
Each server is pinned to CPU 1 and wrk to CPU 0, and cases alternate between servers so drift
on a shared machine hits all of them alike. Before measuring, the suite checks that loadext and
the Go reference return the same decisions for every payload.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from harness.config import as_yaml, loadext_config  # noqa: E402
from harness.exporter import Exporter  # noqa: E402
from harness.faultproxy import FaultProxy  # noqa: E402
from harness.kubernetes import Process, wait_until  # noqa: E402
from harness.loadext import ready, serve_argv  # noqa: E402
from harness.prometheus import PrometheusServer, free_port, scrape_config  # noqa: E402

SIZES = (100, 500, 1000, 5000)
NODES = 5000
SERVER_CPU, LOAD_CPU = "1", "0"


def node_name(i: int) -> str:
    return f"node-{i:05d}"


def node_load(i: int) -> tuple[float, float]:
    """Deterministic spread: about 20 % of nodes over the CPU threshold, 10 % over memory."""
    return ((i * 37) % 100) / 100, ((i * 53) % 100) / 100


def bench_config(prometheus_url: str, selector: str = "", **overrides: Any) -> str:
    return as_yaml(
        loadext_config(
            prometheus_url,
            f"bench_cpu{selector}",
            f"bench_memory{selector}",
            refresh="5s",
            max_age="1h",
            timeout="2s",
            **overrides,
        )
    )


def feed(exporter: Exporter, nodes: int) -> None:
    """bench_cpu and bench_memory for node-00001 .. node-N, as node_load spreads them."""
    for i in range(1, nodes + 1):
        cpu, memory = node_load(i)
        exporter.set_gauge("bench_cpu", cpu, node=node_name(i))
        exporter.set_gauge("bench_memory", memory, node=node_name(i))


def build_reference(workdir: Path, nodes: int) -> tuple[Path, Path]:
    """The Go reference extender, built, and its snapshot file: the same values and thresholds
    bench_config gives loadext. Returns (binary, snapshot)."""
    snapshot = {
        "nodes": {node_name(i): dict(zip(("cpu", "memory"), node_load(i), strict=True)) for i in range(1, nodes + 1)},
        "cpuThreshold": 0.8,
        "memoryThreshold": 0.9,
        "cpuWeight": 1.0,
        "memoryWeight": 1.0,
    }
    path = workdir / f"snapshot-{nodes}.json"
    path.write_text(json.dumps(snapshot))
    binary = workdir / "reference"
    if not binary.exists():
        subprocess.run(["go", "build", "-o", str(binary), "."], cwd=HERE / "reference", check=True)
    return binary, path


def generate_payloads(workdir: Path) -> dict[str, Path]:
    payloads: dict[str, Path] = {}
    for size in SIZES:
        out = workdir / f"n{size}"
        subprocess.run(
            [
                sys.executable,
                str(HERE / "gen_fixtures.py"),
                "--large",
                str(out),
                "--nodes",
                str(size),
                "--victim-nodes",
                str(min(500, size)),
            ],
            check=True,
        )
        payloads[f"names-{size}"] = out / f"args-names-{size}.json"
        payloads[f"nodes-{size}"] = out / f"args-nodes-{size}.json"
    payloads["preempt-500"] = workdir / f"n{NODES}" / "preempt-meta-500.json"
    return payloads


def pinned(cpu: str, argv: list[str]) -> list[str]:
    return ["taskset", "-c", cpu, *argv]


def post(url: str, body: bytes) -> Any:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as reply:
        return json.load(reply)


def same_decisions(verb: str, ours: Any, theirs: Any) -> bool:
    if verb == "prioritize":
        return {e["Host"]: e["Score"] for e in ours} == {e["Host"]: e["Score"] for e in theirs}
    if verb == "preempt":
        return bool(ours["NodeNameToMetaVictims"] == theirs["NodeNameToMetaVictims"])

    def passed(reply: Any) -> list[str]:
        if reply["NodeNames"] is not None:
            return list(reply["NodeNames"])
        return [n["metadata"]["name"] for n in reply["Nodes"]["items"]]

    return passed(ours) == passed(theirs) and ours["FailedAndUnresolvableNodes"] == theirs["FailedAndUnresolvableNodes"]


_LATENCY = re.compile(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$", re.M)
_UNIT = {"us": 1e-3, "ms": 1.0, "s": 1000.0}


def wrk(url: str, body: Path, duration: float, connections: int) -> dict[str, float]:
    result = subprocess.run(
        pinned(
            LOAD_CPU,
            [
                "wrk",
                "-t1",
                f"-c{connections}",
                f"-d{duration:g}s",
                "--latency",
                "--timeout",
                "30s",
                "-s",
                str(HERE / "post.lua"),
                url,
            ],
        ),
        capture_output=True,
        text=True,
        env={**os.environ, "BODY": str(body)},
        timeout=duration + 120,
    )
    out = result.stdout
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if rps is None:
        raise RuntimeError(f"wrk failed for {url}: {out}{result.stderr}")
    latency = {p: float(v) * _UNIT[u] for p, v, u in _LATENCY.findall(out)}
    return {
        "rps": float(rps.group(1)),
        "p50_ms": latency.get("50", float("nan")),
        "p99_ms": latency.get("99", float("nan")),
        "errors": float(errors.group(1)) if errors else 0.0,
    }


def metric(url: str, name: str) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU a process has used so far (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> dict[str, float]:
    status = Path(f"/proc/{pid}/status").read_text()
    values = dict(re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", status, re.M))
    return {k: int(v) / 1024 for k, v in values.items()}


class Bench:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.processes: list[Process] = []

    def spawn(self, name: str, argv: list[str]) -> Process:
        process = Process(name, argv, self.workdir)
        self.processes.append(process)
        return process

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()

    def start_loadext(self, name: str, config: str) -> tuple[str, Process]:
        path = self.workdir / f"{name}.yaml"
        path.write_text(config)
        port = free_port()
        process = self.spawn(
            name,
            pinned(SERVER_CPU, serve_argv(path, port, options=["--log-level", "warning"])),
        )
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: ready(url), name, process=process)
        return url, process


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="loadext-bench-"))
    bench = Bench(args, workdir)
    exporter = Exporter()
    feed(exporter, NODES)
    prom = PrometheusServer(str(workdir), scrape_config(exporter.target, interval="5s"))
    proxy = FaultProxy(prom.url)
    results: dict[str, Any] = {"cases": {}, "background": {}}
    try:
        print("generating payloads ...", file=sys.stderr)
        payloads = generate_payloads(workdir)
        prom.wait_for("count(bench_cpu)", lambda r: bool(r) and float(r[0]["value"][1]) == NODES, timeout=60)

        reference, snapshot = build_reference(workdir, NODES)
        go_port, floor_port = free_port(), free_port()
        go_url, floor_url = f"http://127.0.0.1:{go_port}", f"http://127.0.0.1:{floor_port}"
        bench.spawn(
            "go-reference",
            pinned(
                SERVER_CPU,
                [
                    "env",
                    "GOMAXPROCS=1",
                    str(reference),
                    "--listen",
                    f"127.0.0.1:{go_port}",
                    "--snapshot",
                    str(snapshot),
                ],
            ),
        )
        bench.spawn("floor", pinned(SERVER_CPU, [sys.executable, str(HERE / "floor.py"), str(floor_port)]))
        loadext_url, loadext = bench.start_loadext("loadext", bench_config(proxy.url))
        wait_until(
            lambda: metric(loadext_url, 'loadext_signal_series{signal="memory"}') == NODES,
            "loadext's 5000-node snapshot",
            timeout=60,
            process=loadext,
        )
        wait_until(lambda: answers(go_url) and answers(floor_url), "the Go reference and the floor")

        cases = [
            (f"{verb} {kind}-{size}", verb, payloads[f"{kind}-{size}"])
            for kind in ("names", "nodes")
            for size in SIZES
            for verb in ("filter", "prioritize")
        ]
        cases.append(("preempt meta-500", "preempt", payloads["preempt-500"]))
        if args.quick:
            cases = [c for c in cases if c[0].endswith(("-100", "-500"))]
        for label, verb, body in cases:
            data = body.read_bytes()
            if not same_decisions(verb, post(f"{loadext_url}/{verb}", data), post(f"{go_url}/{verb}", data)):
                raise SystemExit(f"loadext and the Go reference disagree on {label}")
        print(f"decisions agree on all {len(cases)} payloads; measuring ...", file=sys.stderr)

        for label, verb, body in cases:
            row: dict[str, Any] = {}
            servers = {"loadext": loadext_url, "go": go_url}
            if label.startswith("filter names") or label.startswith("prioritize names"):
                servers["floor"] = floor_url
            runs: dict[str, list[dict[str, float]]] = {name: [] for name in servers}
            for _ in range(args.repeat):
                for name, url in servers.items():
                    runs[name].append(wrk(f"{url}/{verb}", body, args.duration, args.connections))
            for name, samples in runs.items():
                row[name] = {key: statistics.median(s[key] for s in samples) for key in samples[0]}
            row["ratio_vs_go"] = row["loadext"]["rps"] / row["go"]["rps"]
            if "floor" in row:
                row["share_of_floor"] = row["loadext"]["rps"] / row["floor"]["rps"]
            results["cases"][label] = row
            print(f"  {label}: loadext {row['loadext']['rps']:.0f}/s, go {row['go']['rps']:.0f}/s", file=sys.stderr)

        results["background"] = background(bench, loadext_url, loadext, proxy, payloads["names-500"], args)
    finally:
        bench.stop()
        proxy.close()
        prom.stop()
        exporter.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return results


def answers(url: str) -> bool:
    """The extender at url answers a names filter (it is up)."""
    try:
        post(url + "/filter", b'{"Pod":null,"Nodes":null,"NodeNames":["node-00001"]}')
        return True
    except (OSError, urllib.error.URLError):
        return False


def background(
    bench: Bench, url: str, loadext: Process, proxy: FaultProxy, body: Path, args: argparse.Namespace
) -> dict[str, Any]:
    """Queries per refresh at 5000 and at 10 nodes, refresh cost, RSS, and latency whatever
    Prometheus does."""
    out: dict[str, Any] = {}
    small_proxy = FaultProxy(proxy.upstream)  # its own proxy, so each instance's queries are counted apart
    try:
        small_url, _ = bench.start_loadext(
            "loadext-10", bench_config(small_proxy.url, '{node=~"node-0000[1-9]|node-00010"}')
        )
        for label, target, counter in (("5000 nodes", url, proxy), ("10 nodes", small_url, small_proxy)):
            refreshes0 = metric(target, 'loadext_prometheus_query_duration_seconds_count{signal="cpu"}')
            requests0 = counter.requests
            time.sleep(16)
            refreshes = metric(target, 'loadext_prometheus_query_duration_seconds_count{signal="cpu"}') - refreshes0
            queries = (counter.requests - requests0) / refreshes if refreshes else float("nan")
            out[f"queries per refresh, {label}"] = queries
    finally:
        small_proxy.close()
    total = metric(url, 'loadext_prometheus_query_duration_seconds_sum{signal="cpu"}')
    count = metric(url, 'loadext_prometheus_query_duration_seconds_count{signal="cpu"}')
    out["query seconds per refresh, 5000 nodes (mean, cpu signal)"] = total / count
    out["rss MB at 5000 nodes"] = rss_mb(loadext.proc.pid)
    for mode, options in (("healthy", {}), ("down", {}), ("10 s slow", {"delay": 10.0})):
        proxy.set("pass" if mode == "healthy" else "down" if mode == "down" else "delay", **options)
        time.sleep(6)  # at least one refresh attempt in this mode
        out[f"filter names-500 with Prometheus {mode}"] = wrk(url + "/filter", body, args.duration, args.connections)
    proxy.set("pass")
    return out


def table(results: dict[str, Any]) -> str:
    lines = [
        "| case | loadext req/s | p50 ms | p99 ms | Go req/s | p50 ms | p99 ms | loadext/Go "
        "| floor req/s | loadext/floor |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, row in results["cases"].items():
        ours, go = row["loadext"], row["go"]
        floor = row.get("floor")
        lines.append(
            f"| {label} | {ours['rps']:.0f} | {ours['p50_ms']:.2f} | {ours['p99_ms']:.2f} | {go['rps']:.0f} | "
            f"{go['p50_ms']:.2f} | {go['p99_ms']:.2f} | {row['ratio_vs_go']:.2f}x | "
            f"{floor['rps']:.0f} | {row['share_of_floor']:.0%} |"
            if floor
            else f"| {label} | {ours['rps']:.0f} | {ours['p50_ms']:.2f} | {ours['p99_ms']:.2f} | {go['rps']:.0f} | "
            f"{go['p50_ms']:.2f} | {go['p99_ms']:.2f} | {row['ratio_vs_go']:.2f}x | | |"
        )
    lines.append("")
    for key, value in results["background"].items():
        if isinstance(value, dict) and "rps" in value:
            value = f"{value['rps']:.0f} req/s, p50 {value['p50_ms']:.2f} ms, p99 {value['p99_ms']:.2f} ms"
        elif isinstance(value, dict):
            value = ", ".join(f"{k} {v:.0f}" for k, v in value.items())
        elif isinstance(value, float):
            value = f"{value:.3g}"
        lines.append(f"- {key}: {value}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per wrk run (default 5)")
    parser.add_argument("--connections", type=int, default=4, help="wrk connections (default 4)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case and server; medians reported")
    parser.add_argument("--quick", action="store_true", help="only the 100 and 500 node payloads")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results.json"))
    args = parser.parse_args()
    for tool in ("wrk", "taskset", "go"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is required (scripts/bench.sh installs wrk)")
    results = run(args)
    results["settings"] = {
        "duration_s": args.duration,
        "connections": args.connections,
        "repeat": args.repeat,
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
    }
    args.out.write_text(json.dumps(results, indent=2))
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
