"""How fast loadext's names path could be, measured live: the same HTTP requests against five
servers, each doing a little less of loadext's work.

    python3 benchmarks/ceiling.py [--names 500] [--duration 3] [--repeat 6] [--before DIR]

- loadext: `loadext serve`'s app (loadext.app.App) over a stored 5000-node snapshot: everything;
- loadext, no verb: the same, with filter/prioritize answering a result computed once;
- loadext, no verb, no decode: also the body's decode done once; what is left is the handler
  (limits, request id, telemetry), the encode and aiohttp: loadext's ceiling on this stack;
- floor, echo: benchmarks/floor.py --echo, aiohttp and orjson answering a correct reply of
  the same size;
- floor, constant: benchmarks/floor.py, aiohttp answering a 90-byte constant;
- Go reference: benchmarks/reference/ with GOMAXPROCS=1, the yardstick of issue #14's targets.

`--before DIR` adds two rows from another checkout (its own benchmarks/ceiling.py serving its own
loadext): "loadext" and "loadext, no verb, no decode" of that code, for before and after side by
side in the same runs.

Each server is pinned to CPU 1 and wrk to CPU 0; runs alternate between servers and the table
gives medians of requests per second and of the server's CPU time per request (from
/proc/PID/stat), so the noise of a shared machine hits all of them alike. The gaps between
rows are the cost of each layer.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from run import answers, bench_config, build_reference, cpu_seconds, node_load, node_name, pinned, wrk  # noqa: E402

from harness.prometheus import free_port  # noqa: E402

SERVERS = {
    "loadext": "all",
    "loadext, no verb": "no-verb",
    "loadext, no verb, no decode": "no-decode",
    "floor, echo": "echo",
    "floor, constant": "constant",
    "Go reference": "go",
}
NODES = 5000


def serve(port: int, mode: str, body_path: Path) -> None:
    """Run one of the servers (in the child process that run() starts)."""
    from aiohttp import web

    from harness.inprocess import stored_app
    from loadext.http.server import install_event_loop

    install_event_loop()
    names = [node_name(i) for i in range(1, NODES + 1)]
    cpu = {name: node_load(i)[0] for i, name in enumerate(names, 1)}
    memory = {name: node_load(i)[1] for i, name in enumerate(names, 1)}
    app = stored_app(bench_config("http://127.0.0.1:1"), cpu, memory)
    if mode in ("no-verb", "no-decode"):
        codec = app.server.codec
        request = codec.decode_extender_args(body_path.read_bytes())
        filtered, prioritized = app.extender.filter(request.args), app.extender.prioritize(request.args)
        app.extender.filter = lambda _: filtered  # type: ignore[method-assign]
        app.extender.prioritize = lambda _: prioritized  # type: ignore[method-assign]
        if mode == "no-decode":
            codec.decode_extender_args = lambda _body, node_details=False: request  # type: ignore[method-assign]
    web.run_app(app.web_app("/", background=False), host="127.0.0.1", port=port, access_log=None, print=None)


BEFORE_SERVERS = {"loadext, before": "all", "loadext, no verb, no decode, before": "no-decode"}


def start(
    mode: str, body: Path, reference: tuple[Path, Path], tree: Path = HERE.parent
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    if mode == "go":  # env execs the binary: the pid is the server's, for its CPU time
        binary, snapshot = reference
        argv = ["env", "GOMAXPROCS=1", str(binary), "--listen", f"127.0.0.1:{port}", "--snapshot", str(snapshot)]
    elif mode in ("echo", "constant"):
        argv = [sys.executable, str(HERE / "floor.py"), str(port), *(["--echo"] if mode == "echo" else [])]
    else:
        argv = [sys.executable, str(tree / "benchmarks" / "ceiling.py"), "--serve", str(port), mode, str(body)]
    process = subprocess.Popen(pinned("1", argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return process, f"http://127.0.0.1:{port}"


def measure(args: argparse.Namespace) -> dict[str, dict[str, dict[str, float]]]:
    workdir = Path(tempfile.mkdtemp(prefix="loadext-ceiling-"))
    generate = [sys.executable, str(HERE / "gen_fixtures.py"), "--large", str(workdir), "--nodes", str(args.names)]
    subprocess.run(generate, check=True, capture_output=True)
    body = workdir / f"args-names-{args.names}.json"
    reference = build_reference(workdir, NODES)
    servers = {label: start(mode, body, reference) for label, mode in SERVERS.items()}
    if args.before is not None:
        before = args.before.resolve()
        servers |= {label: start(mode, body, reference, before) for label, mode in BEFORE_SERVERS.items()}
    try:
        for label, (process, url) in servers.items():
            deadline = time.monotonic() + 60
            while not answers(url):
                assert process.poll() is None, f"{label} exited"
                assert time.monotonic() < deadline, f"{label} did not answer within 60 s"
                time.sleep(0.2)
        results: dict[str, dict[str, dict[str, float]]] = {}
        for verb in ("filter", "prioritize"):
            rps: dict[str, list[float]] = {label: [] for label in servers}
            cpu: dict[str, list[float]] = {label: [] for label in servers}
            for _ in range(args.repeat):
                for label, (process, url) in servers.items():
                    before = cpu_seconds(process.pid)
                    result = wrk(f"{url}/{verb}", body, args.duration, 4)
                    rps[label].append(result["rps"])
                    cpu[label].append((cpu_seconds(process.pid) - before) / (result["rps"] * args.duration) * 1e6)
            results[verb] = {
                label: {"rps": statistics.median(rps[label]), "cpu_us": statistics.median(cpu[label])}
                for label in servers
            }
        return results
    finally:
        for process, _ in servers.values():
            process.kill()
            process.wait()


def table(results: dict[str, dict[str, dict[str, float]]], names: int) -> str:
    lines = [
        f"names-{names}, one core per server: median req/s and server CPU us per request",
        "",
        "| server | filter req/s | CPU us | prioritize req/s | CPU us |",
        "|---|---:|---:|---:|---:|",
    ]
    for label in results["filter"]:
        f, p = results["filter"][label], results["prioritize"][label]
        lines.append(f"| {label} | {f['rps']:.0f} | {f['cpu_us']:.0f} | {p['rps']:.0f} | {p['cpu_us']:.0f} |")
    return "\n".join(lines)


def main() -> int:
    if sys.argv[1:2] == ["--serve"]:
        serve(int(sys.argv[2]), sys.argv[3], Path(sys.argv[4]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--names", type=int, default=500, help="names per request (default 500)")
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per wrk run (default 3)")
    parser.add_argument("--repeat", type=int, default=6, help="runs per server and verb; medians (default 6)")
    parser.add_argument("--before", type=Path, help="a checkout of older loadext code, served beside this one")
    args = parser.parse_args()
    print(table(measure(args), args.names))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
