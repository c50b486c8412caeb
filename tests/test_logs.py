"""Logs: JSON lines on request, and no secret in any line."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from harness.loadext import serve_argv, wait_ready
from harness.prometheus import free_port
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
