"""Query presets for the common ways Prometheus is set up around Kubernetes.

Each preset answers two questions an SRE would otherwise get wrong on day one: which PromQL
gives a 0..1 utilisation per node, and which label of the result names the node. The node-label
mismatch is the most common reason a load-aware scheduler silently does nothing, so the identity
travels with the queries.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Preset:
    """Queries per signal plus where the node identity is found in their results; `optional`
    signals are off until a config lists them by name (`signals: [{name: cpu_pressure}]`)."""

    queries: dict[str, str]
    identity_label: str
    identity_kind: str  # "name" or "address"
    optional: dict[str, str] = field(default_factory=dict)


# Pressure stall information (PSI): the share of time some task waited for CPU, or for memory,
# over the rate window, 0..1 as it is. It sees contention that utilisation misses (a node at 60 %
# whose tasks queue). Caveat: a CPU-limited pod's own CFS throttling counts as CPU waiting too
# (kubernetes/enhancements#5062), so one throttled pod can raise its node's cpu_pressure.
def _pressure(selector: str, join: str = "") -> dict[str, str]:
    return {
        f"{resource}_pressure": f"rate(node_pressure_{resource}_waiting_seconds_total{{{selector}}}[5m]){join}"
        for resource in ("cpu", "memory")
    }


_KPS_JOIN = " * on (namespace, pod) group_left (node) node_namespace_pod:kube_pod_info:"


PRESETS: dict[str, Preset] = {
    # Helm kube-prometheus-stack: node-exporter series carry instance="IP:9100" and no node
    # label, so join through kube-state-metrics' per-pod info to copy `node` across.
    "kube-prometheus-stack": Preset(
        queries={
            "cpu": 'instance:node_cpu_utilisation:rate5m{job="node-exporter"}'
            " * on (namespace, pod) group_left (node) node_namespace_pod:kube_pod_info:",
            "memory": 'instance:node_memory_utilisation:ratio{job="node-exporter"}'
            " * on (namespace, pod) group_left (node) node_namespace_pod:kube_pod_info:",
        },
        identity_label="node",
        identity_kind="name",
        optional=_pressure('job="node-exporter"', _KPS_JOIN),
    ),
    # jsonnet kube-prometheus relabels the node name into `instance`.
    "kube-prometheus": Preset(
        queries={
            "cpu": 'instance:node_cpu_utilisation:rate5m{job="node-exporter"}',
            "memory": 'instance:node_memory_utilisation:ratio{job="node-exporter"}',
        },
        identity_label="instance",
        identity_kind="name",
        optional=_pressure('job="node-exporter"'),
    ),
    # Plain Prometheus scraping node_exporter by IP:port, no recording rules: loadext maps the
    # address to the Node's InternalIP itself.
    "node-exporter-by-ip": Preset(
        queries={
            "cpu": "1 - avg without (cpu) (sum without (mode) ("
            'rate(node_cpu_seconds_total{job="node", mode=~"idle|iowait|steal"}[5m])))',
            "memory": '1 - node_memory_MemAvailable_bytes{job="node"} / node_memory_MemTotal_bytes{job="node"}',
        },
        identity_label="instance",
        identity_kind="address",
        optional=_pressure('job="node"'),
    ),
    # No node-exporter at all: pod usage from cAdvisor over allocatable from KSM. System
    # daemons are not counted, so the numbers read lower than the node-exporter presets.
    "kubelet-cadvisor": Preset(
        queries={
            "cpu": 'sum by (node) (rate(container_cpu_usage_seconds_total{job="kubelet",'
            ' metrics_path="/metrics/cadvisor", container!="", image!=""}[5m]))'
            " / on (node) max by (node) "
            '(kube_node_status_allocatable{resource="cpu", unit="core"})',
            "memory": 'sum by (node) (container_memory_working_set_bytes{job="kubelet",'
            ' metrics_path="/metrics/cadvisor", container!="", image!=""})'
            " / on (node) max by (node) "
            '(kube_node_status_allocatable{resource="memory", unit="byte"})',
        },
        identity_label="node",
        identity_kind="name",
        # The kubelet's own PSI (Kubernetes 1.36, GA), its root cgroup standing for the node.
        optional={
            f"{resource}_pressure": f"max by (node) (rate(container_pressure_{resource}_waiting_seconds_total"
            f'{{job="kubelet", metrics_path="/metrics/cadvisor", id="/"}}[5m]))'
            for resource in ("cpu", "memory")
        },
    ),
}

# Thresholds in line with the node-mixin's 90 % alerts, a little lower for CPU because CPU
# saturation hurts latency before memory saturation does.
DEFAULT_THRESHOLDS: dict[str, float] = {"cpu": 0.85, "memory": 0.90}
