"""An HTTP proxy in front of the real Prometheus that can be told to misbehave.

Modes: pass (forward), delay (forward after N seconds), status (answer CODE with a body),
garbage (200 with a body that is not JSON), down (close the connection without answering).
With `matching`, only requests whose decoded URL contains it misbehave (one query failing while
the others answer); the rest pass.
"""

from __future__ import annotations

import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (a timeout, a killed replica) is no error of the proxy's; the
        default handler prints a traceback to stderr for it."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FaultProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.mode = "pass"
        self.delay = 0.0
        self.status = 503
        self.body = b""
        self.matching = ""
        self.requests = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                proxy.requests += 1
                mode = proxy.mode if proxy.matching in urllib.parse.unquote_plus(self.path) else "pass"
                if mode == "down":
                    self.close_connection = True
                    return
                if mode == "delay":
                    time.sleep(proxy.delay)
                if mode == "status":
                    return self._reply(proxy.status, proxy.body)
                if mode == "garbage":
                    return self._reply(200, b"<html>502 Bad Gateway, says a proxy</html>")
                try:
                    with urllib.request.urlopen(proxy.upstream + self.path, timeout=30) as reply:
                        self._reply(reply.status, reply.read())
                except urllib.error.HTTPError as exc:
                    self._reply(exc.code, exc.read())
                except OSError:
                    self._reply(502, b"upstream unreachable")

            def _reply(self, code: int, body: bytes) -> None:
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the client gave up (timeout): nothing to do

            def log_message(self, *args: object) -> None:
                pass

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def set(self, mode: str, *, delay: float = 0.0, status: int = 503, body: bytes = b"", matching: str = "") -> None:
        self.mode, self.delay, self.status, self.body, self.matching = mode, delay, status, body, matching

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
