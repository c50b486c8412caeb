"""What a slow, greedy or hostile client can cost loadext, and the cap on each.

aiohttp bounds header sizes and the body size, but not time, concurrency or the sum of the
bodies being read. A client that trickles its headers keeps a connection forever; one that
trickles its body holds a request slot; many large bodies at once add up to more memory than
the pod has. So:

- header read timeout (connection level): a request whose headers have not all arrived this
  long after its first byte gets `408` (checked a quarter of the timeout apart, at most 1 s)
  and the connection is closed. The clock starts at the
  first byte, not at accept, so an idle keep-alive connection (the scheduler's Go client keeps
  them) is never cut mid-reuse; idle connections are aiohttp's keepalive timeout's job.
- body read timeout: `408` (outcome `timeout`), connection closed.
- concurrent requests and body bytes in flight: beyond either cap, `503` with `Retry-After`
  (outcome `overloaded`) before a byte of the body is read. A body of unknown length
  (chunked) reserves the largest allowed size. One request is always admitted when none is in
  flight, so a cap below --max-body-size cannot refuse everything.
- body memory (BodyBudget): a large body is read, decoded and answered only while the large
  bodies being worked on sum to at most --body-memory; the rest wait their turn unread, in
  order, their bytes held back by TCP, not by loadext. Refusing them instead (503) would fail
  the scheduler's cycle for each; waiting costs it some milliseconds. Each body in work costs
  about three times its size (the body, its copy in the reply, the reply being sent): four
  concurrent 37 MB non-cache bodies took 734 MB of RSS when all were worked on at once.

Worst-case memory for bodies is therefore about 3 x max(--body-memory, --max-body-size).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

from aiohttp import web

from loadext.config.serving import Limits

# Bodies below this never wait for BodyBudget: a names request (10 KB at 500 names) must not
# queue behind a 37 MB one, and thousands of them weigh less than one large body.
LARGE_BODY = 1024 * 1024


class Admission:
    """Counts requests and reserved body bytes in flight."""

    def __init__(self, limits: Limits) -> None:
        self._limits = limits
        self.requests = 0
        self.bytes = 0

    def admit(self, content_length: int | None) -> int | None:
        """The bytes reserved for this request, or None when it must wait for a later retry."""
        reserve = self._limits.max_body_size if content_length is None else content_length
        if self.requests and (
            self.requests >= self._limits.max_concurrent or self.bytes + reserve > self._limits.max_inflight_bytes
        ):
            return None
        self.requests += 1
        self.bytes += reserve
        return reserve

    def release(self, reserved: int) -> None:
        self.requests -= 1
        self.bytes -= reserved


class BodyBudget:
    """The large bodies being worked on, in bytes; past the budget, requests wait in order.
    One body is always let through when none is in work, so a body larger than the budget
    goes alone rather than never."""

    def __init__(self, budget: int) -> None:
        self._budget = budget
        self.used = 0
        self._waiting: deque[tuple[int, asyncio.Future[None]]] = deque()

    async def acquire(self, size: int) -> None:
        """Returns once `size` bytes are granted; cancelled (a timeout), it takes nothing."""
        if not self._waiting and (not self.used or self.used + size <= self._budget):
            self.used += size
            return
        turn = asyncio.get_running_loop().create_future()
        entry = (size, turn)
        self._waiting.append(entry)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # granted as it was cancelled: give it back
                self.release(size)
            else:
                self._waiting.remove(entry)
                self._grant()  # it may have held back smaller requests behind it
            raise

    async def wait_turn(self, size: int, patience: float) -> bool:
        """acquire(), giving up after `patience` seconds: False then, and nothing held."""
        try:
            async with asyncio.timeout(patience):
                await self.acquire(size)
        except TimeoutError:
            return False
        return True

    def release(self, size: int) -> None:
        self.used -= size
        self._grant()

    def _grant(self) -> None:
        while self._waiting:
            size, turn = self._waiting[0]
            if self.used and self.used + size > self._budget:
                return
            self._waiting.popleft()
            self.used += size
            turn.set_result(None)


def _timeout_reply() -> bytes:
    body = b'{"error": "request headers not received within the header timeout"}'
    head = (
        "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nConnection: close\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


_TIMEOUT_REPLY = _timeout_reply()


class HeaderClock:
    """The header deadlines of one listener's connections: one sweep every `period` while any
    request waits for its headers, instead of a timer armed at each request's first byte and
    cancelled when its handler starts (a TimerHandle and a libuv timer twice per scheduling
    cycle, on the path of every verb). A request still without its headers `timeout` after its
    first byte is answered 408 and its connection closed, at most `period` late."""

    def __init__(self, timeout: float, on_expired: Callable[[], None]) -> None:
        self.timeout = timeout
        self.period = min(1.0, timeout / 4)
        self._on_expired = on_expired
        # connection -> its request's first byte; inserted at the time read, so oldest first
        self._waiting: dict[HeaderDeadline, float] = {}
        self._sweep: asyncio.TimerHandle | None = None

    def first_byte(self, connection: HeaderDeadline) -> None:
        loop = asyncio.get_running_loop()
        self._waiting[connection] = loop.time()
        if self._sweep is None:
            self._sweep = loop.call_later(self.period, self._expire_late)

    def headers_in(self, connection: HeaderDeadline) -> None:
        self._waiting.pop(connection, None)

    def _expire_late(self) -> None:
        loop = asyncio.get_running_loop()
        self._sweep = None
        too_old = loop.time() - self.timeout
        while self._waiting:
            connection, since = next(iter(self._waiting.items()))
            if since > too_old:
                break
            del self._waiting[connection]
            if connection.expire():
                self._on_expired()
        if self._waiting:
            self._sweep = loop.call_later(self.period, self._expire_late)


class HeaderDeadline(asyncio.Protocol):
    """Wraps aiohttp's protocol for one connection: tells the listener's HeaderClock when a
    request's first byte arrives, and when a handler starts (`started`), i.e. its headers are in."""

    def __init__(self, inner: asyncio.Protocol, clock: HeaderClock) -> None:
        self._inner = inner
        self._clock = clock
        self._transport: asyncio.Transport | None = None
        self._awaiting_headers = False
        self._handling = 0

    def started(self) -> None:
        self._handling += 1
        if self._awaiting_headers:
            self._awaiting_headers = False
            self._clock.headers_in(self)

    def finished(self) -> None:
        self._handling -= 1

    def expire(self) -> bool:
        """The headers took too long: answer 408 and close (False when there is nothing to cut)."""
        self._awaiting_headers = False
        if self._handling or self._transport is None or self._transport.is_closing():
            return False
        self._transport.write(_TIMEOUT_REPLY)
        self._transport.close()
        return True

    # asyncio.Protocol, forwarded
    def connection_made(self, transport: Any) -> None:
        self._transport = transport
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self._awaiting_headers and not self._handling:
            self._awaiting_headers = True
            self._clock.first_byte(self)
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._awaiting_headers:
            self._awaiting_headers = False
            self._clock.headers_in(self)
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


