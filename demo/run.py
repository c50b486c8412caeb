"""The demo: a real Prometheus, an exporter with five synthetic nodes, loadext, and a scheduler's
worth of filter/prioritize calls whose decisions are printed.

Run it with scripts/demo.sh (which installs Prometheus and loadext first).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.exporter import Exporter  # noqa: E402
from harness.loadext import ready, serve_argv  # noqa: E402
from harness.prometheus import PrometheusServer, free_port, scrape_config  # noqa: E402

# node -> (busy CPU share, used memory share); worker-3 will heat up half way through
NODES = {
    "worker-1": (0.92, 0.40),
    "worker-2": (0.55, 0.70),
    "worker-3": (0.10, 0.20),
    "worker-4": (0.35, 0.95),
    "worker-5": (0.25, 0.30),
}
CPUS = 4

CONFIG = """\
prometheus:
  url: {url}
  timeout: 1s
refreshInterval: 1s
maxDataAge: 30s
nodeIdentity: {{label: instance, kind: name}}
signals:
  - name: cpu
    query: >-
      1 - avg without (cpu) (sum without (mode)
      (rate(node_cpu_seconds_total{{job="demo", mode=~"idle|iowait|steal"}}[5s])))
    threshold: 0.85
    weight: 2
  - name: memory
    query: 1 - node_memory_MemAvailable_bytes{{job="demo"}} / node_memory_MemTotal_bytes{{job="demo"}}
    threshold: 0.90
    weight: 1
missingData: pass
failurePolicy: open
scoring: {{strategy: leastLoaded}}
"""
CPU_QUERY = (
    "1 - avg without (cpu) (sum without (mode) "
    '(rate(node_cpu_seconds_total{job="demo", mode=~"idle|iowait|steal"}[5s])))'
)


def set_node(exporter: Exporter, node: str, cpu: float, memory: float) -> None:
    for core in range(CPUS):
        exporter.set_counter_rate(
            "node_cpu_seconds_total", 1 - cpu, job="demo", instance=node, cpu=str(core), mode="idle"
        )
        exporter.set_counter_rate("node_cpu_seconds_total", cpu, job="demo", instance=node, cpu=str(core), mode="user")
    exporter.set_gauge("node_memory_MemTotal_bytes", 16e9, job="demo", instance=node)
    exporter.set_gauge("node_memory_MemAvailable_bytes", 16e9 * (1 - memory), job="demo", instance=node)


def call(url: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as reply:
        return json.load(reply)


def pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "demo", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "500m"}}}]},
    }


def schedule(base: str, name: str) -> str:
    """What kube-scheduler does with loadext in a cycle: filter, then prioritize the survivors."""
    nodes = list(NODES)
    verdict = call(base + "/filter", {"Pod": pod(name), "Nodes": None, "NodeNames": nodes})
    passed = verdict["NodeNames"]
    scores = call(base + "/prioritize", {"Pod": pod(name), "Nodes": None, "NodeNames": passed})
    ranked = sorted(scores, key=lambda s: -s["Score"])
    best = ranked[0]["Host"] if ranked else "(none)"
    print(f"\npod {name}: filter kept {len(passed)}/{len(nodes)} nodes")
    for node, reason in sorted(verdict["FailedAndUnresolvableNodes"].items()):
        print(f"  rejected {node:9} {reason}")
    print("  scores   " + "  ".join(f"{s['Host']}={s['Score']}" for s in ranked))
    print(f"  -> the extender's favourite: {best}")
    return best


def wait_for(check: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"demo: timed out waiting for {what}")
        time.sleep(0.2)


def main() -> int:
    exporter = Exporter()
    for node, (cpu, memory) in NODES.items():
        set_node(exporter, node, cpu, memory)
    workdir = tempfile.mkdtemp(prefix="loadext-demo-")
    print(f"starting Prometheus on loopback, scraping the demo exporter at {exporter.target} ...")
    prom = PrometheusServer(workdir, scrape_config(exporter.target))
    loadext = None
    try:
        print("waiting for the first scrapes and a full 5 s rate window ...")
        wait_for(lambda: _rates_settled(prom), "CPU rates in Prometheus")
        config_path = Path(workdir) / "loadext.yaml"
        config_path.write_text(CONFIG.format(url=prom.url))
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        loadext = subprocess.Popen(serve_argv(config_path, port, options=["--log-level", "warning"]))
        wait_for(lambda: ready(base), "loadext /readyz")
        wait_for(
            lambda: (
                all(n["signals"] for n in call(base + "/explain")["nodes"])
                and len(call(base + "/explain")["nodes"]) == len(NODES)
            ),
            "loadext's first snapshot",
        )
        print(f"loadext is serving on {base}; config thresholds cpu 85%, memory 90%\n")
        print(_explain(config_path))

        for i in range(1, 4):
            schedule(base, f"web-{i}")
        print(
            "\n(all three pick worker-3: its metrics cannot show their load until they run;"
            " that burst is the herd effect)"
        )

        print("\n*** worker-3 heats up to 97% CPU (a batch job landed there) ***")
        set_node(exporter, "worker-3", 0.97, 0.20)
        wait_for(
            lambda: (
                "worker-3"
                in call(base + "/filter", {"Pod": pod("probe"), "Nodes": None, "NodeNames": ["worker-3"]})[
                    "FailedAndUnresolvableNodes"
                ]
            ),
            "worker-3 to be seen as hot",
            timeout=30,
        )
        for i in range(4, 6):
            schedule(base, f"web-{i}")

        print("\nloadext's own metrics (GET /metrics), a few lines:")
        with urllib.request.urlopen(base + "/metrics", timeout=5) as reply:
            for line in reply.read().decode().splitlines():
                shown = (
                    'loadext_requests_total{outcome="ok"',
                    "loadext_node_rejections_total",
                    "loadext_degraded",
                    'loadext_node_signal_ratio{node="worker-3"',
                )
                if line.startswith(shown) and not line.endswith(" 0.0"):
                    print("  " + line)
        print("\n" + _explain(config_path))
    finally:
        if loadext is not None:
            loadext.send_signal(signal.SIGTERM)
            loadext.wait(20)
        prom.stop()
        exporter.close()
    return 0


def _rates_settled(prom: PrometheusServer) -> bool:
    """rate() underestimates until a series is older than its window; wait for exact values."""
    query = CPU_QUERY
    got = {r["metric"]["instance"]: float(r["value"][1]) for r in prom.query(query)}
    return set(got) == set(NODES) and all(abs(got[n] - cpu) < 0.02 for n, (cpu, _) in NODES.items())


def _explain(config_path: Path) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "loadext", "--log-level", "warning", "explain", "--config", str(config_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    return "$ loadext explain --config loadext.yaml\n" + result.stdout.rstrip()


if __name__ == "__main__":
    raise SystemExit(main())
