"""How long a 5000-node refresh stalls the event loop, with and without loadext's interpreter
tuning (loadext.app.tune_interpreter: gc.freeze() at startup, a 0.5 ms GIL switch interval).

    python3 benchmarks/refresh_lag.py [--rounds 10] [--nodes 5000]

Each mode runs in its own interpreter: the real App over a stored snapshot, a refresh round
(parse two Prometheus replies of `--nodes` series, store, build the table in a worker thread,
publish) every 0.3 s, and a task on the event loop that sleeps 1 ms and records how late it
wakes. A request arriving during a stall waits that long; the table prints the lag's
percentiles and the longest generation-1 and full (generation 2) garbage collections. The
node directory holds `--nodes` Nodes decoded as the node watch decodes them (--watch-nodes).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

PROBE = r"""
import asyncio, gc, json, sys, time
sys.path.insert(0, {root!r}); sys.path.insert(0, {here!r})
import msgspec, orjson
from run import bench_config, node_load, node_name
from harness.inprocess import stored_app
from loadext.app import tune_interpreter
from loadext.core.snapshot import SignalValues
from loadext.config import NodeIdentity
from loadext.sources.prometheus import decode_vector
from loadext.sources.listwatch import ObjectList
from loadext.shared.objects import Node

tuned, rounds, nodes = {tuned}, {rounds}, {nodes}
names = [node_name(i) for i in range(1, nodes + 1)]
app = stored_app(bench_config("http://127.0.0.1:1"), *(
    {{n: node_load(i)[k] for i, n in enumerate(names, 1)}} for k in (0, 1)))
cluster = app.cluster
replies = [orjson.dumps({{"status": "success", "data": {{"resultType": "vector", "result": [
    {{"metric": {{"__name__": "bench", "instance": "127.0.0.1:9100", "job": "bench", "node": n}},
     "value": [time.time(), str(node_load(i)[k])]}} for i, n in enumerate(names, 1)]}}}}) for k in (0, 1)]
node_list = orjson.dumps({{"metadata": {{"resourceVersion": "1"}}, "items": [
    {{"metadata": {{"name": n, "resourceVersion": "1", "labels": {{"kubernetes.io/hostname": n, "pool": "general"}}}},
     "status": {{"addresses": [{{"type": "InternalIP", "address": "10.0.0.1"}}, {{"type": "Hostname", "address": n}}],
                "allocatable": {{"cpu": "16", "memory": "64Gi", "pods": "110"}}}}}} for n in names]}})
cluster.nodes_listed([n.info() for n in msgspec.json.decode(node_list, type=ObjectList[Node]).items])  # --watch-nodes
if tuned:
    tune_interpreter()
collections, started = {{1: [], 2: []}}, {{}}
def timed(phase, info):
    generation = info["generation"]
    if generation:
        if phase == "start":
            started[generation] = time.perf_counter()
        else:
            collections[generation].append(time.perf_counter() - started[generation])
gc.callbacks.append(timed)

def refresh_round(build):
    values = []
    for signal, reply in zip(("cpu", "memory"), replies):
        data = msgspec.json.decode(reply, type=dict[str, msgspec.Raw])["data"]  # as the connection keeps it
        result = msgspec.json.decode(data, type=dict[str, msgspec.Raw])["result"]
        parsed = decode_vector(result, NodeIdentity("node", "name"))
        values.append(SignalValues(signal, parsed.values, time.time()))
    return build(values)

async def main():
    lags = []
    async def monitor():
        while True:
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - t - 0.001)
    task = asyncio.create_task(monitor())
    for _ in range(rounds):
        build = cluster.round_builder()
        cluster.publish_round(await asyncio.to_thread(refresh_round, build))
        await asyncio.sleep(0.3)
    task.cancel()
    lags.sort()
    pick = lambda q: 1e3 * lags[min(len(lags) - 1, int(len(lags) * q))]
    print(json.dumps({{"p50": pick(0.5), "p99": pick(0.99), "p99.9": pick(0.999), "max": 1e3 * lags[-1],
                      **{{f"gen{{g}}{{k}}": v for g, c in collections.items()
                         for k, v in (("", len(c)), ("_max", 1e3 * max(c, default=0.0)))}}}}))
asyncio.run(main())
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10, help="refresh rounds per mode (default 10)")
    parser.add_argument("--nodes", type=int, default=5000, help="series per signal (default 5000)")
    args = parser.parse_args()
    print(
        "| interpreter | loop lag p50 ms | p99 | p99.9 | max | gen1 collections | longest ms"
        " | full collections | longest ms |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, tuned in (("default", False), ("tuned (loadext serve)", True)):
        code = PROBE.format(root=str(HERE.parent), here=str(HERE), tuned=tuned, rounds=args.rounds, nodes=args.nodes)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(
            f"| {label} | {r['p50']:.2f} | {r['p99']:.2f} | {r['p99.9']:.2f} | {r['max']:.2f} | "
            f"{r['gen1']} | {r['gen1_max']:.1f} | {r['gen2']} | {r['gen2_max']:.1f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
