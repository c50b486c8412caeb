"""The demo: a real Prometheus, an exporter with five synthetic nodes, loadext, and a scheduler's
worth of filter/prioritize calls whose decisions are printed: a burst piling onto the node that
looks idle (the herd effect), the same burst spread by the herd guard turned on live, and a
node that heats up being avoided; then a summary.

Run it with scripts/demo.sh (which installs Prometheus and loadext first); --keep leaves the
stack running at the end, with its URLs printed.
"""

from __future__ import annotations

import argparse
import json
import shutil
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
herdGuard: {{enabled: {herd}, window: 2m}}
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
    """500m requested, 1 core limit: the herd guard estimates 0.85 cores (limit x 0.85)."""
    resources = {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
    return {
        "metadata": {"name": name, "namespace": "demo", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "app", "resources": resources}]},
    }


def nodes(names: list[str]) -> dict[str, Any]:
    """Node objects as kube-scheduler sends them with nodeCacheCapable: false (allocatable is what
    the herd guard divides estimates by)."""
    allocatable = {"cpu": str(CPUS), "memory": "16Gi", "pods": "110"}
    return {"items": [{"metadata": {"name": n}, "status": {"allocatable": allocatable}} for n in names]}


class Scheduler:
    """What kube-scheduler does with loadext in a cycle: filter, then prioritize the survivors.
    It keeps its own tally, so that the summary can be checked against loadext's counters."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.placed: dict[str, list[str]] = {}
        self.calls = 0
        self._preferred: dict[str, float] = {}

    def preferred_now(self) -> str:
        """The node loadext just scored best, from its loadext_node_preferred_total counters: on
        a tie it picks one at random, as kube-scheduler does, and counts the pod there."""
        with urllib.request.urlopen(self.base + "/metrics", timeout=5) as reply:
            counts = {
                labels["node"]: value
                for labels, value in _series(reply.read().decode(), "loadext_node_preferred_total")
            }
        grown = [node for node, value in counts.items() if value > self._preferred.get(node, 0)]
        self._preferred = counts
        if len(grown) != 1:
            raise SystemExit(f"demo: loadext_node_preferred_total should have grown on one node, got {counts}")
        return grown[0]

    def schedule(self, name: str) -> str:
        names = list(NODES)
        verdict = call(self.base + "/filter", {"Pod": pod(name), "Nodes": nodes(names), "NodeNames": None})
        passed = [n["metadata"]["name"] for n in verdict["Nodes"]["items"]]
        scores = call(self.base + "/prioritize", {"Pod": pod(name), "Nodes": nodes(passed), "NodeNames": None})
        self.calls += 1
        ranked = sorted(scores, key=lambda s: -s["Score"])
        best = self.preferred_now() if ranked else "(none)"
        self.placed.setdefault(best, []).append(name)
        print(f"\npod {name}: filter kept {len(passed)}/{len(names)} nodes")
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


def explain(base: str) -> dict[str, Any]:
    report: dict[str, Any] = call(base + "/explain")
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--keep", action="store_true", help="leave Prometheus and loadext running at the end, until Ctrl-C"
    )
    args = parser.parse_args()
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
        config_path.write_text(CONFIG.format(url=prom.url, herd="false"))
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        loadext = subprocess.Popen(
            serve_argv(config_path, port, "--reload-interval", "200ms", options=["--log-level", "warning"])
        )
        wait_for(lambda: ready(base), "loadext /readyz")
        wait_for(lambda: all(n["signals"] for n in explain(base)["nodes"]), "loadext's first snapshot")
        print(f"loadext is serving on {base}; thresholds cpu 85%, memory 90%\n")
        print(_explain(base))
        scheduler = Scheduler(base)

        print("\n*** act 1: a burst of three pods, herd guard off ***")
        for i in range(1, 4):
            scheduler.schedule(f"web-{i}")
        print(
            "\n(all three went to worker-3: its metrics cannot show their load until they run,"
            " so it looked idle each time. That is the herd effect.)"
        )

        print("\n*** act 2: the same burst with the herd guard on (herdGuard.enabled: true, applied live) ***")
        config_path.write_text(CONFIG.format(url=prom.url, herd="true"))
        wait_for(lambda: explain(base)["herdGuard"]["enabled"], "the config reload")
        for i in range(4, 7):
            scheduler.schedule(f"web-{i}")
        print(
            "\n(each pod now counts on the node it was given, estimated at 0.85 cores of 4, until its"
            " usage can show in the metrics: the burst spreads.)"
        )
        print("\n" + _explain(base))

        print("\n*** act 3: worker-3 heats up to 97% CPU (a batch job landed there) ***")
        set_node(exporter, "worker-3", 0.97, 0.20)
        wait_for(lambda: _cpu_of(base, "worker-3") > 0.9, "worker-3 to be seen as hot", timeout=30)
        for i in range(7, 9):
            scheduler.schedule(f"web-{i}")
        _summary(base, scheduler)
        if args.keep:
            _keep(base, prom.url)
    finally:
        if loadext is not None:
            loadext.send_signal(signal.SIGTERM)
            loadext.wait(20)
        prom.stop()
        exporter.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def _cpu_of(base: str, node: str) -> float:
    row = next((r for r in explain(base)["nodes"] if r["node"] == node), None)
    return float(row["signals"]["cpu"]["value"]) if row and "cpu" in row["signals"] else 0.0


def _summary(base: str, scheduler: Scheduler) -> None:
    """Placements per node, refusals by reason, and loadext's own request counters, which add up
    to the demo's calls: it asks /explain for everything else, which is not an extender call."""
    with urllib.request.urlopen(base + "/metrics", timeout=5) as reply:
        metrics = reply.read().decode()
    counted = {verb: _metric(metrics, f'loadext_requests_total{{outcome="ok",verb="{verb}"}}') for verb in VERBS}
    refusals = {
        f"{labels['signal']} ({labels['cause']})": value
        for labels, value in _series(metrics, "loadext_node_rejections_total")
        if value
    }
    print("\n*** summary ***")
    print("placements (the extender's favourite per pod):")
    for node in NODES:
        pods = scheduler.placed.get(node, [])
        print(f"  {node:9} {len(pods)}  {' '.join(pods)}".rstrip())
    print("node refusals by signal and cause: " + ", ".join(f"{k} {v:g}" for k, v in refusals.items()))
    print(
        f"extender calls: {scheduler.calls} pods, loadext counted {counted['filter']:g} filter and "
        f"{counted['prioritize']:g} prioritize calls (one of each per pod)"
    )
    print("loadext's own metrics (GET /metrics), a few, rounded:")
    for labels, value in _series(metrics, "loadext_node_signal_ratio"):
        if labels["node"] == "worker-3":
            print(f'  loadext_node_signal_ratio{{node="worker-3",signal="{labels["signal"]}"}} {value:.2f}')
    print(f"  loadext_degraded {_metric(metrics, 'loadext_degraded'):g}")


