"""A Kubernetes Service on loopback, for rolling-restart tests: a TCP proxy that sends each new
connection round-robin to the backends whose /readyz answered 200 at the last probe, as
kube-proxy does with the ready endpoints of an EndpointSlice. Established connections stay on
their backend (kube-proxy's conntrack does the same); the proxy closes the client side when the
backend closes its side, so a server's `Connection: close` reaches the client."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Iterable

import aiohttp


class Service:
    def __init__(self, backends: Iterable[int], probe_period: float = 0.1) -> None:
        self.backends = list(backends)
        self.ready: list[int] = []
        self.connections: dict[int, int] = {}  # backend port -> connections sent there
        self._period = probe_period
        self._turn = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        started = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main(started)), daemon=True)
        self._thread.start()
        started.wait(10)

    async def _main(self, started: threading.Event) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        prober = asyncio.create_task(self._probe())
        started.set()
        await self._stop.wait()
        prober.cancel()
        server.close()  # asyncio.run cancels the connections still piping

    async def _probe(self) -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1)) as session:
            while True:
                ready = []
                for port in list(self.backends):
                    try:
                        async with session.get(f"http://127.0.0.1:{port}/readyz") as reply:
                            if reply.status == 200:
                                ready.append(port)
                    except (aiohttp.ClientError, TimeoutError):
                        pass
                self.ready = ready
                await asyncio.sleep(self._period)

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        ready = self.ready
        if not ready:  # no ready endpoint: the connection is refused, as with a real Service
            client_writer.close()
            return
        port = ready[next(self._turn) % len(ready)]
        self.connections[port] = self.connections.get(port, 0) + 1
        try:
            backend_reader, backend_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            _pipe(client_reader, backend_writer), _pipe(backend_reader, client_writer), return_exceptions=True
        )

    def close(self) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    finally:
        writer.close()
