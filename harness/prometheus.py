"""Start and stop a real Prometheus server on loopback, and query it."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


_handed_out: set[int] = set()


def free_port() -> int:
    """A loopback port nothing listens on, and never one this process handed out before: the
    caller binds it later, so two calls in a row could otherwise get the same port (seen once:
    etcd's peer port was the API server's, picked a moment earlier)."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def scrape_config(*targets: str, interval: str = "1s") -> str:
    """honor_labels keeps the exporter's own instance/job labels, as node-exporter presets expect."""
    listed = ", ".join(f"'{t}'" for t in targets)
    return (
        f"global: {{scrape_interval: {interval}, scrape_timeout: {interval}, "
        f"evaluation_interval: {interval}}}\n"
        "scrape_configs:\n"
        "  - job_name: exporter\n"
        "    honor_labels: true\n"
        f"    static_configs: [{{targets: [{listed}]}}]\n"
    )


class PrometheusServer:
    """`web_config` is Prometheus' --web.config.file (basic auth users, TLS); the harness then
    reaches it with `tls` (an SSL context: https) and `auth` (basic auth) itself."""

    def __init__(
        self,
        workdir: str,
        config_text: str,
        data_dir: str | None = None,
        *,
        web_config: str | None = None,
        tls: ssl.SSLContext | None = None,
        auth: tuple[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self._tls, self._auth = tls, auth
        config = os.path.join(workdir, "prometheus.yml")
        with open(config, "w", encoding="utf-8") as handle:
            handle.write(config_text)
        extra = []
        if web_config is not None:
            web = os.path.join(workdir, "web.yml")
            with open(web, "w", encoding="utf-8") as handle:
                handle.write(web_config)
            extra.append(f"--web.config.file={web}")
        self._log = open(os.path.join(workdir, "prometheus.log"), "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={data_dir or os.path.join(workdir, 'data')}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
                *extra,
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("prometheus exited: " + self.read_log())
            try:
                with self._open("/-/ready", timeout=1) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise TimeoutError("prometheus not ready: " + self.read_log())

    def read_log(self) -> str:
        with open(self._log.name, encoding="utf-8", errors="replace") as handle:
            return handle.read()

    def _open(self, path: str, timeout: float) -> Any:
        request = urllib.request.Request(self.url + path)
        if self._auth is not None:
            pair = base64.b64encode(":".join(self._auth).encode()).decode()
            request.add_header("Authorization", f"Basic {pair}")
        return urllib.request.urlopen(request, timeout=timeout, context=self._tls)

    def query(self, expr: str) -> list[dict[str, Any]]:
        with self._open("/api/v1/query?" + urllib.parse.urlencode({"query": expr}), timeout=10) as reply:
            result: list[dict[str, Any]] = json.load(reply)["data"]["result"]
            return result

    def wait_for(
        self, expr: str, predicate: Callable[[list[dict[str, Any]]], bool], timeout: float = 20.0
    ) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(expr)
            if predicate(result):
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting on {expr!r}; last result {result}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def backfill(workdir: str, openmetrics_text: str) -> str:
    """Write an OpenMetrics document into TSDB blocks with promtool; returns the data dir."""
    source = os.path.join(workdir, "backfill.om")
    data = os.path.join(workdir, "data")
    with open(source, "w", encoding="utf-8") as handle:
        handle.write(openmetrics_text)
    subprocess.run(
        [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", "-q", source, data],
        check=True,
        capture_output=True,
    )
    return data


def risk_history(now: float) -> str:
    """OpenMetrics text for backfill, 20 minutes of risk_cpu.

    steady: 50 % throughout; noisy: 20 % and 80 % in turns (mean 50 %, stddev 30 %)."""
    start = int(now) - 20 * 60
    lines = []
    for t in range(start, int(now) + 120, 15):
        lines.append(f'risk_cpu{{node="steady"}} 0.5 {t}')
    for t in range(start, int(now) + 120, 15):
        lines.append(f'risk_cpu{{node="noisy"}} {0.2 if (t - start) // 15 % 2 else 0.8} {t}')
    return "\n".join([*lines, "# EOF"]) + "\n"
