"""How long the scheduler waits on loadext while refresh rounds land: filter latency, call by
call, with a real Prometheus up and down.

    python3 benchmarks/loop_lag.py [--nodes 15000] [--seconds 30] [--runs 3] [--before DIR]

Two cases, each a `loadext serve` of its own (pinned to CPU 1, the client to CPU 0; refresh
every 5 s, per-node metrics on, names from requests as without --watch-nodes):

- *cluster*: Prometheus holds `--nodes` nodes; a filter naming 500 random ones every 50 ms.
- *big request*: Prometheus holds 3 nodes; one filter naming 200 000 nodes, then a filter
  naming the 3 every 100 ms (each refresh round after it used to work through every name).

Each case runs with Prometheus answering and then with it down (a proxy closing every
connection), `--seconds` each, `--runs` times; the table gives the median of the runs' p50, p99
and max, and the runs' range of max. Calls are paced, one at a time on a kept-alive connection,
from a process of their own, so a call's latency is how late loadext answered it. `--before DIR`
runs loadext from an older checkout (its `loadext` package) in turn with the current one within
each run: before and after side by side.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import http.client
import json
import multiprocessing
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from run import SERVER_CPU, bench_config, feed, metric, node_name, pinned  # noqa: E402

from harness.exporter import Exporter  # noqa: E402
from harness.faultproxy import FaultProxy  # noqa: E402
from harness.kubernetes import Process, wait_until  # noqa: E402
from harness.loadext import from_tree, ready, serve_argv  # noqa: E402
from harness.prometheus import PrometheusServer, free_port, scrape_config  # noqa: E402

CLIENT_CPU = 0
BIG_REQUEST_NAMES = 200_000


def filter_body(names: list[str]) -> bytes:
    return json.dumps({"Pod": None, "Nodes": None, "NodeNames": names}).encode()


def latencies(port: int, bodies: list[bytes], every: float, seconds: float) -> list[float]:
    """Each paced call's latency in ms: one call per `every` seconds, the bodies in turn."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    found = []
    deadline = time.monotonic() + seconds
    due = time.monotonic()
    for i in range(10**9):
        now = time.monotonic()
        if now >= deadline:
            break
        if due > now:
            time.sleep(due - now)
        started = time.perf_counter()
        connection.request("POST", "/filter", bodies[i % len(bodies)], {"Content-Type": "application/json"})
        reply = connection.getresponse()
        reply.read()
        found.append((time.perf_counter() - started) * 1000)
        assert reply.status == 200, reply.status
        due += every
    connection.close()
    return found


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "calls": len(ordered),
        "p50": statistics.median(ordered),
        "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        "max": ordered[-1],
        "over_50ms": sum(1 for s in ordered if s > 50),
    }


class Loadext:
    """One `loadext serve`, from `tree` when given (its package first on the path)."""

    def __init__(self, workdir: Path, name: str, config: str, tree: Path | None) -> None:
        path = workdir / f"{name}.yaml"
        path.write_text(config)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = pinned(SERVER_CPU, from_tree(serve_argv(path, self.port, options=["--log-level", "error"]), tree))
        self.process = Process(name, argv, workdir)
        wait_until(lambda: ready(self.url), name, process=self.process)

    def rounds(self) -> float:
        return metric(self.url, "loadext_refresh_duration_seconds_count")

    def stop(self) -> None:
        self.process.stop()


def paced(port: int, bodies: list[bytes], every: float, seconds: float) -> list[float]:
    """latencies(), timed from a process of its own on CLIENT_CPU: in this one, the exporter's
    thread renders every node's series for each scrape and would hold the timing thread's GIL."""
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context, initializer=_pin) as pool:
        return pool.submit(latencies, port, bodies, every, seconds).result()


def _pin() -> None:
    os.sched_setaffinity(0, {CLIENT_CPU})