# aiohttp's default backlog is 128. When clients open many connections at once (a load
# generator after a latency spike; the soak saw it), a full accept queue makes the kernel
# answer with SYN cookies and resets: 661 "connection reset" errors in 30 minutes. The kernel
# caps it at net.core.somaxconn.
BACKLOG = 2048


class GuardedSite(web.TCPSite):
    """aiohttp's TCPSite with every connection's protocol wrapped in a HeaderDeadline."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        header_timeout: float,
        on_header_timeout: Callable[[], None],
        **kwargs: Any,
    ) -> None:
        super().__init__(runner, host, port, **kwargs)
        self._header_clock = HeaderClock(header_timeout, on_header_timeout)

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None

        def protocol() -> HeaderDeadline:
            return HeaderDeadline(server(), self._header_clock)

        self._server = await asyncio.get_running_loop().create_server(
            protocol, self._host, self._port, ssl=self._ssl_context, backlog=BACKLOG
        )
        self._bound_port = self._server.sockets[0].getsockname()[1]


def handling(request: web.Request) -> HeaderDeadline | None:
    """Tells the request's connection that its headers are in and a handler runs; the caller
    tells it `finished()` when the handler returns (server.py wraps every route so)."""
    transport = request.transport
    deadline = transport.get_protocol() if transport is not None else None
    if not isinstance(deadline, HeaderDeadline):
        return None
    deadline.started()
    return deadline
