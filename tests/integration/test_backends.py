"""loadext against the backends platform teams run, each a real server started here on
loopback: Prometheus with basic auth, Prometheus requiring a client certificate, an HA pair of
Prometheus servers with one stopped, VictoriaMetrics single-node, vmauth in front of it with a
bearer token and with basic auth, a vmauth that routes on the tenant header, and Thanos Query
over an HA pair with sidecars, one store down (those two built from their Go modules). Each
test reads its own gauges from the session's exporter (harness/inprocess.py live_config)."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest

from harness.certs import make_ca, make_cert
from harness.config import as_yaml
from harness.exporter import Exporter
from harness.inprocess import Loadext, StartLoadext, live_config, sees, set_load, signal_error
from harness.metrics_text import metric_value
from harness.prometheus import PrometheusServer, scrape_config
from harness.thanos import Query, Sidecar
from harness.victoria import VictoriaMetrics, VmAuth, built_vmauth
from harness.waiting import eventually
from loadext.commands.tables import format_explain

LOAD = {"cpu": {"n1": 0.4, "n2": 0.7}, "memory": {"n1": 0.2, "n2": 0.3}}
SEEN = {"n1": {"cpu": 0.4, "memory": 0.2}, "n2": {"cpu": 0.7, "memory": 0.3}}


def config_for(url: str | list[str], case: str, **prometheus: Any) -> dict[str, Any]:
    config = live_config(url if isinstance(url, str) else url[0], case)
    if not isinstance(url, str):
        del config["prometheus"]["url"]
        config["prometheus"]["urls"] = url
    config["prometheus"].update(prometheus)
    return config


def secret_file(tmp_path: Path, name: str, value: str) -> Path:
    path = tmp_path / name
    path.write_text(value + "\n")
    return path


async def start(start_loadext: StartLoadext, config: dict[str, Any], path: Path) -> Loadext:
    """A second loadext in one test: its own config file (the default one is the first's)."""
    await asyncio.to_thread(path.write_text, as_yaml(config))
    return await start_loadext(config, path=path)


@pytest.fixture
def backend_dir(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "backend"
    directory.mkdir()
    yield directory


async def test_prometheus_with_basic_auth_and_a_rotated_password(
    exporter: Exporter, start_loadext: StartLoadext, case: str, tmp_path: Path, backend_dir: Path
) -> None:
    password = "correct-horse-battery"
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
    set_load(exporter, case, LOAD["cpu"], LOAD["memory"])
    prom = await asyncio.to_thread(
        PrometheusServer,
        str(backend_dir),
        scrape_config(exporter.target),
        web_config=f"basic_auth_users:\n  sre: '{hashed}'\n",
        auth=("sre", password),
    )
    try:
        password_file = secret_file(tmp_path, "password", password)
        config = config_for(prom.url, case, basicAuth={"username": "sre", "passwordFile": str(password_file)})
        loadext = await start_loadext(config)
        await sees(loadext, SEEN)
        password_file.write_text("wrong-password-123\n")  # rotated to a wrong one: no reload needed
        error = await signal_error(loadext)
        assert error["kind"] == "auth"
        assert error["message"].startswith(f"401 unauthorized at {prom.url} (basic auth user 'sre')"), error
        explained = json.dumps(await loadext.explain())
        assert "wrong-password-123" not in explained and "correct-horse" not in explained
        assert metric_value(await loadext.metrics(), "loadext_prometheus_query_errors_total", error="auth") >= 1
        password_file.write_text(password + "\n")
        await sees(loadext, SEEN)

        async def recovered() -> bool:
            cpu = next(s for s in (await loadext.explain())["signals"] if s["name"] == "cpu")
            assert cpu["failingFor"] is None
            return True

        await eventually(recovered)
    finally:
        prom.stop()


async def test_prometheus_requiring_a_client_certificate_whatever_the_environment_says(
    exporter: Exporter,
    start_loadext: StartLoadext,
    case: str,
    tmp_path: Path,
    backend_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ca, other_ca = make_ca(tmp_path, "ca"), make_ca(tmp_path, "other-ca")
    server = make_cert(tmp_path, ca, "server", san="DNS:prometheus.monitoring.svc")
    client = make_cert(tmp_path, ca, "client")
    web = (
        "tls_server_config:\n"
        f"  cert_file: {server[0]}\n  key_file: {server[1]}\n"
        f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {ca[0]}\n"
    )
    harness_tls = ssl.create_default_context(cafile=str(ca[0]))
    harness_tls.check_hostname = False
    harness_tls.load_cert_chain(str(client[0]), str(client[1]))
    set_load(exporter, case, LOAD["cpu"], LOAD["memory"])
    prom = await asyncio.to_thread(
        PrometheusServer, str(backend_dir), scrape_config(exporter.target), web_config=web, tls=harness_tls
    )
    # An environment whose CA bundle would fail the server: caFile must win (it once did not).
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(other_ca[0]))
    monkeypatch.setenv("CURL_CA_BUNDLE", str(other_ca[0]))
    try:
        tls = {"caFile": str(ca[0]), "serverName": "prometheus.monitoring.svc"}
        config = config_for(prom.url, case, certFile=str(client[0]), keyFile=str(client[1]), **tls)
        loadext = await start_loadext(config)
        await sees(loadext, SEEN)
        without = await start(start_loadext, config_for(prom.url, case, **tls), tmp_path / "without.yaml")
        error = await signal_error(without)
        assert error["kind"] == "connection" and prom.url in error["message"], error
    finally:
        prom.stop()


async def test_an_ha_pair_with_one_stopped_changes_no_decision(
    exporter: Exporter, start_loadext: StartLoadext, case: str, tmp_path: Path
) -> None:
    set_load(exporter, case, LOAD["cpu"], LOAD["memory"])
    dirs = [tmp_path / "a", tmp_path / "b"]
    for directory in dirs:
        directory.mkdir()
    first, second = await asyncio.gather(
        *(asyncio.to_thread(PrometheusServer, str(d), scrape_config(exporter.target)) for d in dirs)
    )
    try:
        loadext = await start_loadext(config_for([first.url, second.url], case))
        await sees(loadext, SEEN)
        await asyncio.to_thread(first.stop)

        async def failed_over() -> dict[str, Any]:
            report = await loadext.explain()
            endpoints = {e["url"]: e for e in report["prometheus"]["endpoints"]}
            assert endpoints[first.url]["up"] is False and endpoints[second.url]["up"] is True, endpoints
            return report

        report = await eventually(failed_over)
        assert not report["degraded"]
        assert all(s["failingFor"] is None for s in report["signals"]), report["signals"]
        assert report["prometheus"]["endpoints"][0]["lastError"].startswith("connection refused to " + first.url)
        assert f"prometheus endpoint {first.url} is down: connection refused" in format_explain(report)
        await sees(loadext, SEEN)
        metrics = await loadext.metrics()
        assert metric_value(metrics, "loadext_prometheus_endpoint_up", url=first.url) == 0
        assert metric_value(metrics, "loadext_prometheus_endpoint_up", url=second.url) == 1
        assert metric_value(metrics, "loadext_degraded") == 0
    finally:
        first.stop()
        second.stop()


async def test_victoria_metrics_and_vmauth_with_bearer_and_basic_auth(
    exporter: Exporter,
    start_loadext: StartLoadext,
    case: str,
    tmp_path: Path,
    backend_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="loadext")
    set_load(exporter, case, LOAD["cpu"], LOAD["memory"])
    victoria = await asyncio.to_thread(VictoriaMetrics, str(backend_dir), scrape_config(exporter.target))
    await asyncio.to_thread(victoria.wait_scraped)
    token = "vmauth-token-5f3c9a"
    users = (
        f"users:\n  - bearer_token: {token}\n    url_prefix: {victoria.url}\n"
        f"  - username: sre\n    password: vm-password-77\n    url_prefix: {victoria.url}\n"
    )
    proxy = await asyncio.to_thread(VmAuth, str(backend_dir), users)
    try:
        direct = await start(start_loadext, config_for(victoria.url, case), tmp_path / "direct.yaml")
        await sees(direct, SEEN)
        token_file = secret_file(tmp_path, "token", token)
        bearer = await start(
            start_loadext, config_for(proxy.url, case, bearerTokenFile=str(token_file)), tmp_path / "bearer.yaml"
        )
        await sees(bearer, SEEN)
        basic = {"username": "sre", "passwordFile": str(secret_file(tmp_path, "password", "vm-password-77"))}
        await sees(
            await start_loadext(config_for(proxy.url, case, basicAuth=basic), path=tmp_path / "basic.yaml"), SEEN
        )
        # vmauth answers an unknown token with a 400 that repeats it: not a query error, and
        # the token is redacted wherever loadext shows the message.
        token_file.write_text("not-the-token-1234\n")
        error = await signal_error(bearer)
        assert error["kind"] == "http_other", error
        assert error["message"].startswith(f"400 bad request from {proxy.url} (not a query error)"), error
        assert "not-the-token-1234" not in json.dumps(await bearer.explain())
        assert "not-the-token-1234" not in caplog.text and "<redacted>" in caplog.text
    finally:
        proxy.stop()
        victoria.stop()


@pytest.mark.go_built
async def test_a_gateway_that_routes_on_the_tenant_header(
    exporter: Exporter, start_loadext: StartLoadext, case: str, tmp_path: Path, backend_dir: Path
) -> None:
    """vmauth as Mimir's and Cortex's gateways behave: without X-Scope-OrgID no route at all;
    the tenant comes from `headers`, or from a file with `headerFiles`."""
    set_load(exporter, case, LOAD["cpu"], LOAD["memory"])
    binary = await asyncio.to_thread(built_vmauth)
    victoria = await asyncio.to_thread(VictoriaMetrics, str(backend_dir), scrape_config(exporter.target))
    await asyncio.to_thread(victoria.wait_scraped)
    routes = (
        "unauthorized_user:\n  url_map:\n    - src_paths: ['/api/v1/.+']\n"
        f"      src_headers: ['X-Scope-OrgID: team-a']\n      url_prefix: {victoria.url}\n"
    )
    gateway = await asyncio.to_thread(VmAuth, str(backend_dir), routes, binary)
    try:
        untenanted = await start(start_loadext, config_for(gateway.url, case), tmp_path / "none.yaml")
        error = await signal_error(untenanted)
        assert error["kind"] == "http_other" and "missing route" in error["message"], error
        tenant = {"X-Scope-OrgID": "team-a"}
        await sees(await start(start_loadext, config_for(gateway.url, case, headers=tenant), tmp_path / "h.yaml"), SEEN)
        from_file = {"X-Scope-OrgID": str(secret_file(tmp_path, "tenant", "team-a"))}
        config = config_for(gateway.url, case, headerFiles=from_file)
        await sees(await start(start_loadext, config, tmp_path / "hf.yaml"), SEEN)
    finally:
        gateway.stop()
        victoria.stop()


@pytest.mark.go_built
async def test_thanos_query_with_a_store_down_answers_partial_and_loadext_says_so(
    exporter: Exporter, start_loadext: StartLoadext, case: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Thanos Query deduplicating an HA pair of Prometheus, each behind its sidecar (all built
    from Thanos' Go module). One sidecar stopped: Thanos answers from the other, with a warning
    that a store is missing. loadext uses the data and marks the signal partial (explain, the
    metric, one log line); with partialResponse: fail, reloaded live, it refuses the reply."""
    set_load(exporter, case, LOAD["cpu"], LOAD["memory"])
    sidecars: list[Sidecar] = []
    servers: list[Any] = []
    try:
        for replica in ("a", "b"):
            directory = tmp_path / replica
            directory.mkdir()
            labelled = scrape_config(exporter.target).replace(
                "global: {", f"global: {{external_labels: {{replica: {replica}}}, ", 1
            )
            prom = await asyncio.to_thread(PrometheusServer, str(directory), labelled, str(directory / "data"))
            servers.append(prom)
            sidecar = await asyncio.to_thread(
                Sidecar, str(directory), f"sidecar-{replica}", prom, str(directory / "data")
            )
            sidecars.append(sidecar)
            servers.append(sidecar)
        query = await asyncio.to_thread(Query, str(tmp_path), [s.grpc for s in sidecars])
        servers.append(query)

        async def both_stores_up() -> bool:
            return await asyncio.to_thread(query.healthy_stores) == 2

        await eventually(both_stores_up, within=30)
        caplog.set_level(logging.WARNING, logger="loadext")
        config = config_for(query.url, case, queryParams={"dedup": "true", "partial_response": "true"})
        loadext = await start_loadext(config)
        await sees(loadext, SEEN)  # deduplicated: one series per node, not one per replica
        assert metric_value(await loadext.metrics(), "loadext_signal_partial", signal="cpu") == 0
        await asyncio.to_thread(sidecars[1].stop)

        async def partial() -> str:
            cpu = next(s for s in (await loadext.explain())["signals"] if s["name"] == "cpu")
            assert cpu["partial"] and cpu["failingFor"] is None, cpu
            warning: str = cpu["partial"]
            return warning

        warning = await eventually(partial)
        assert sidecars[1].grpc in warning, warning  # Thanos names the store that did not answer
        await sees(loadext, SEEN)  # the surviving replica's data, used
        assert metric_value(await loadext.metrics(), "loadext_signal_partial", signal="cpu") == 1
        assert "cpu: partial data (" in format_explain(await loadext.explain())
        assert caplog.text.count("prometheus answered signal cpu with partial data") == 1
        config["prometheus"]["partialResponse"] = "fail"
        await asyncio.to_thread(loadext.config_path.write_text, as_yaml(config))
        error = await signal_error(loadext)
        assert error["kind"] == "partial" and error["message"].startswith(f"{query.url} answered with partial data")
    finally:
        for server in reversed(servers):
            await asyncio.to_thread(server.stop)
