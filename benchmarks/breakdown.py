"""Where a names-path request's time goes, stage by stage, inside loadext's own process.

    python3 benchmarks/breakdown.py [--nodes 5000] [--names 500] [--requests 2000] [--herd-guard]

Builds the real App (loadext.app.App, as `loadext serve` does) over a stored snapshot of
`--nodes` nodes, then answers the names-N filter and prioritize bodies from gen_fixtures.py the
way the verb handler does: decode, the verb, telemetry, encode. Each stage is timed on its own
(median microseconds per request over `--requests` calls); the verb's own time is then split
by function with cProfile (shares of the verb, so the profiler's overhead cancels out). With
`--http`, wrk measures the aiohttp floor (benchmarks/floor.py: read the body, answer a
constant) on the same body, which is what HTTP read and write cost per request.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from run import bench_config, node_load, node_name, pinned, wrk  # noqa: E402  (the suite's load, config, wrk)

from harness.inprocess import stored_app  # noqa: E402
from loadext.core.requests import BoundPod, NodeInfo, PodRef  # noqa: E402
from loadext.http import protocol  # noqa: E402

# The verb's own steps, by function name: what cProfile attributes the verb's time to.
VERB_PARTS = {
    "directory": ("note_request", "observe", "set_labels", "set_allocatable"),
    "table lookup": ("table", "identities_of", "of"),
    "herd correction": ("incoming", "view", "corrected", "overloads"),
    "decision record": ("_remember", "record"),
    "result": ("_rejections", "summary"),
}


def config_text(herd_guard: bool) -> str:
    """benchmarks/run.py's config, with the herd guard on or off."""
    return bench_config("http://127.0.0.1:1", herdGuard={"enabled": herd_guard})


def median_us(call: Callable[[], Any], requests: int) -> float:
    samples = []
    for _ in range(requests):
        started = time.perf_counter_ns()
        call()
        samples.append(time.perf_counter_ns() - started)
    return statistics.median(samples) / 1000


def verb_split(call: Callable[[], Any], requests: int) -> dict[str, float]:
    """Share of the verb's profiled time per part (cumulative time of the named functions)."""
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(requests):
        call()
    profile.disable()
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    total = sum(ct for (_, _, name), (_, _, _, ct, _) in stats.items() if name in ("filter", "prioritize"))
    shares = {}
    for part, names in VERB_PARTS.items():
        cumulative = sum(ct for (_, _, name), (_, _, _, ct, _) in stats.items() if name in names)
        shares[part] = cumulative / total if total else 0.0
    return shares


def floor_us(body: Path, duration: float) -> float | None:
    """Per-request time of the aiohttp floor on this body, from wrk (None without wrk)."""
    from harness.prometheus import free_port

    port = free_port()
    server = subprocess.Popen(pinned("1", [sys.executable, str(HERE / "floor.py"), str(port)]))
    try:
        for _ in range(100):
            try:
                wrk(f"http://127.0.0.1:{port}/filter", body, 0.2, 1)
                break
            except RuntimeError:
                time.sleep(0.1)
        result = wrk(f"http://127.0.0.1:{port}/filter", body, duration, 4)
        return 1e6 / result["rps"]
    finally:
        server.terminate()
        server.wait()


