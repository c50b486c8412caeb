"""Logs: JSON lines on request, and no secret in any line."""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from harness.loadext import serve_argv, wait_ready
from harness.prometheus import free_port
from harness.wire import fixture_bytes
from loadext.logs import redact


def test_secrets_are_redacted() -> None:
    assert redact("Authorization: Bearer eyJhbGciOi.abc-def_ghi") == "Authorization: Bearer [redacted]"
    assert redact("GET http://admin:hunter2@prometheus:9090/api") == "GET http://admin:[redacted]@prometheus:9090/api"
    assert redact("http://prometheus:9090/api?x=1") == "http://prometheus:9090/api?x=1"


def test_serve_logs_json_lines(tmp_path: Path) -> None:
    dead = free_port()  # nothing listens: the refresh fails and says so
    config = tmp_path / "config.yaml"
    config.write_text(
        f'prometheus: {{url: "http://admin:hunter2@127.0.0.1:{dead}"}}\n'
        "signals: [{name: cpu, query: up, threshold: 0.8}]\n"
    )
    port = free_port()
    proc = subprocess.Popen(
        serve_argv(config, port, options=["--log-format", "json"]), stderr=subprocess.PIPE, text=True
    )
    try:
        wait_ready(f"http://127.0.0.1:{port}", lambda: proc.poll() is None)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=20)
    entries = [json.loads(line) for line in stderr.splitlines() if line.strip()]
    assert entries and all({"time", "level", "logger", "message"} <= set(e) for e in entries)
    assert any(e["level"] == "info" and "serving on 127.0.0.1" in e["message"] for e in entries)
    assert any(e["level"] == "warning" and "failed (connection)" in e["message"] for e in entries)
    assert "hunter2" not in stderr


def _request(url: str, method: str = "GET", data: bytes | None = None, headers: dict[str, str] | None = None) -> Any:
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    return urllib.request.urlopen(request, timeout=5)


def test_request_lines_and_runtime_log_level(tmp_path: Path) -> None:
    """PUT /debug/loglevel debug turns on one JSON line per extender call with its request id
    and decision, and back at warning they stop, without a restart; the plain metrics port
    serves probes and /metrics only."""
    config = tmp_path / "config.yaml"
    config.write_text(
        f'prometheus: {{url: "http://127.0.0.1:{free_port()}"}}\n'
        "signals: [{name: cpu, query: up, threshold: 0.8}]\nfailurePolicy: closed\n"
    )
    port, plain = free_port(), free_port()
    argv = serve_argv(config, port, "--metrics-listen", f"127.0.0.1:{plain}", options=["--log-format", "json"])
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    body = fixture_bytes("filter-names.json")
    try:
        wait_ready(url, lambda: proc.poll() is None)
        with _request(url + "/filter", "POST", body, {"X-Request-Id": "before-debug"}):
            pass
        with _request(url + "/debug/loglevel") as reply:
            assert reply.read() == b"info\n"
        with _request(url + "/debug/loglevel", "PUT", b"debug") as reply:
            assert reply.status == 200
        with _request(url + "/filter", "POST", body) as reply:
            generated = reply.headers["X-Request-Id"]
        with _request(url + "/prioritize", "POST", body, {"X-Request-Id": "from-the-caller"}) as reply:
            assert reply.headers["X-Request-Id"] == "from-the-caller"
        with pytest.raises(urllib.error.HTTPError) as bad:
            _request(url + "/debug/loglevel", "PUT", b"loud")
        assert bad.value.code == 400 and "unknown log level" in json.loads(bad.value.read())["error"]
        with _request(url + "/debug/loglevel", "PUT", b"warning") as reply:
            assert reply.status == 200
        with _request(url + "/filter", "POST", body, {"X-Request-Id": "after-the-switch"}):
            pass
        with _request(f"http://127.0.0.1:{plain}/metrics") as reply:
            assert b"loadext_requests_total" in reply.read()
        with _request(f"http://127.0.0.1:{plain}/readyz") as reply:
            assert reply.status == 200
        for path in ("/filter", "/explain", "/debug/loglevel"):
            with pytest.raises(urllib.error.HTTPError) as missing:
                _request(f"http://127.0.0.1:{plain}{path}", "POST" if path == "/filter" else "GET", body)
            assert missing.value.code in (404, 405), path
    finally:
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=20)
    entries = [json.loads(line) for line in stderr.splitlines() if line.strip()]
    by_id = {e["request_id"]: e for e in entries if e.get("request_id")}
    filtered = by_id[generated]
    assert filtered["verb"] == "filter" and filtered["pod"] and filtered["outcome"] == "ok"
    assert filtered["nodes"] == 3 and filtered["passed"] == 0  # failurePolicy closed, Prometheus unreachable
    assert sum(filtered["rejected"].values()) == 3 and filtered["duration_ms"] > 0
    assert by_id["from-the-caller"]["verb"] == "prioritize" and "best" in by_id["from-the-caller"]
    assert "before-debug" not in by_id and "after-the-switch" not in by_id
    assert any(e["level"] == "warning" and "log level set to warning" in e["message"] for e in entries)
