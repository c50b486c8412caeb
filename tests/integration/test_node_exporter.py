"""The node-exporter presets on the real node_exporter's series for this machine, scraped by the
real Prometheus: the plain `node-exporter-by-ip` preset (instance 127.0.0.1:PORT matched to a
Node's InternalIP) and `kube-prometheus-stack` (node-mixin recording rules, joined to the node
name through kube-state-metrics' kube_pod_info), with the mapping check clean for both."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.inprocess import StartLoadext
from harness.node_exporter import STACK_RULES, KubeStateMetrics, NodeExporter, stack_scrape_config
from harness.prometheus import PrometheusServer
from harness.waiting import eventually
from harness.wire import full_nodes_request, names_request
from loadext.config import parse_config
from loadext.config.presets import PRESETS

NODE, IP = "this-host", "127.0.0.1"


@pytest.fixture(scope="module")
def node_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    workdir = tmp_path_factory.mktemp("node-exporter")
    exporter = NodeExporter(workdir)
    ksm = KubeStateMetrics()
    ksm.add_node(NODE, IP, cpu=2, memory_bytes=24e9)
    ksm.add_pod("monitoring", "kps-prometheus-node-exporter-x7k2p", NODE, IP, owner="DaemonSet")
    rules = workdir / "rules.yaml"
    rules.write_text(STACK_RULES)
    prom = PrometheusServer(str(workdir), stack_scrape_config(exporter.target, ksm.target, str(rules)))
    try:
        # rate() needs two scrapes; the recording rules one evaluation after that.
        prom.wait_for(
            "instance:node_cpu_utilisation:rate5m * on (namespace, pod) group_left (node) "
            "node_namespace_pod:kube_pod_info:",
            lambda r: len(r) == 1,
            timeout=30,
        )
        yield prom
    finally:
        prom.stop()
        exporter.stop()
        ksm.close()


def memory_in_use() -> float:
    meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return 1 - int(meminfo["MemAvailable"].split()[0]) / int(meminfo["MemTotal"].split()[0])


def evaluated(prom: PrometheusServer, expr: str) -> float:
    result = prom.query(expr)
    assert len(result) == 1, result
    return float(result[0]["value"][1])


async def decided_values(start_loadext: StartLoadext, prom: PrometheusServer, preset: str, body: dict[str, Any]) -> Any:
    loadext = await start_loadext({"prometheus": {"url": prom.url}, "preset": preset, "refreshInterval": "200ms"})

    async def values() -> dict[str, float]:
        status, _ = await loadext.post("filter", body)
        assert status == 200
        report = await loadext.explain()
        row = next(r for r in report["nodes"] if r["node"] == NODE)
        got = {signal: v["value"] for signal, v in row["signals"].items()}
        assert set(got) == {"cpu", "memory"} and None not in got.values()
        return got

    return await eventually(values, within=20), await loadext.explain()


@pytest.mark.parametrize("preset", ["node-exporter-by-ip", "kube-prometheus-stack"])
async def test_preset_on_real_node_exporter_series(
    node_prometheus: PrometheusServer, start_loadext: StartLoadext, preset: str
) -> None:
    body = full_nodes_request({NODE: IP}) if preset == "node-exporter-by-ip" else names_request(NODE)
    values, report = await decided_values(start_loadext, node_prometheus, preset, body)
    # What loadext holds is what the preset's query gives on Prometheus itself (CPU moves while
    # the suite runs, so within a margin); memory agrees with the machine's own meminfo.
    for signal, query in PRESETS[preset].queries.items():
        assert values[signal] == pytest.approx(evaluated(node_prometheus, query), abs=0.15), signal
    assert values["memory"] == pytest.approx(memory_in_use(), abs=0.1)
    assert 0 <= values["cpu"] <= 1
    for signal in report["signals"]:  # the identity mapping found this node, and nothing else
        assert signal["unmappedNodes"] == [] and signal["unmatchedSeries"] == [], signal


async def test_an_address_no_node_has_is_reported_unmatched(
    node_prometheus: PrometheusServer, start_loadext: StartLoadext
) -> None:
    """Wrong identity (a Node whose InternalIP is not the exporter's): the mapping check says so."""
    loadext = await start_loadext(
        {"prometheus": {"url": node_prometheus.url}, "preset": "node-exporter-by-ip", "refreshInterval": "200ms"}
    )

    async def reported() -> bool:
        await loadext.post("filter", full_nodes_request({"elsewhere": "10.9.9.9"}))
        signals = {s["name"]: s for s in (await loadext.explain())["signals"]}
        assert signals["cpu"]["unmappedNodes"] == ["elsewhere"]
        assert signals["cpu"]["unmatchedSeries"] == [IP]  # instance 127.0.0.1:PORT, by address
        return True

    await eventually(reported, within=20)


@pytest.mark.parametrize("preset", ["node-exporter-by-ip", "kube-prometheus-stack"])
async def test_pressure_signals_are_off_until_named_then_read_from_the_real_psi_collector(
    node_prometheus: PrometheusServer, start_loadext: StartLoadext, preset: str
) -> None:
    """This machine has /proc/pressure, so the real node_exporter serves PSI: a config that
    names cpu_pressure and memory_pressure gets each node's share of time waiting, 0..1."""
    assert set(PRESETS[preset].optional) == {"cpu_pressure", "memory_pressure"}
    config = {
        "prometheus": {"url": node_prometheus.url},
        "preset": preset,
        "refreshInterval": "200ms",
        "signals": [{"name": "cpu_pressure", "threshold": 0.9}, {"name": "memory_pressure"}],
    }
    loadext = await start_loadext(config)
    body = full_nodes_request({NODE: IP}) if preset == "node-exporter-by-ip" else names_request(NODE)

    async def values() -> dict[str, float]:
        await loadext.post("filter", body)
        row = next(r for r in (await loadext.explain())["nodes"] if r["node"] == NODE)
        got = {signal: v["value"] for signal, v in row["signals"].items()}
        assert set(got) == {"cpu", "memory", "cpu_pressure", "memory_pressure"}, got
        return got

    got = await eventually(values, within=30)
    for signal in ("cpu_pressure", "memory_pressure"):
        assert 0 <= got[signal] <= 1
        expected = evaluated(node_prometheus, PRESETS[preset].optional[signal])
        assert got[signal] == pytest.approx(expected, abs=0.15), signal
    plain = {"prometheus": {"url": node_prometheus.url}, "preset": preset}
    assert [s.name for s in parse_config(yaml.safe_dump(plain)).signals] == ["cpu", "memory"]  # off by default