def profile(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="loadext-profile-"))
    subprocess.run(
        [sys.executable, str(HERE / "gen_fixtures.py"), "--large", str(workdir), "--nodes", str(args.names)],
        check=True,
        capture_output=True,
    )
    body_path = workdir / f"args-names-{args.names}.json"
    body = body_path.read_bytes()
    names = [node_name(i) for i in range(1, args.nodes + 1)]
    cpu = {name: node_load(i)[0] for i, name in enumerate(names, 1)}
    memory = {name: node_load(i)[1] for i, name in enumerate(names, 1)}
    app = stored_app(config_text(args.herd_guard), cpu, memory)
    extender, cluster, telemetry, codec = app.extender, app.cluster, app.telemetry, app.server.codec
    if args.herd_guard:  # as with --watch-nodes: every node's allocatable, and a burst in flight
        for name in names:
            cluster.node_seen(NodeInfo(name, (), {}, {"cpu": "16", "memory": "64Gi"}))
        now = time.time()
        burst = (({"cpu": "1700m", "memory": "1Gi"}, {}),)  # each counted at 1.7 cores, 1 GiB
        for i in range(args.in_flight):
            pod = PodRef("default", f"burst-{i}", f"burst-{i}", ("ReplicaSet",), burst)
            cluster.pod_bound(BoundPod(pod, names[(i * 7) % args.nodes], now))
    per_node = cluster.config.per_node_metrics
    details = cluster.config.herd_guard.enabled
    request = codec.decode_extender_args(body, node_details=details)
    missing = [n for n in request.args.names if n not in cpu]
    if missing:
        raise SystemExit(f"{len(missing)} names of the body are not in the snapshot (e.g. {missing[0]})")

    filtered = extender.filter(request.args)
    prioritized = extender.prioritize(request.args)
    stages: dict[str, dict[str, float]] = {}
    for verb, run_verb, count, encode in (
        ("filter", lambda: extender.filter(request.args), lambda: telemetry.verbs.count_filter(filtered),
         lambda: protocol.encode_filter_result(filtered, None)),
        ("prioritize", lambda: extender.prioritize(request.args),
         lambda: telemetry.verbs.count_prioritize(prioritized, per_node),
         lambda: codec.encode_host_priority_list(prioritized)),
    ):  # fmt: skip
        verb_us = median_us(run_verb, args.requests)
        row = {"decode": median_us(lambda: codec.decode_extender_args(body, node_details=details), args.requests)}
        shares = verb_split(run_verb, args.requests)
        for part, share in shares.items():
            row[f"  {part}"] = verb_us * share
        row["  the verb's own code"] = verb_us * max(0.0, 1 - sum(shares.values()))
        row["verb (all)"] = verb_us
        row["telemetry"] = median_us(count, args.requests)
        row["encode"] = median_us(encode, args.requests)
        row["loadext total"] = row["decode"] + verb_us + row["telemetry"] + row["encode"]
        stages[verb] = row
    floor = floor_us(body_path, args.duration) if args.http else None
    return {
        "nodes": args.nodes,
        "names": args.names,
        "herd_guard": args.herd_guard,
        "in_flight": args.in_flight,
        "stages": stages,
        "floor": floor,
    }


def table(result: dict[str, Any]) -> str:
    verbs = list(result["stages"])
    herd = f"on, {result['in_flight']} pods in flight" if result["herd_guard"] else "off"
    lines = [
        f"names-{result['names']} over a {result['nodes']}-node snapshot, herd guard {herd}: median us per request",
        "",
        "| stage | " + " | ".join(verbs) + " |",
        "|---|" + "---:|" * len(verbs),
    ]
    for stage in result["stages"][verbs[0]]:
        lines.append(f"| {stage} | " + " | ".join(f"{result['stages'][v][stage]:.1f}" for v in verbs) + " |")
    if result["floor"] is not None:
        lines.append(f"| HTTP read + write (aiohttp floor, wrk) | {result['floor']:.1f} | (same body) |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000, help="nodes in the snapshot (default 5000)")
    parser.add_argument("--names", type=int, default=500, help="names per request (default 500)")
    parser.add_argument("--requests", type=int, default=2000, help="calls per stage (default 2000)")
    parser.add_argument("--herd-guard", action="store_true", help="with the herd guard on, as the shipped config")
    parser.add_argument(
        "--in-flight",
        type=int,
        default=20,
        help="with --herd-guard: pods placed in the window, on every 7th node of the snapshot",
    )
    parser.add_argument("--http", action="store_true", help="also measure the aiohttp floor with wrk")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds of wrk for --http (default 5)")
    parser.add_argument("--json", type=Path, help="also write the result as JSON here")
    args = parser.parse_args()
    result = profile(args)
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
