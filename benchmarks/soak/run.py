"""Soak: loadext under steady scheduler-shaped load for a long time while Prometheus flaps.

    python3 benchmarks/soak/run.py [--duration 30m] [--interval 60s] [--load 0.8] [--rate R]

A real Prometheus scrapes 500 synthetic nodes through a fault proxy that drops every query for
`--flap` seconds, then passes for as long, over and over. loadext runs as shipped (default
flags, pinned to CPU 1). Its peak is the median of 3 x `--peak-seconds` of vegeta with 4
workers as fast as they go; then vegeta (CPU 0) sends `--load` x that peak, or `--rate`, at a
constant rate, alternating filter and prioritize with 500 node names, for `--duration`, in
`--interval` slices. Per slice: requests, errors (transport errors and non-200 replies), p50,
p99 and max latency, and loadext's RSS. Passing: errors 0 and RSS flat (drift printed).

vegeta (github.com/tsenart/vegeta, built from the Go module proxy by build-vegeta.sh) is used
because it is open-loop: a slow reply does not slow the sender down, so latency is not hidden.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

from harness.exporter import Exporter  # noqa: E402
from harness.faultproxy import FaultProxy  # noqa: E402
from harness.kubernetes import Process, wait_until  # noqa: E402
from harness.loadext import ready, serve_argv  # noqa: E402
from harness.prometheus import PrometheusServer, free_port, scrape_config  # noqa: E402
from loadext.config import parse_duration  # noqa: E402

NODES = 500
SERVER_CPU, LOAD_CPU = "1", "0"
CONFIG = """prometheus: {{url: "{url}", timeout: 1s}}
refreshInterval: {refresh}s
maxDataAge: 30s
nodeIdentity: {{label: node, kind: name}}
signals:
  - {{name: cpu, query: 'soak_cpu', threshold: 0.8, weight: 1}}
  - {{name: memory, query: 'soak_memory', threshold: 0.9, weight: 1}}