VERBS = ("filter", "prioritize")


def _series(metrics: str, name: str) -> list[tuple[dict[str, str], float]]:
    found = []
    for line in metrics.splitlines():
        if line.startswith(name + "{"):
            labels = dict(part.split("=", 1) for part in line[len(name) + 1 : line.index("}")].split(","))
            found.append(({k: v.strip('"') for k, v in labels.items()}, float(line.rsplit(" ", 1)[1])))
    return found


def _metric(metrics: str, series: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _keep(base: str, prometheus: str) -> None:
    print("\nthe stack keeps running (--keep); poke at it, Ctrl-C to stop and clean up:")
    print(f"  loadext explain --url {base}")
    print(f"  curl {base}/explain?pod=demo/web-1")
    print(f"  curl {base}/metrics")
    print(f"  Prometheus: {prometheus}/graph")
    sys.stdout.flush()
    stop = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)  # delivered to sigwait, not as an exception
    signal.sigwait(stop)


def _rates_settled(prom: PrometheusServer) -> bool:
    """rate() underestimates until a series is older than its window; wait for exact values."""
    got = {r["metric"]["instance"]: float(r["value"][1]) for r in prom.query(CPU_QUERY)}
    return set(got) == set(NODES) and all(abs(got[n] - cpu) < 0.02 for n, (cpu, _) in NODES.items())


def _explain(base: str) -> str:
    """What the running loadext itself believes: the same numbers it decides with."""
    result = subprocess.run(
        [sys.executable, "-m", "loadext", "--log-level", "warning", "explain", "--url", base],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return f"$ loadext explain --url {base}\n" + result.stdout.rstrip()


if __name__ == "__main__":
    raise SystemExit(main())
