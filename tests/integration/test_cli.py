"""The installed command line, as an SRE and a Deployment run it: serve, explain."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from harness.exporter import Exporter
from harness.inprocess import live_config, set_load
from harness.loadext import serve_argv, wait_ready
from harness.metrics_text import metric_if_present
from harness.prometheus import PrometheusServer, free_port
from harness.waiting import wait_until
from harness.wire import fixture_bytes


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_serve_answers_the_scheduler_and_stops_cleanly_on_sigterm(
    prometheus: PrometheusServer, exporter: Exporter, case: str, tmp_path: Path
) -> None:
    set_load(
        exporter,
        case,
        {"ceph1": 0.2, "ceph2": 0.95, "ceph3": 0.1},
        {"ceph1": 0.2, "ceph2": 0.2, "ceph3": 0.2},
    )
    prometheus.wait_for(f'loadext_test_cpu{{case="{case}"}}', lambda r: len(r) == 3)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(live_config(prometheus.url, case)))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        serve_argv(config, port, "--path-prefix", "/scheduler"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_ready(url, lambda: proc.poll() is None)
        request = urllib.request.Request(
            url + "/scheduler/filter",
            data=fixture_bytes("filter-names.json"),
            headers={"Content-Type": "application/json"},
        )
        deadline = time.monotonic() + 10
        while True:
            with urllib.request.urlopen(request, timeout=5) as reply:
                result = json.load(reply)
            if result["FailedAndUnresolvableNodes"] or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert result["NodeNames"] == ["ceph3", "ceph1"]
        assert result["FailedAndUnresolvableNodes"] == {"ceph2": "loadext: cpu above 80%"}
        status, metrics = get(url + "/metrics")
        assert status == 200 and b'loadext_requests_total{outcome="ok",verb="filter"}' in metrics
        assert get(url + "/healthz")[0] == 200
        status, body = get(url + "/explain?node=ceph2")
        assert status == 200 and json.loads(body)["nodes"][0]["reason"] == "loadext: cpu above 80%"
        why = subprocess.run(
            [sys.executable, "-m", "loadext", "explain", "--url", url, "--pod", "analytics/ingest-0"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert why.returncode == 0, why.stderr
        lines = why.stdout.splitlines()
        assert lines[0].startswith("filter for analytics/ingest-0")
        assert lines[1].split() == ["NODE", "CPU", "MEMORY", "POOL", "VERDICT", "SCORE", "REASON"]
        ceph2 = next(line for line in lines if line.startswith("ceph2"))
        assert ceph2.split()[1] == "95%/80%" and "reject" in ceph2 and ceph2.endswith("loadext: cpu above 80%")
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=20)[0].decode()
    assert proc.returncode == 0, output
    assert "serving on 127.0.0.1" in output


def test_readyz_waits_for_every_watchs_initial_list_not_only_the_first_refresh(
    prometheus: PrometheusServer, exporter: Exporter, case: str, tmp_path: Path
) -> None:
    """An API server that refuses: the refresh rounds run, but a replica whose Node watch never
    listed would decide without allocatable or pools, so it is not ready and says why."""
    set_load(exporter, case, {"n1": 0.2}, {"n1": 0.2})
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(live_config(prometheus.url, case)))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{free_port()}'}}}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: t}}]\n"
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = serve_argv(config, port, "--kubeconfig", str(kubeconfig), "--watch-nodes")
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:

        def refreshed_while_the_watch_fails() -> bool:
            assert proc.poll() is None, "loadext exited"
            try:
                status, text = get(url + "/metrics")
            except OSError:  # not listening yet
                return False
            metrics = text.decode()
            rounds = metric_if_present(metrics, "loadext_refresh_duration_seconds_count") or 0
            return (
                status == 200
                and rounds >= 1
                and metric_if_present(metrics, "loadext_kube_watch_healthy", resource="nodes") == 0
            )

        wait_until(refreshed_while_the_watch_fails, "no refresh round with the Node watch failing")
        assert get(url + "/readyz") == (503, b"waiting for the nodes watch's initial list\n")
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_explain_prints_the_why_not_table(
    prometheus: PrometheusServer, exporter: Exporter, case: str, tmp_path: Path
) -> None:
    set_load(exporter, case, {"hot-1": 0.93, "calm-2": 0.25}, {"hot-1": 0.5, "calm-2": 0.4})
    prometheus.wait_for(f'loadext_test_memory{{case="{case}"}}', lambda r: len(r) == 2)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(live_config(prometheus.url, case)))
    table = subprocess.run(
        [sys.executable, "-m", "loadext", "explain", "--config", str(config), "--node", "absent-3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["NODE", "CPU", "MEMORY", "VERDICT", "SCORE", "REASON"]
    rows = {line.split()[0]: line for line in lines[1:4]}
    assert rows["hot-1"].split()[1] == "93%" and "reject" in rows["hot-1"]
    assert rows["hot-1"].endswith("loadext: cpu above 80%")
    assert "pass" in rows["calm-2"] and rows["calm-2"].split()[-2:] == ["7", "-"]
    assert rows["absent-3"].split()[1:] == ["-", "-", "pass", "5", "-"]
    assert "absent-3" in table.stdout.split("nodes without a series:")[1]

    as_json = subprocess.run(
        [sys.executable, "-m", "loadext", "explain", "--config", str(config), "--output", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    report = json.loads(as_json.stdout)
    assert {n["node"]: n["verdict"] for n in report["nodes"]} == {"hot-1": "reject", "calm-2": "pass"}


CHECKED_CONFIG = 'prometheus: {url: "http://prometheus:9090"}\n'


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loadext", *args], capture_output=True, text=True, timeout=60)


def test_check_config_cli(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(CHECKED_CONFIG + "preset: kube-prometheus\n")
    result = run_cli("check-config", str(good))
    assert result.returncode == 0 and "ok (hash" in result.stdout

    bad = tmp_path / "bad.yaml"
    bad.write_text(CHECKED_CONFIG + "preset: kube-prometheus\nfailurePolicy: sometimes\n")
    result = run_cli("check-config", str(bad))
    assert result.returncode == 1
    assert "line 3: failurePolicy: must be one of open, closed; got 'sometimes'" in result.stderr


def test_help_lists_the_commands() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    for command in ("serve", "check-config", "explain"):
        assert command in result.stdout