def measure(loadext: Loadext, proxy: FaultProxy, bodies: list[bytes], every: float, seconds: float) -> dict[str, Any]:
    out = {}
    for mode in ("up", "down"):
        proxy.set("pass" if mode == "up" else "down")
        rounds = loadext.rounds()
        out[mode] = summary(paced(loadext.port, bodies, every, seconds))
        out[mode]["rounds"] = loadext.rounds() - rounds
    proxy.set("pass")
    return out


def run_once(args: argparse.Namespace, workdir: Path, prom_url: str, tree: Path | None) -> dict[str, Any]:
    names = [node_name(i) for i in range(1, args.nodes + 1)]
    rng = random.Random(1)
    results: dict[str, Any] = {}

    proxy = FaultProxy(prom_url)
    loadext = Loadext(workdir, "cluster", bench_config(proxy.url), tree)
    try:
        wait_until(
            lambda: metric(loadext.url, 'loadext_signal_series{signal="cpu"}') == args.nodes,
            "loadext's snapshot of every node",
            timeout=120,
            process=loadext.process,
        )
        bodies = [filter_body(rng.sample(names, 500)) for _ in range(64)]
        latencies(loadext.port, bodies, 0.01, 10)  # every name named once or more before measuring
        results["cluster"] = measure(loadext, proxy, bodies, 0.05, args.seconds)
    finally:
        loadext.stop()
        proxy.close()

    proxy = FaultProxy(prom_url)
    three = '{node=~"node-0000[1-3]"}'
    loadext = Loadext(workdir, "big-request", bench_config(proxy.url, three), tree)
    try:
        big = filter_body([f"request-only-{i:06d}" for i in range(BIG_REQUEST_NAMES)])
        latencies(loadext.port, [big], 1, 0.001)
        results["big request"] = measure(loadext, proxy, [filter_body(names[:3])], 0.1, args.seconds)
    finally:
        loadext.stop()
        proxy.close()
    return results


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for case in runs[0]:
        for mode in runs[0][case]:
            rows = [run[case][mode] for run in runs]
            row = {key: statistics.median(r[key] for r in rows) for key in rows[0]}
            row["max_range"] = (min(r["max"] for r in rows), max(r["max"] for r in rows))
            table[f"{case}, Prometheus {mode}"] = row
    return table


def table(arms: dict[str, dict[str, Any]], nodes: int) -> str:
    lines = [
        f"| case ({nodes} nodes in the cluster case) | code | calls | rounds | p50 ms | p99 ms | max ms "
        "| max range ms | calls > 50 ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label in next(iter(arms.values())):
        for arm, rows in arms.items():
            r = rows[label]
            low, high = r["max_range"]
            lines.append(
                f"| {label} | {arm} | {r['calls']:.0f} | {r['rounds']:.0f} | {r['p50']:.1f} | {r['p99']:.1f} "
                f"| {r['max']:.1f} | {low:.0f}-{high:.0f} | {r['over_50ms']:.0f} |"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=15_000)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", type=Path, help="a checkout of older loadext code, run in turn with each run")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="loadext-looplag-"))
    exporter = Exporter()
    feed(exporter, args.nodes)
    prom = PrometheusServer(str(workdir), scrape_config(exporter.target, interval="5s"))
    try:
        prom.wait_for("count(bench_cpu)", lambda r: bool(r) and float(r[0]["value"][1]) == args.nodes, timeout=120)
        trees = {"now": None} | ({"before": args.before} if args.before else {})
        runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in trees}
        for i in range(args.runs):
            for arm, tree in trees.items():  # in turn within each run, so drift hits both alike
                print(f"run {i + 1} of {args.runs}, {arm} ...", file=sys.stderr)
                runs[arm].append(run_once(args, workdir, prom.url, tree))
    finally:
        prom.stop()
        exporter.close()
        shutil.rmtree(workdir, ignore_errors=True)
    medians = {arm: median_of(measured) for arm, measured in runs.items()}
    print(table(medians, args.nodes))
    if args.out:
        args.out.write_text(json.dumps({"runs": runs, "median": medians}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