"""


def vegeta_binary() -> str:
    result = subprocess.run(["bash", str(HERE / "build-vegeta.sh")], capture_output=True, text=True, check=True)
    return result.stdout.strip().splitlines()[-1]


def rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
    return int(match.group(1)) / 1024 if match else float("nan")


def attack(vegeta: str, targets: Path, seconds: float, rate: int | None) -> dict[str, Any]:
    """One vegeta slice: a constant `rate` per second, or with None as fast as 4 workers go."""
    pace = [f"-rate={rate}/s"] if rate else ["-rate=0", "-max-workers=4"]
    command = (
        f"taskset -c {LOAD_CPU} {vegeta} attack -targets={targets} -format=http -duration={seconds}s "
        f"-timeout=5s -keepalive=true {' '.join(pace)} | {vegeta} report -type=json"
    )
    result = subprocess.run(["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True, check=True)
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def flap(proxy: FaultProxy, period: float, stop: threading.Event) -> None:
    down = True
    while not stop.wait(period):
        proxy.set("down" if down else "pass")
        down = not down
    proxy.set("pass")


def write_targets(workdir: Path, url: str) -> Path:
    pod = {"metadata": {"name": "soak", "namespace": "default", "uid": "soak-uid"}}
    names = [f"node-{i:03d}" for i in range(NODES)]
    body = workdir / "names-500.json"
    body.write_text(json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}))
    targets = workdir / "targets.txt"
    lines = []
    for verb in ("filter", "prioritize"):
        lines += [f"POST {url}/{verb}", "Content-Type: application/json", f"@{body}", ""]
    targets.write_text("\n".join(lines))
    return targets


def run(args: argparse.Namespace) -> dict[str, Any]:
    vegeta = vegeta_binary()
    workdir = Path(tempfile.mkdtemp(prefix="loadext-soak-"))
    exporter = Exporter()
    for i in range(NODES):
        exporter.set_gauge("soak_cpu", (i * 37 % 100) / 100, node=f"node-{i:03d}")
        exporter.set_gauge("soak_memory", (i * 53 % 100) / 100, node=f"node-{i:03d}")
    prometheus = PrometheusServer(str(workdir), scrape_config(exporter.target))
    proxy = FaultProxy(prometheus.url)
    config = workdir / "config.yaml"
    config.write_text(CONFIG.format(url=proxy.url, refresh=args.refresh))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    loadext = Process("loadext", ["taskset", "-c", SERVER_CPU, *serve_argv(config, port)], workdir)
    stop = threading.Event()
    try:
        prometheus.wait_for("count(soak_cpu)", lambda r: bool(r) and float(r[0]["value"][1]) == NODES, timeout=60)
        wait_until(lambda: ready(url), "loadext", process=loadext)
        targets = write_targets(workdir, url)
        flapper = threading.Thread(target=flap, args=(proxy, args.flap, stop), daemon=True)
        flapper.start()
        rate = args.rate
        peak = None
        if rate is None:  # the median of three, as one burst on a shared machine can read 25 % high
            peak = statistics.median(attack(vegeta, targets, args.peak_seconds, None)["throughput"] for _ in range(3))
            rate = max(1, int(peak * args.load))
        print(f"peak {peak or '-'} req/s; soaking at {rate} req/s for {args.duration:g}s", file=sys.stderr, flush=True)
        slices = []
        started = time.monotonic()
        while time.monotonic() - started < args.duration - 1:
            seconds = min(args.interval, args.duration - (time.monotonic() - started))
            report = attack(vegeta, targets, seconds, rate)
            codes = report.get("status_codes") or {}
            slices.append(
                {
                    "at_s": round(time.monotonic() - started),
                    "requests": report["requests"],
                    "rate": round(report["rate"], 1),
                    "errors": report["requests"] - int(codes.get("200", 0)),
                    "status_codes": codes,
                    "error_kinds": report.get("errors") or [],
                    "p50_ms": report["latencies"]["50th"] / 1e6,
                    "p99_ms": report["latencies"]["99th"] / 1e6,
                    "max_ms": report["latencies"]["max"] / 1e6,
                    "rss_mb": round(rss_mb(loadext.proc.pid), 1),
                }
            )
            print(row(slices[-1]), file=sys.stderr)
        stop.set()
        flapper.join(args.flap + 5)
        with urllib.request.urlopen(url + "/metrics", timeout=5) as reply:
            metrics = reply.read().decode()
        query_errors = sum(
            float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("loadext_prometheus_query_errors_total{")
        )
        return summarise(slices, peak, rate, args, query_errors)
    finally:
        stop.set()
        loadext.stop()
        proxy.close()
        prometheus.stop()
        exporter.close()


def summarise(
    slices: list[dict[str, Any]], peak: float | None, rate: int, args: argparse.Namespace, query_errors: float
) -> dict[str, Any]:
    steady = slices[1:] or slices  # the first slice includes warm-up
    rss = [s["rss_mb"] for s in steady]
    return {
        "duration_s": args.duration,
        "peak_rps": peak,
        "rate_rps": rate,
        "flap_s": args.flap,
        "requests": sum(s["requests"] for s in slices),
        "errors": sum(s["errors"] for s in slices),
        "p99_ms_median_of_slices": statistics.median(s["p99_ms"] for s in slices),
        "p99_ms_worst_slice": max(s["p99_ms"] for s in slices),
        "rss_mb_first": rss[0],
        "rss_mb_last": rss[-1],
        "rss_mb_drift": round(rss[-1] - rss[0], 1),
        "prometheus_query_errors": query_errors,
        "slices": slices,
    }


def row(s: dict[str, Any]) -> str:
    return (
        f"| {s['at_s']:>6} | {s['requests']:>8} | {s['rate']:>7} | {s['errors']:>6} | {s['p50_ms']:>7.2f} "
        f"| {s['p99_ms']:>7.2f} | {s['max_ms']:>8.2f} | {s['rss_mb']:>6} |"
    )


def table(result: dict[str, Any]) -> str:
    lines = [
        "| at (s) | requests |  rate/s | errors | p50 ms  | p99 ms  |  max ms  | RSS MB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
        *(row(s) for s in result["slices"]),
        "",
        f"- duration {result['duration_s']:g} s at {result['rate_rps']} req/s "
        f"(peak {result['peak_rps'] or '-'} req/s), Prometheus down/up every {result['flap_s']:g} s "
        f"({result['prometheus_query_errors']:.0f} failed queries)",
        f"- requests {result['requests']}, errors {result['errors']}",
        f"- p99 per slice: median {result['p99_ms_median_of_slices']:.2f} ms, "
        f"worst {result['p99_ms_worst_slice']:.2f} ms",
        f"- RSS after warm-up {result['rss_mb_first']} MB, at the end {result['rss_mb_last']} MB "
        f"(drift {result['rss_mb_drift']:+} MB)",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=parse_duration, default="30m", help="soak length (default 30m)")
    parser.add_argument("--interval", type=parse_duration, default="60s", help="slice length (default 60s)")
    parser.add_argument("--load", type=float, default=0.8, help="fraction of the measured peak (default 0.8)")
    parser.add_argument("--rate", type=int, help="a fixed rate instead of --load x the measured peak")
    parser.add_argument("--peak-seconds", type=float, default=10, help="length of each of the 3 peak measurements")
    parser.add_argument("--flap", type=float, default=5, help="Prometheus down, then up, this many seconds")
    parser.add_argument("--refresh", type=float, default=5, help="loadext's refreshInterval in seconds")
    parser.add_argument("--out", type=Path, help="also write the result as JSON here")
    args = parser.parse_args()
    result = run(args)
    print(table(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
