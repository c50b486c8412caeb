"""Each shipped preset, unmodified, against a real Prometheus holding the series that stack
really produces (backfilled with promtool), including its node-identity label."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.inprocess import StartLoadext
from harness.prometheus import PrometheusServer, backfill
from harness.waiting import eventually
from harness.wire import full_nodes_request, names_request
from loadext.config.presets import PRESETS

STEP = 15
Series = tuple[str, dict[str, str], float, bool]  # name, labels, value or rate per second, is counter


def openmetrics(series: list[Series], now: float) -> str:
    """Samples every 15 s from 20 min ago to 2 min ahead; counters grow at their rate."""
    start = int(now) - 20 * 60
    times = range(start, int(now) + 120, STEP)
    lines = []
    for name, labels, value, counter in series:
        rendered = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for t in times:
            sample = 1000 + value * (t - start) if counter else value
            lines.append(f"{name}{{{rendered}}} {sample} {t}")
    return "\n".join([*lines, "# EOF"]) + "\n"


def _node_exporter_by_ip() -> list[Series]:
    out: list[Series] = []
    for instance, busy in {"10.0.0.1:9100": 0.3, "[fd00::3]:9100": 0.7}.items():
        for cpu in ("0", "1"):
            for mode, rate in {"idle": 1 - busy - 0.1, "iowait": 0.05, "steal": 0.05, "user": busy}.items():
                out.append(
                    (
                        "node_cpu_seconds_total",
                        {"job": "node", "instance": instance, "cpu": cpu, "mode": mode},
                        rate,
                        True,
                    )
                )
        out.append(("node_memory_MemTotal_bytes", {"job": "node", "instance": instance}, 8e9, False))
        out.append(
            (
                "node_memory_MemAvailable_bytes",
                {"job": "node", "instance": instance},
                8e9 * (1 - busy / 2),
                False,
            )
        )
    return out


def _kube_prometheus_stack() -> list[Series]:
    out: list[Series] = []
    for node, ip, pod, cpu, memory in [
        ("node-1", "10.0.0.1", "ne-aaa", 0.3, 0.4),
        ("node-2", "10.0.0.2", "ne-bbb", 0.9, 0.5),
    ]:
        labels = {
            "job": "node-exporter",
            "instance": f"{ip}:9100",
            "namespace": "monitoring",
            "pod": pod,
            "service": "kps-prometheus-node-exporter",
            "endpoint": "http-metrics",
            "container": "node-exporter",
        }
        out.append(("instance:node_cpu_utilisation:rate5m", labels, cpu, False))
        out.append(("instance:node_memory_utilisation:ratio", labels, memory, False))
        out.append(
            (
                "node_namespace_pod:kube_pod_info:",
                {"namespace": "monitoring", "pod": pod, "node": node},
                1,
                False,
            )
        )
    return out


def _kube_prometheus() -> list[Series]:
    out: list[Series] = []
    for node, cpu, memory in [("node-1", 0.3, 0.4), ("node-2", 0.9, 0.5)]:
        labels = {"job": "node-exporter", "instance": node, "namespace": "monitoring", "pod": f"ne-{node}"}
        out.append(("instance:node_cpu_utilisation:rate5m", labels, cpu, False))
        out.append(("instance:node_memory_utilisation:ratio", labels, memory, False))
    return out


def _kubelet_cadvisor() -> list[Series]:
    out: list[Series] = []
    for node, cores in [("node-1", 1.2), ("node-2", 3.6)]:
        base = {"job": "kubelet", "metrics_path": "/metrics/cadvisor", "node": node, "namespace": "default"}
        for container, share in (("app", 0.75), ("sidecar", 0.25)):
            labels = {**base, "container": container, "image": f"{container}:1", "pod": f"p-{node}"}
            out.append(("container_cpu_usage_seconds_total", labels, cores * share, True))
            out.append(("container_memory_working_set_bytes", labels, 2e9 * share, False))
        ksm = {"job": "kube-state-metrics", "node": node}
        out.append(("kube_node_status_allocatable", {**ksm, "resource": "cpu", "unit": "core"}, 4, False))
        out.append(("kube_node_status_allocatable", {**ksm, "resource": "memory", "unit": "byte"}, 8e9, False))
    return out


# preset -> (series, expected values per node, request kind)
CASES: dict[str, tuple[list[Series], dict[str, dict[str, float]], dict[str, str] | None]] = {
    "kube-prometheus-stack": (
        _kube_prometheus_stack(),
        {"node-1": {"cpu": 0.3, "memory": 0.4}, "node-2": {"cpu": 0.9, "memory": 0.5}},
        None,
    ),
    "kube-prometheus": (
        _kube_prometheus(),
        {"node-1": {"cpu": 0.3, "memory": 0.4}, "node-2": {"cpu": 0.9, "memory": 0.5}},
        None,
    ),
    "node-exporter-by-ip": (
        _node_exporter_by_ip(),
        {"ip4-node": {"cpu": 0.3, "memory": 0.15}, "ip6-node": {"cpu": 0.7, "memory": 0.35}},
        {"ip4-node": "10.0.0.1", "ip6-node": "fd00::3"},
    ),
    "kubelet-cadvisor": (
        _kubelet_cadvisor(),
        {"node-1": {"cpu": 0.3, "memory": 0.25}, "node-2": {"cpu": 0.9, "memory": 0.25}},
        None,
    ),
}


def test_every_preset_has_a_case() -> None:
    assert set(CASES) == set(PRESETS)


@pytest.fixture
def backfilled(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[PrometheusServer]:
    series = CASES[request.param][0]
    data = backfill(str(tmp_path), openmetrics(series, time.time()))
    prom = PrometheusServer(str(tmp_path), "scrape_configs: []\n", data_dir=data)
    yield prom
    prom.stop()


@pytest.mark.parametrize("backfilled", list(CASES), indirect=True)
async def test_preset_yields_node_ratios(
    backfilled: PrometheusServer, start_loadext: StartLoadext, request: pytest.FixtureRequest
) -> None:
    preset = request.node.callspec.params["backfilled"]
    _, expected, addresses = CASES[preset]
    loadext = await start_loadext({"prometheus": {"url": backfilled.url}, "preset": preset, "refreshInterval": "200ms"})
    body: dict[str, Any] = full_nodes_request(addresses) if addresses else names_request(*expected)

    async def decided() -> bool:
        status, _reply = await loadext.post("filter", body)
        assert status == 200
        values = await loadext.node_values()
        got = {n: {s: round(v, 3) for s, v in values.get(n, {}).items()} for n in expected}
        assert got == expected
        return True

    await eventually(decided)
    hot = {n for n, v in expected.items() if v["cpu"] > 0.85}
    _, reply = await loadext.post("filter", body)
    assert set(reply["FailedAndUnresolvableNodes"]) == hot
    report = await loadext.explain()
    assert all(not s["unmatchedSeries"] and not s["unmappedNodes"] for s in report["signals"])
