"""Shared fixtures: one real Prometheus per session scraping an exporter the tests control,
a fault proxy in front of it, and loadext servers started in-process on loopback."""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from harness import inprocess
from harness.exporter import Exporter
from harness.faultproxy import FaultProxy
from harness.inprocess import Loadext, StartLoadext
from harness.prometheus import PROMETHEUS, PrometheusServer, scrape_config

pytest_plugins = ("harness.cluster",)

# Property tests: a few hundred examples each in CI; scripts/fuzz.sh runs the "fuzz" profile.
_PROPERTY = {"deadline": None, "suppress_health_check": [HealthCheck.function_scoped_fixture]}
settings.register_profile("ci", max_examples=300, **_PROPERTY)
settings.register_profile("fuzz", max_examples=int(os.environ.get("LOADEXT_FUZZ_EXAMPLES", "20000")), **_PROPERTY)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


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


@pytest.fixture
async def start_loadext(aiohttp_client: Any, tmp_path: Path) -> AsyncIterator[StartLoadext]:
    """Start loadext in-process (loadext.app.App) with its real refresher and config watcher.
    Each one watches a file of its own: two sharing one would reload each other's config."""
    started = 0

    async def start(
        config: dict[str, Any] | str, reload_interval: float = 0.1, path: Path | None = None, path_prefix: str = "/"
    ) -> Loadext:
        nonlocal started
        started += 1
        target = path or tmp_path / f"config-{started}.yaml"
        return await inprocess.start_loadext(
            aiohttp_client, config, target, reload_interval, write=path is None, path_prefix=path_prefix
        )

    yield start
