"""loadext built in-process exactly as `loadext serve` builds it (loadext.app.App), served on
loopback by aiohttp's test client: with its real refresher against a real Prometheus, or with
fixed values and no background jobs for tests about the verbs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from aiohttp.test_utils import TestClient

from harness.config import as_yaml, loadext_config, stored_config
from harness.exporter import Exporter
from harness.waiting import eventually
from loadext.app import App
from loadext.config.serving import ConfigSource, Limits
from loadext.core.snapshot import SignalValues

STORED_CONFIG = stored_config()
HERD_GUARDED_CONFIG = stored_config(herdGuard={"enabled": True, "window": "5m"})  # the guard on, learning on
STORED_CPU = {"ceph1": 0.3, "ceph2": 0.95, "ceph3": 0.1}
STORED_MEMORY = {"ceph1": 0.5, "ceph2": 0.5, "ceph3": 0.5}


def live_config(prom_url: str, case: str, **overrides: Any) -> dict[str, Any]:
    """Signals read gauges the test sets on the exporter: loadext_test_<signal>{case, node}."""
    return loadext_config(
        prom_url, f'loadext_test_cpu{{case="{case}"}}', f'loadext_test_memory{{case="{case}"}}', **overrides
    )


def set_load(exporter: Exporter, case: str, cpu: dict[str, float], memory: dict[str, float] | None = None) -> None:
    for node, value in cpu.items():
        exporter.set_gauge("loadext_test_cpu", value, case=case, node=node)
    for node, value in (memory or {}).items():
        exporter.set_gauge("loadext_test_memory", value, case=case, node=node)


def stored_app(
    config_text: str = STORED_CONFIG,
    cpu: dict[str, float] = STORED_CPU,
    memory: dict[str, float] = STORED_MEMORY,
    limits: Limits | None = None,
) -> App:
    """An App whose snapshot holds these values, fresh, published as a refresh would: for
    tests about the verbs, not the data path (serve it with background=False)."""
    app = App(config_text, limits=limits)
    publish(app, cpu, memory)
    return app


def publish(app: App, cpu: dict[str, float], memory: dict[str, float]) -> None:
    """A refresh round with these values, published as the refresher publishes one."""
    now = time.time()
    app.cluster.refreshed([SignalValues("cpu", cpu, now), SignalValues("memory", memory, now)])


async def client_for(aiohttp_client: Any, app: App, path_prefix: str = "/") -> TestClient[Any, Any]:
    client: TestClient[Any, Any] = await aiohttp_client(app.web_app(path_prefix, background=False))
    return client


async def post(client: TestClient[Any, Any], path: str, body: bytes) -> tuple[int, Any]:
    reply = await client.post(path, data=body, headers={"Content-Type": "application/json"})
    assert reply.content_type == "application/json"
    return reply.status, orjson.loads(await reply.read())


@dataclass
class Loadext:
    """A running in-process loadext and the config file it watches."""

    client: TestClient[Any, Any]
    app: App
    config_path: Path

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


StartLoadext = Callable[..., Awaitable[Loadext]]  # the start_loadext fixture of tests/conftest.py


async def start_loadext(
    aiohttp_client: Any,
    config: dict[str, Any] | str,
    path: Path,
    reload_interval: float = 0.1,
    write: bool = True,
    path_prefix: str = "/",
) -> Loadext:
    """loadext with its real refresher and a watcher on the config file at `path`."""
    text = config if isinstance(config, str) else as_yaml(config)
    if write:
        await asyncio.to_thread(path.write_text, text)
    app = App(text, str(path), source=ConfigSource(file=str(path), reload_interval=reload_interval))
    client = await aiohttp_client(app.web_app(path_prefix))
    return Loadext(client, app, path)


async def signal_error(loadext: Loadext, signal: str = "cpu") -> dict[str, Any]:
    """The signal's last error, once it has one (from /explain)."""

    async def failing() -> dict[str, Any]:
        found = next(s for s in (await loadext.explain())["signals"] if s["name"] == signal)
        assert found["failingFor"] is not None, found
        error: dict[str, Any] = found["lastError"]
        return error

    result: dict[str, Any] = await eventually(failing)
    return result


async def sees(loadext: Loadext, expected: dict[str, dict[str, float]]) -> None:
    """Wait until loadext's snapshot holds exactly these values for these nodes."""

    async def check() -> bool:
        values = await loadext.node_values()
        assert {n: values.get(n) for n in expected} == expected
        return True

    await eventually(check)
