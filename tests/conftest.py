"""Shared fixtures: one real Prometheus per session scraping an exporter the tests control,
a fault proxy in front of it, and loadext servers started in-process on loopback."""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from aiohttp.test_utils import TestClient
from hypothesis import HealthCheck, settings

from harness.exporter import Exporter
from harness.faultproxy import FaultProxy
from harness.prometheus import PROMETHEUS, PrometheusServer, scrape_config
from loadext.config import parse_config
from loadext.extender import Extender
from loadext.refresher import Refresher
from loadext.reload import ConfigFileWatcher, ConfigReloader
from loadext.server import Runtime, create_app
from loadext.telemetry import Telemetry

FIXTURES = Path(__file__).parent / "fixtures"
pytest_plugins = ("tests.cluster",)

# Property tests: a few hundred examples each in CI; scripts/fuzz.sh runs the "fuzz" profile.
_PROPERTY = {"deadline": None, "suppress_health_check": [HealthCheck.function_scoped_fixture]}
settings.register_profile("ci", max_examples=300, **_PROPERTY)
settings.register_profile("fuzz", max_examples=int(os.environ.get("LOADEXT_FUZZ_EXAMPLES", "20000")), **_PROPERTY)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def fixture_bytes(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


@pytest.fixture(scope="session")
def exporter() -> Iterator[Exporter]:
    exp = Exporter()
    yield exp
    exp.close()


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory: pytest.TempPathFactory, exporter: Exporter) -> Iterator[PrometheusServer]:
    if not os.path.exists(PROMETHEUS):
        pytest.fail("the Debian package 'prometheus' is required (.ci/run installs it)")
    exporter.set_gauge("fixture_ready", 1)
    prom = PrometheusServer(str(tmp_path_factory.mktemp("prom")), scrape_config(exporter.target))
    try:
        prom.wait_for("fixture_ready", lambda r: len(r) == 1)  # the first scrape takes ~6 s, once
        yield prom
    finally:
        prom.stop()


@pytest.fixture(scope="session")
def proxy(prometheus: PrometheusServer) -> Iterator[FaultProxy]:
    fault_proxy = FaultProxy(prometheus.url)
    yield fault_proxy
    fault_proxy.close()


@pytest.fixture(autouse=True)
def _reset_proxy(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "proxy" in request.fixturenames:
        request.getfixturevalue("proxy").set("pass")


@pytest.fixture
def case(request: pytest.FixtureRequest) -> str:
    """A label value unique to the test, so tests sharing the exporter never see each other."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", request.node.name)[:60]


def live_config(prom_url: str, case: str, **overrides: Any) -> dict[str, Any]:
    """Signals read gauges the test sets on the exporter: loadext_test_<signal>{case, node}."""
    config: dict[str, Any] = {
        "prometheus": {"url": prom_url, "timeout": "500ms"},
        "refreshInterval": "200ms",
        "maxDataAge": "30s",
        "nodeIdentity": {"label": "node", "kind": "name"},
        "signals": [
            {"name": "cpu", "query": f'loadext_test_cpu{{case="{case}"}}', "threshold": 0.8, "weight": 1},
            {
                "name": "memory",
                "query": f'loadext_test_memory{{case="{case}"}}',
                "threshold": 0.9,
                "weight": 1,
            },
        ],
    }
    config.update(overrides)
    return config


@dataclass
class Loadext:
    client: TestClient[Any, Any]
    extender: Extender
    refresher: Refresher
    config_path: Path
    watcher: ConfigFileWatcher

    async def post(self, verb: str, body: bytes | dict[str, Any]) -> tuple[int, Any]:
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        reply = await self.client.post(f"/{verb}", data=data, headers={"Content-Type": "application/json"})
        return reply.status, orjson.loads(await reply.read())

    async def explain(self) -> dict[str, Any]:
        reply = await self.client.get("/explain")
        assert reply.status == 200
        result: dict[str, Any] = orjson.loads(await reply.read())
        return result

    async def metrics(self) -> str:
        reply = await self.client.get("/metrics")
        return await reply.text()

    async def node_values(self) -> dict[str, dict[str, float]]:
        report = await self.explain()
        return {row["node"]: {s: v["value"] for s, v in row["signals"].items()} for row in report["nodes"]}


StartLoadext = Callable[..., Awaitable[Loadext]]


@pytest.fixture
async def start_loadext(aiohttp_client: Any, tmp_path: Path) -> AsyncIterator[StartLoadext]:
    """Start loadext in-process with its real refresher and config watcher on loopback."""

    async def start(
        config: dict[str, Any] | str, reload_interval: float = 0.1, path: Path | None = None, **app_args: Any
    ) -> Loadext:
        text = config if isinstance(config, str) else yaml.safe_dump(config)
        if path is None:
            path = tmp_path / "config.yaml"
            path.write_text(text)
        telemetry = Telemetry()
        extender = Extender(parse_config(text), telemetry)
        refresher = Refresher(extender)

        def apply(new_config: Any) -> None:
            extender.apply_config(new_config)
            refresher.poke()

        watcher = ConfigFileWatcher(str(path), ConfigReloader(text, apply, telemetry), reload_interval)
        runtime = Runtime(extender=extender, refresher=refresher, config_watcher=watcher)
        client = await aiohttp_client(create_app(runtime, **app_args))
        return Loadext(client, extender, refresher, path, watcher)

    yield start


async def eventually(check: Callable[[], Awaitable[Any]], within: float = 10.0, interval: float = 0.05) -> Any:
    """Poll an async check until it returns a truthy value or raises no AssertionError."""
    deadline = time.monotonic() + within
    while True:
        try:
            result = await check()
            if result:
                return result
            last: Any = result
        except AssertionError as exc:
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within}s; last: {last}")
        await asyncio.sleep(interval)


def set_load(exporter: Exporter, case: str, cpu: dict[str, float], memory: dict[str, float] | None = None) -> None:
    for node, value in cpu.items():
        exporter.set_gauge("loadext_test_cpu", value, case=case, node=node)
    for node, value in (memory or {}).items():
        exporter.set_gauge("loadext_test_memory", value, case=case, node=node)


def names_request(*nodes: str) -> dict[str, Any]:
    request: dict[str, Any] = orjson.loads(fixture_bytes("filter-names.json"))
    request["NodeNames"] = list(nodes)
    return request


def full_nodes_request(nodes: dict[str, str]) -> dict[str, Any]:
    """A non-cache request whose Node objects carry the given InternalIPs."""
    request: dict[str, Any] = orjson.loads(fixture_bytes("filter-nodes.json"))
    template = request["Nodes"]["items"][0]
    items = []
    for name, ip in nodes.items():
        node = orjson.loads(orjson.dumps(template))
        node["metadata"]["name"] = name
        node["status"]["addresses"] = [
            {"type": "InternalIP", "address": ip},
            {"type": "Hostname", "address": name},
        ]
        items.append(node)
    request["Nodes"]["items"] = items
    return request


async def sees(loadext: Loadext, expected: dict[str, dict[str, float]]) -> None:
    """Wait until loadext's snapshot holds exactly these values for these nodes."""

    async def check() -> bool:
        values = await loadext.node_values()
        assert {n: values.get(n) for n in expected} == expected
        return True

    await eventually(check)


def metric_value(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0])) if "{" in line else {}
            if all(found.get(k) == v for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name}{labels} not in /metrics")
