"""What an SRE sees when the connection to Prometheus or the Kubernetes API is set up wrong:
one line that leads with the cause and names the setting, the documented exit code, no
traceback; and a credential that vanishes at run time is a counted query error, not a crash."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from harness.config import as_yaml
from harness.exporter import Exporter
from harness.inprocess import StartLoadext, live_config, sees, set_load
from harness.metrics_text import metric_value
from harness.prometheus import PrometheusServer, free_port
from harness.waiting import eventually

EXIT_INVALID, EXIT_USAGE, EXIT_PROMETHEUS, EXIT_KUBERNETES = 1, 2, 3, 4


def loadext(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loadext", *args], capture_output=True, text=True, timeout=60)


def the_line(result: subprocess.CompletedProcess[str]) -> str:
    """The first line that says what failed ("error: ..." or a config error), with no traceback
    and no library's retry chatter around it."""
    assert "Traceback" not in result.stderr and "Retrying" not in result.stderr, result.stderr
    lines = [line.strip() for line in result.stderr.splitlines()]
    return next(line for line in lines if line.startswith(("error:", "line ")) or ": line " in line)


def write(tmp_path: Path, config: dict[str, Any], name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def test_a_missing_credential_file_is_a_config_error_naming_the_setting(tmp_path: Path) -> None:
    config = live_config("http://127.0.0.1:9090", "x")
    config["prometheus"]["bearerTokenFile"] = str(tmp_path / "token")
    result = loadext("check-config", str(write(tmp_path, config)))
    assert result.returncode == EXIT_INVALID
    assert the_line(result).endswith(f"prometheus.bearerTokenFile: {tmp_path}/token: no such file")


def test_a_prometheus_url_without_a_scheme_says_to_write_one(tmp_path: Path) -> None:
    result = loadext(
        "check-config", str(write(tmp_path, live_config("http://p:9090", "x"))), "--prometheus", "127.0.0.1:19090"
    )
    assert result.returncode == EXIT_INVALID
    assert the_line(result) == "error: missing scheme: write http://127.0.0.1:19090 (or https://)"


def test_a_refused_connection_is_short_and_leads_with_the_cause(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = loadext("explain", "--config", str(write(tmp_path, live_config(url, "x"))))
    assert result.returncode == EXIT_PROMETHEUS
    line = the_line(result)
    assert line == f"error: signal cpu: query failed (connection): connection refused to {url}", line


def test_a_url_with_a_path_prefix_that_is_wrong_gets_the_base_url_hint(
    prometheus: PrometheusServer, tmp_path: Path
) -> None:
    result = loadext("explain", "--config", str(write(tmp_path, live_config(prometheus.url + "/prefix", "x"))))
    assert result.returncode == EXIT_PROMETHEUS
    assert the_line(result).startswith(
        f"error: signal cpu: query failed (http_4xx): 404 not found at {prometheus.url}/prefix/api/v1/query: "
        "is prometheus.url the API's base URL?"
    )


def test_kubeconfig_and_api_problems_are_one_line_with_exit_4(tmp_path: Path) -> None:
    config = str(write(tmp_path, live_config(f"http://127.0.0.1:{free_port()}", "x")))
    missing = loadext("explain", "--config", config, "--kubeconfig", str(tmp_path / "nope"))
    assert missing.returncode == EXIT_KUBERNETES
    assert the_line(missing) == f"error: --kubeconfig {tmp_path}/nope: no such file"
    port = free_port()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{port}'}}}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: t}}]\n"
    )
    unreachable = loadext("explain", "--config", config, "--kubeconfig", str(kubeconfig))
    assert unreachable.returncode == EXIT_KUBERNETES
    assert the_line(unreachable) == f"error: listing Nodes failed: connection refused to https://127.0.0.1:{port}"


def test_explain_with_address_identities_and_no_kubeconfig_says_it_needs_one(tmp_path: Path) -> None:
    config = live_config("http://127.0.0.1:9090", "x", preset="node-exporter-by-ip")
    del config["nodeIdentity"], config["signals"]
    result = loadext("explain", "--config", str(write(tmp_path, config)))
    assert result.returncode == EXIT_USAGE
    assert the_line(result).startswith("error: nodeIdentity kind 'address' matches series to Nodes by their IPs")
    assert "give --kubeconfig" in the_line(result)


async def test_a_token_file_that_vanishes_is_a_counted_query_error_and_loadext_stays_ready(
    prometheus: PrometheusServer, exporter: Exporter, start_loadext: StartLoadext, case: str, tmp_path: Path
) -> None:
    set_load(exporter, case, {"n1": 0.3}, {"n1": 0.2})
    token = tmp_path / "token"
    token.write_text("t0ken-value\n")
    config = live_config(prometheus.url, case)
    config["prometheus"]["bearerTokenFile"] = str(token)
    loadext_ = await start_loadext(as_yaml(config))
    await sees(loadext_, {"n1": {"cpu": 0.3, "memory": 0.2}})
    token.unlink()

    async def failing() -> dict[str, Any]:
        cpu = next(s for s in (await loadext_.explain())["signals"] if s["name"] == "cpu")
        assert cpu["lastError"] is not None and cpu["failingFor"] is not None
        error: dict[str, Any] = cpu["lastError"]
        return error

    error = await eventually(failing)
    assert error == {**error, "kind": "credentials", "message": f"prometheus.bearerTokenFile: {token}: no such file"}
    assert (
        metric_value(
            await loadext_.metrics(), "loadext_prometheus_query_errors_total", signal="cpu", error="credentials"
        )
        >= 1
    )
    assert (await loadext_.client.get("/readyz")).status == 200
