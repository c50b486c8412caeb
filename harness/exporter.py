"""A node_exporter-shaped exporter whose values the caller sets.

It serves the Prometheus text format 0.0.4 itself: prometheus_client >= 0.23 renames metrics
with colons (recording-rule names such as instance:node_cpu_utilisation:rate5m) when it answers
in OpenMetrics, which Prometheus asks for first.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Labels = frozenset[tuple[str, str]]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _series(name: str, labels: Labels) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels))
    return f"{name}{{{inner}}}"


class Exporter:
    """Gauges hold a value; counters grow at a rate per second (a rate change never resets)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._lock = threading.Lock()
        self._gauges: dict[tuple[str, Labels], float] = {}
        self._counters: dict[tuple[str, Labels], tuple[float, float, float]] = {}
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = exporter.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.target = f"{host}:{self.port}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def render(self) -> str:
        now = time.time()
        with self._lock:
            lines = [f"{_series(n, ls)} {v!r}" for (n, ls), v in self._gauges.items()]
            lines += [
                f"{_series(n, ls)} {start + rate * (now - since)!r}"
                for (n, ls), (start, rate, since) in self._counters.items()
            ]
        return "\n".join(lines) + "\n"

    def set_gauge(self, name: str, value: float, **labels: str) -> None:
        with self._lock:
            self._gauges[(name, frozenset(labels.items()))] = value

    def set_counter_rate(self, name: str, rate: float, **labels: str) -> None:
        key, now = (name, frozenset(labels.items())), time.time()
        with self._lock:
            start = 1000.0
            if key in self._counters:
                value, old_rate, since = self._counters[key]
                start = value + old_rate * (now - since)
            self._counters[key] = (start, rate, now)

    def remove(self, name: str, **labels: str) -> None:
        key = (name, frozenset(labels.items()))
        with self._lock:
            self._gauges.pop(key, None)
            self._counters.pop(key, None)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
