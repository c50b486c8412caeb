"""A Service in front of loadext replicas, as kube-proxy makes one: each new TCP connection goes
to the next backend in turn, bytes are copied both ways, and nothing is retried. A backend
whose port refuses connections is skipped, as an endpoint leaves a Service once its pod is
gone; a connection that was open to it breaks, as it does in a cluster."""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading


class RoundRobin:
    def __init__(self, backends: list[tuple[str, int]], host: str = "127.0.0.1") -> None:
        self.backends = backends
        self.connections = dict.fromkeys(backends, 0)  # per backend, accepted and forwarded
        self._next = itertools.cycle(range(len(backends)))
        self._listener = socket.create_server((host, 0))
        self.url = f"http://{host}:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            upstream = self._connect()
            if upstream is None:
                client.close()
                continue
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_copy, args=(source, sink), daemon=True).start()

    def _connect(self) -> socket.socket | None:
        for _ in self.backends:
            backend = self.backends[next(self._next)]
            try:
                upstream = socket.create_connection(backend, timeout=2)
            except OSError:
                continue  # no endpoint there any more
            upstream.settimeout(None)
            self.connections[backend] += 1
            return upstream
        return None

    def close(self) -> None:
        self._listener.close()


def _copy(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:  # one side gone: end both, as a dead pod's connections end
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
