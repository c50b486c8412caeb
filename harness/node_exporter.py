"""The real node_exporter (Debian's prometheus-node-exporter) on loopback, reporting this
machine, and a stand-in for kube-state-metrics with its exact metric names and labels.

kube-state-metrics itself cannot be had here (the Go module proxy refuses it and Debian does
not package it), so `KubeStateMetrics` serves the few `kube_*` series that loadext's presets and
dashboards read, shaped as kube-state-metrics v2 exports them.
"""

from __future__ import annotations

import shutil
import urllib.request
from pathlib import Path

from harness.exporter import Exporter
from harness.kubernetes import Process, wait_until
from harness.prometheus import free_port

NODE_EXPORTER = shutil.which("prometheus-node-exporter") or "/usr/bin/prometheus-node-exporter"


class NodeExporter:
    """Unprivileged; systemd's collector needs D-Bus, so it is off (as in a container)."""

    def __init__(self, workdir: Path) -> None:
        assert Path(NODE_EXPORTER).exists(), "the Debian package prometheus-node-exporter is required"
        self.port = free_port()
        self.target = f"127.0.0.1:{self.port}"
        self.process = Process(
            "node-exporter",
            [NODE_EXPORTER, f"--web.listen-address={self.target}", "--no-collector.systemd", "--log.level=warn"],
            workdir,
        )
        wait_until(lambda: self._serves(), "node_exporter", timeout=20, process=self.process)

    def _serves(self) -> bool:
        with urllib.request.urlopen(f"http://{self.target}/metrics", timeout=2) as reply:
            return b"node_cpu_seconds_total" in reply.read()

    def stop(self) -> None:
        self.process.stop()


class KubeStateMetrics(Exporter):
    def add_node(self, node: str, internal_ip: str, cpu: float, memory_bytes: float) -> None:
        self.set_gauge(
            "kube_node_info",
            1,
            node=node,
            internal_ip=internal_ip,
            kernel_version="6.1.0-test",
            os_image="Debian GNU/Linux 12 (bookworm)",
            container_runtime_version="containerd://1.7.24",
            kubelet_version="v1.36.3",
            kubeproxy_version="v1.36.3",
            pod_cidr="10.244.0.0/24",
            provider_id="",
            system_uuid=f"uuid-{node}",
        )
        self.set_gauge("kube_node_status_allocatable", cpu, node=node, resource="cpu", unit="core")
        self.set_gauge("kube_node_status_allocatable", memory_bytes, node=node, resource="memory", unit="byte")

    def add_pod(self, namespace: str, pod: str, node: str, host_ip: str, owner: str = "ReplicaSet") -> None:
        self.set_gauge(
            "kube_pod_info",
            1,
            namespace=namespace,
            pod=pod,
            uid=f"uid-{namespace}-{pod}",
            host_ip=host_ip,
            pod_ip=host_ip,
            node=node,
            created_by_kind=owner,
            created_by_name=pod.rsplit("-", 1)[0],
            priority_class="",
            host_network="true",
        )


# node-mixin's and kubernetes-mixin's recording rules as kube-prometheus-stack ships them
# (job="node-exporter"), the ones the kube-prometheus-stack preset reads.
STACK_RULES = """groups:
  - name: node-exporter.rules
    rules:
      - record: instance:node_cpu_utilisation:rate5m
        expr: >-
          1 - avg without (cpu) (sum without (mode) (rate(node_cpu_seconds_total{job="node-exporter",
          mode=~"idle|iowait|steal"}[5m])))
      - record: instance:node_memory_utilisation:ratio
        expr: >-
          1 - ((node_memory_MemAvailable_bytes{job="node-exporter"} or (node_memory_Buffers_bytes{job="node-exporter"}
          + node_memory_Cached_bytes{job="node-exporter"} + node_memory_MemFree_bytes{job="node-exporter"}
          + node_memory_Slab_bytes{job="node-exporter"})) / node_memory_MemTotal_bytes{job="node-exporter"})
  - name: node.rules
    rules:
      - record: 'node_namespace_pod:kube_pod_info:'
        expr: >-
          topk by (namespace, pod) (1, max by (node, namespace, pod) (label_replace(
          kube_pod_info{job="kube-state-metrics",node!=""}, "pod", "$1", "pod", "(.*)")))
"""


def stack_scrape_config(node_exporter: str, kube_state_metrics: str, rule_file: str) -> str:
    """node_exporter scraped twice: as plain Prometheus does (job="node", instance IP:port) and as
    kube-prometheus-stack's ServiceMonitor does (job="node-exporter" plus the exporter pod's
    namespace and pod); kube-state-metrics with honor_labels, as its ServiceMonitor has it."""
    return (
        "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{rule_file}']\n"
        "scrape_configs:\n"
        "  - job_name: node\n"
        f"    static_configs: [{{targets: ['{node_exporter}']}}]\n"
        "  - job_name: node-exporter\n"
        f"    static_configs: [{{targets: ['{node_exporter}'], labels: {{namespace: monitoring, "
        "pod: kps-prometheus-node-exporter-x7k2p, service: kps-prometheus-node-exporter, "
        "endpoint: http-metrics, container: node-exporter}}]\n"
        "  - job_name: kube-state-metrics\n"
        "    honor_labels: true\n"
        f"    static_configs: [{{targets: ['{kube_state_metrics}'], labels: {{job: kube-state-metrics}}}}]\n"
    )
