"""A live monitoring stack: `loadext serve` deciding for synthetic nodes, a real Prometheus
scraping the nodes' exporter, a kube-state-metrics stand-in (its kube_pod_info for pods on those
nodes) and loadext's own /metrics, and scheduler-shaped traffic. Given a control plane, loadext
also watches its Nodes, so the watch-health metric has series.

The dashboard tests send every panel's query to this Prometheus, and docs/render_dashboards.py
draws the panels from it.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from harness.config import as_yaml, loadext_config
from harness.exporter import Exporter
from harness.kubernetes import ControlPlane, Process, wait_until
from harness.loadext import ready, serve_argv
from harness.node_exporter import KubeStateMetrics
from harness.prometheus import PrometheusServer, free_port

NODES = {f"worker-{i}": ((i * 23) % 100 / 100, (i * 41) % 100 / 100) for i in range(1, 9)}


def post(url: str, body: dict[str, Any] | bytes) -> int:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            reply.read()
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


class LiveStack:
    def __init__(self, workdir: Path, kube: ControlPlane | None = None) -> None:
        self.workdir = workdir
        self.exporter = Exporter()
        self.kube_state_metrics = KubeStateMetrics()
        for number, (node, (cpu, memory)) in enumerate(NODES.items(), start=1):
            self.set_load(node, cpu, memory)
            self.kube_state_metrics.add_node(node, f"10.0.0.{number}", cpu=8, memory_bytes=32e9)
            for pod in range(number % 3 + 1):
                self.kube_state_metrics.add_pod("demo", f"web-{node}-{pod}", node, f"10.0.0.{number}")
        self.loadext_port = free_port()
        self.prometheus = PrometheusServer(str(workdir), self._scrape_config())
        self.config_path = workdir / "loadext.yaml"
        self.config_path.write_text(
            as_yaml(loadext_config(self.prometheus.url, "stack_cpu", "stack_memory", refresh="1s", timeout="1s"))
        )
        self.url = f"http://127.0.0.1:{self.loadext_port}"
        watch = ["--kubeconfig", str(kube.admin_kubeconfig), "--watch-nodes"] if kube is not None else []
        self.loadext = Process(
            "loadext", serve_argv(self.config_path, self.loadext_port, "--reload-interval", "200ms", *watch), workdir
        )
        self._stop = threading.Event()
        self._traffic: threading.Thread | None = None

    def _scrape_config(self) -> str:
        return (
            "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n"
            "  - job_name: nodes\n"
            "    honor_labels: true\n"
            f"    static_configs: [{{targets: ['{self.exporter.target}']}}]\n"
            "  - job_name: kube-state-metrics\n"
            "    honor_labels: true\n"
            f"    static_configs: [{{targets: ['{self.kube_state_metrics.target}']}}]\n"
            "  - job_name: loadext\n"
            f"    static_configs: [{{targets: ['127.0.0.1:{self.loadext_port}']}}]\n"
        )

    def set_load(self, node: str, cpu: float, memory: float) -> None:
        self.exporter.set_gauge("stack_cpu", cpu, node=node)
        self.exporter.set_gauge("stack_memory", memory, node=node)

    def start(self) -> LiveStack:
        wait_until(lambda: ready(self.url), "loadext", process=self.loadext)
        self._traffic = threading.Thread(target=self._schedule_forever, daemon=True)
        self._traffic.start()
        return self

    def _schedule_forever(self) -> None:
        """A scheduler's calls, plus the odd malformed body and one invalid config edit."""
        pod = {"metadata": {"name": "web", "namespace": "demo", "uid": "u1"}}
        names = list(NODES)
        cycle = 0
        while not self._stop.is_set():
            cycle += 1
            post(self.url + "/filter", {"Pod": pod, "Nodes": None, "NodeNames": names})
            post(self.url + "/prioritize", {"Pod": pod, "Nodes": None, "NodeNames": names[: 2 + cycle % 6]})
            post(
                self.url + "/preempt",
                {
                    "Pod": pod,
                    "NodeNameToMetaVictims": {
                        n: {"Pods": [{"UID": f"v-{n}"}], "NumPDBViolations": 0} for n in names[:3]
                    },
                },
            )
            if cycle % 25 == 0:
                post(self.url + "/filter", b"{not json")
            self._stop.wait(0.05)

    def break_config_once(self) -> None:
        """An invalid edit, rejected (counted and logged), then the good config restored."""
        good = self.config_path.read_text()
        self.config_path.write_text(good + "failurePolicy: sometimes\n")
        wait_until(lambda: "config reload rejected" in self.loadext.log_tail(20000), "the rejection")
        self.config_path.write_text(good.replace("weight: 1}\n  - {name: memory", "weight: 2}\n  - {name: memory"))

    def wait_scraped(self, seconds: float) -> None:
        """Let Prometheus collect enough loadext samples for rate() windows."""
        wait_until(lambda: bool(self.prometheus.query('loadext_requests_total{job="loadext"}')), "loadext scraped")
        time.sleep(seconds)

    def stop(self) -> None:
        self._stop.set()
        if self._traffic is not None:
            self._traffic.join(5)
        self.loadext.stop()
        self.prometheus.stop()
        self.exporter.close()
        self.kube_state_metrics.close()
