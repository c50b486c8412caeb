"""What loadext's memory grows to in a quiet cluster, where each pod meets a new refresh.

    python3 benchmarks/quiet_memory.py [--nodes 5000] [--names 500] [--pods 300]

The decision log (`explain --pod`) keeps the last 256 pods' decisions, and a decision keeps
what it was decided on. When each pod arrives after a refresh, as it does in a quiet cluster,
those are 256 different snapshots and tables unless the log lets them go. Each mode runs in its
own interpreter: the real App over a `--nodes` snapshot (with every node's allocatable, as with
--watch-nodes); then per pod, a refresh round with new values is published, and the pod is
filtered and prioritized over a rotating window of `--names` names, as kube-scheduler sends
them at 5000 nodes. The table prints RSS and the snapshots still alive as pods accumulate.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(HERE.parent))
    sys.path.insert(0, str(HERE))
    import orjson
    from run import bench_config, node_load, node_name, rss_mb

    from harness.inprocess import publish, stored_app
    from loadext.core.requests import NodeInfo
    from loadext.core.snapshot import Snapshot

    names = [node_name(i) for i in range(1, args.nodes + 1)]
    cpu = {n: node_load(i)[0] for i, n in enumerate(names, 1)}
    memory = {n: node_load(i)[1] for i, n in enumerate(names, 1)}
    app = stored_app(bench_config("http://127.0.0.1:1", herdGuard={"enabled": args.herd_guard}), cpu, memory)
    extender, cluster, codec = app.extender, app.cluster, app.server.codec
    for name in names:
        cluster.node_seen(NodeInfo(name, (), {}, {"cpu": "16", "memory": "64Gi"}))
    rows = []
    for i in range(args.pods):
        publish(app, {n: v + (i % 7) / 1000 for n, v in cpu.items()}, memory)
        start = (i * args.names) % args.nodes
        pod = {
            "metadata": {"name": f"quiet-{i}", "namespace": "default", "uid": f"uid-{i}"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]},
        }
        body = orjson.dumps({"Pod": pod, "NodeNames": names[start : start + args.names]})
        extender.filter(codec.decode_extender_args(body, node_details=args.herd_guard).args)
        extender.prioritize(codec.decode_extender_args(body, node_details=args.herd_guard).args)
        if (i + 1) % args.every == 0 or i + 1 == args.pods:
            gc.collect()
            alive = sum(isinstance(o, Snapshot) for o in gc.get_objects())
            rows.append({"pods": i + 1, "rss_mb": rss_mb(os.getpid())["VmRSS"], "snapshots": alive})
    print(json.dumps(rows))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--names", type=int, default=500, help="names per call (default 500)")
    parser.add_argument("--pods", type=int, default=300, help="pods, each after a refresh (default 300)")
    parser.add_argument("--every", type=int, default=50, help="print a row every this many pods")
    parser.add_argument("--herd-guard", action="store_true", help=argparse.SUPPRESS)  # the child's mode
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0
    common = ["--nodes", str(args.nodes), "--names", str(args.names), "--pods", str(args.pods)]
    results = {}
    for label, flags in (("herd guard off", []), ("herd guard on", ["--herd-guard"])):
        started = time.perf_counter()
        out = subprocess.run(
            [sys.executable, __file__, "--child", *common, "--every", str(args.every), *flags],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        results[label] = json.loads(out.strip().splitlines()[-1])
        print(f"  {label}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    print(f"{args.nodes} nodes, names-{args.names}, a refresh before each pod: RSS MB (snapshots alive)")
    print("| pods | " + " | ".join(results) + " |")
    print("|---:|" + "---:|" * len(results))
    for i, row in enumerate(next(iter(results.values()))):
        cells = [f"{r[i]['rss_mb']:.0f} ({r[i]['snapshots']})" for r in results.values()]
        print(f"| {row['pods']} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
