"""Every failure says why, through the public surfaces an SRE meets: the CLI's exit codes and
one-line reasons (never a traceback), check-config's PromQL and live checks, /explain and the
metrics while Prometheus is unreachable, and JSON errors with their reason in the log."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.exporter import Exporter
from harness.faultproxy import FaultProxy
from harness.inprocess import StartLoadext, live_config, set_load
from harness.metrics_text import metric_value
from harness.prometheus import PrometheusServer, free_port
from harness.waiting import eventually
from harness.wire import names_request
from loadext.commands.tables import format_explain
from loadext.core.signal_health import SignalHealth

EXIT_INVALID, EXIT_PROMETHEUS = 1, 3


def loadext(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loadext", *args], capture_output=True, text=True, timeout=60)


def one_line_reason(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert lines, result.stderr
    return lines[0]


def write(tmp_path: Path, config: dict[str, Any] | str, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(config if isinstance(config, str) else yaml.safe_dump(config, sort_keys=False))
    return path


def unreachable() -> str:
    return f"http://127.0.0.1:{free_port()}"


# --- check-config ---------------------------------------------------------------------------


def test_check_config_rejects_promql_that_does_not_parse_by_signal_line_and_column(tmp_path: Path) -> None:
    config = write(
        tmp_path,
        "prometheus: {url: 'http://prometheus:9090'}\n"
        "signals:\n"
        "  - name: cpu\n"
        "    query: rate(node_cpu_seconds_total[5m]\n"
        "    threshold: 0.8\n",
    )
    result = loadext("check-config", str(config))
    assert result.returncode == EXIT_INVALID
    assert "line 4, column 12: signals[cpu].query: PromQL does not parse: unclosed left parenthesis" in result.stderr


def test_check_config_against_prometheus_reports_series_identity_and_range(
    prometheus: PrometheusServer, exporter: Exporter, case: str, tmp_path: Path
) -> None:
    set_load(exporter, case, {"a": 0.2, "b": 0.95}, {"a": 0.5, "b": 0.5})
    prometheus.wait_for(f'loadext_test_cpu{{case="{case}"}}', lambda r: len(r) == 2)
    good = write(tmp_path, live_config("http://configured.invalid:9090", case))
    result = loadext("check-config", str(good), "--prometheus", prometheus.url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "  cpu: 2 series, 2 with label 'node', values 0.20..0.95" in result.stdout

    percent = live_config(prometheus.url, case)
    percent["signals"][0]["query"] = f'loadext_test_cpu{{case="{case}"}} * 100'
    result = loadext("check-config", str(write(tmp_path, percent, "percent.yaml")), "--prometheus", prometheus.url)
    assert result.returncode == EXIT_INVALID
    assert "values up to 95 look like percent (0-100); loadext needs a 0..1 ratio" in result.stdout

    wrong_label = live_config(prometheus.url, case, nodeIdentity={"label": "hostname", "kind": "name"})
    result = loadext("check-config", str(write(tmp_path, wrong_label, "label.yaml")), "--prometheus", prometheus.url)
    assert result.returncode == EXIT_INVALID
    assert "cpu: 2 series, 0 with label 'hostname': no series has the label 'hostname': check nodeIdentity" in (
        result.stdout
    )

    nothing = write(tmp_path, live_config(prometheus.url, "no_such_case"), "nothing.yaml")
    result = loadext("check-config", str(nothing), "--prometheus", prometheus.url)
    assert (
        result.returncode == EXIT_INVALID and "cpu: 0 series, 0 with label 'node': returned no series" in result.stdout
    )

    result = loadext("check-config", str(good), "--prometheus", unreachable())
    assert result.returncode == EXIT_PROMETHEUS
    assert "cpu: query failed (connection)" in result.stdout


def test_check_config_unreadable_or_empty_input_is_one_line(tmp_path: Path) -> None:
    missing = loadext("check-config", str(tmp_path / "absent.yaml"))
    assert missing.returncode == EXIT_INVALID and "No such file" in one_line_reason(missing)
    empty = loadext("check-config", str(write(tmp_path, "", "empty.yaml")))
    assert empty.returncode == EXIT_INVALID
    assert "<document>: the file is empty" in empty.stderr and "Traceback" not in empty.stderr


def test_global_options_go_before_or_after_the_command_and_help_has_examples(tmp_path: Path) -> None:
    config = write(tmp_path, live_config("http://prometheus:9090", "x"))
    after = loadext("check-config", str(config), "--log-level", "debug", "--log-format", "json")
    before = loadext("--log-level", "debug", "check-config", str(config))
    assert after.returncode == before.returncode == 0, after.stderr + before.stderr
    top, sub = loadext("--help"), loadext("check-config", "--help")
    assert "examples:" in top.stdout and "exit codes: 0 ok; 1 invalid config" in top.stdout
    assert "the YAML config file" in sub.stdout and "examples:" in sub.stdout


# --- explain and replay ----------------------------------------------------------------------


def test_explain_exits_3_with_the_reason_when_prometheus_is_down_or_the_query_bad(
    prometheus: PrometheusServer, tmp_path: Path
) -> None:
    down = loadext("explain", "--config", str(write(tmp_path, live_config(unreachable(), "x"))))
    assert down.returncode == EXIT_PROMETHEUS
    assert "signal cpu: query failed (connection)" in one_line_reason(down)

    bad = live_config(prometheus.url, "x")
    bad["signals"][0]["query"] = "rate(up[5m]"
    result = loadext("explain", "--config", str(write(tmp_path, bad, "bad.yaml")))
    assert result.returncode == EXIT_PROMETHEUS
    reason = one_line_reason(result)
    assert "signal cpu: query failed (bad_query): HTTP 400: bad_data:" in reason and "parse error" in reason

    empty = loadext("explain", "--config", str(write(tmp_path, live_config(prometheus.url, "no_such_case"), "e.yaml")))
    assert empty.returncode == EXIT_PROMETHEUS
    assert "signal cpu: the query returned no series" in one_line_reason(empty)


def test_replay_exits_3_on_prometheus_down_a_bad_query_and_an_empty_range(
    prometheus: PrometheusServer, tmp_path: Path
) -> None:
    down = loadext("replay", "--config", str(write(tmp_path, live_config(unreachable(), "x"))), "--since", "5m")
    assert down.returncode == EXIT_PROMETHEUS and "(connection)" in one_line_reason(down)

    bad = live_config(prometheus.url, "x")
    bad["signals"][0]["query"] = "rate(up[5m]"
    result = loadext("replay", "--config", str(write(tmp_path, bad, "bad.yaml")), "--since", "5m", "--step", "30s")
    assert result.returncode == EXIT_PROMETHEUS and "(bad_query)" in one_line_reason(result)

    empty = live_config(prometheus.url, "no_such_case")
    result = loadext("replay", "--config", str(write(tmp_path, empty, "empty.yaml")), "--since", "5m", "--step", "30s")
    assert result.returncode == EXIT_PROMETHEUS
    assert "no samples for any signal of the candidate config" in one_line_reason(result)


# --- degraded mode that explains itself ------------------------------------------------------


async def test_explain_and_metrics_say_why_a_signal_has_no_data(
    proxy: FaultProxy, exporter: Exporter, start_loadext: StartLoadext, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "loadext")
    set_load(exporter, case, {"n1": 0.3}, {"n1": 0.3})
    loadext = await start_loadext(live_config(proxy.url, case, maxDataAge="1s"))
    await loadext.post("filter", names_request("n1"))

    async def has_data() -> bool:
        return bool((await loadext.node_values()).get("n1"))

    await eventually(has_data)
    caplog.clear()
    proxy.set("down")

    async def explained() -> dict[str, Any]:
        report = await loadext.explain()
        cpu = next(s for s in report["signals"] if s["name"] == "cpu")
        assert report["degraded"] and cpu["failingFor"] is not None
        assert cpu["lastError"]["kind"] == "connection" and cpu["lastError"]["message"]
        assert cpu["lastSuccess"] is not None
        return report

    report = await eventually(explained, within=15)
    table = format_explain(report)
    assert "DEGRADED" in table and "cpu: queries failing for" in table and "(connection)" in table
    assert "nodes without a series" not in table  # the mapping is not the cause
    assert metric_value(await loadext.metrics(), "loadext_prometheus_last_error_timestamp_seconds", signal="cpu") > 0
    messages = [r.getMessage() for r in caplog.records]
    assert sum("prometheus query for signal cpu failed (connection)" in m for m in messages) == 1
    assert not any("check nodeIdentity" in m for m in messages), messages

    proxy.set("pass")

    async def recovered() -> bool:
        cpu = next(s for s in (await loadext.explain())["signals"] if s["name"] == "cpu")
        return cpu["failingFor"] is None

    await eventually(recovered, within=15)
    assert any("prometheus query for signal cpu recovered after" in r.getMessage() for r in caplog.records)


def test_a_steady_failure_is_reminded_at_most_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    now = [1000.0]
    health = SignalHealth(lambda: now[0])
    caplog.set_level(logging.INFO, "loadext.sources.refresher")
    for _ in range(30):  # 30 failures, 5 s apart: 145 s of failing
        health.failed("cpu", "timeout", "no answer within 2s")
        now[0] += 5
    lines = [r.getMessage() for r in caplog.records]
    assert sum("failed (timeout)" in line for line in lines) == 1
    assert sum("still failing (timeout)" in line for line in lines) == 2  # at 60 s and 120 s
    health.failed("cpu", "connection", "refused")  # a different failure is news at once
    health.succeeded("cpu")
    lines = [r.getMessage() for r in caplog.records]
    assert any("failed (connection): refused" in line for line in lines)
    assert any("recovered after" in line for line in lines)


# --- HTTP errors -------------------------------------------------------------------------


async def test_every_http_error_is_json_and_logged_with_its_reason(
    prometheus: PrometheusServer, start_loadext: StartLoadext, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    loadext = await start_loadext(live_config(prometheus.url, case))
    client = loadext.client
    wrong_method = await client.get("/filter")
    assert wrong_method.status == 405
    assert json.loads(await wrong_method.read()) == {"error": "GET /filter: method not allowed, use POST"}
    assert (await client.head("/healthz")).status == 200  # every GET route answers HEAD too
    wrong_probe = await client.post("/healthz")
    assert wrong_probe.status == 405 and wrong_probe.headers["Allow"] == "GET, HEAD"
    unknown = await client.post("/filtre", data=b"{}")
    assert unknown.status == 404
    assert "no such endpoint" in (body := json.loads(await unknown.read()))["error"] and "POST /filter" in body["error"]

    status, reply = await loadext.post("filter", b"{not json")
    assert status == 400 and reply["error"].startswith("malformed JSON: ") and "JSON is malformed" not in reply["error"]
    logged = [r.getMessage() for r in caplog.records if r.name == "loadext.requests"]
    assert any("bad_request: malformed JSON" in line for line in logged), logged
    assert any("405" in r.getMessage() and "method not allowed" in r.getMessage() for r in caplog.records)
