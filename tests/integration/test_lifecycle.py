"""SIGTERM and rolling restarts, on real `loadext serve` processes: readiness turns false first,
requests in flight finish, the process exits 0 within its grace period, and two replicas
behind a loopback Service restarted one after the other drop no request under load."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import aiohttp
import pytest
import yaml

from harness.exporter import Exporter
from harness.inprocess import live_config
from harness.loadext import serve_argv, wait_ready
from harness.prometheus import PrometheusServer, free_port
from harness.rawhttp import head, read_reply
from harness.service import Service
from harness.waiting import wait_until
from harness.wire import fixture_bytes

BODY = fixture_bytes("filter-names.json")
NODES = ("machine1", "machine2", "machine3")  # the names in filter-names.json
DELAY, TIMEOUT = 1.0, 5.0


@pytest.fixture
def config(tmp_path: Path, prometheus: PrometheusServer, exporter: Exporter, case: str) -> Path:
    for i, node in enumerate(NODES):
        exporter.set_gauge("loadext_test_cpu", 0.3 + 0.2 * i, case=case, node=node)
        exporter.set_gauge("loadext_test_memory", 0.4, case=case, node=node)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(live_config(prometheus.url, case)))
    return path


def start(config: Path, port: int, *extra: str) -> subprocess.Popen[bytes]:
    argv = serve_argv(config, port, "--shutdown-delay", f"{DELAY}s", "--shutdown-timeout", f"{TIMEOUT}s", *extra)
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(f"http://127.0.0.1:{port}", lambda: proc.poll() is None)
    return proc


def readyz(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_sigterm_turns_readiness_false_finishes_in_flight_and_exits_in_time(config: Path) -> None:
    port, plain = free_port(), free_port()
    proc = start(config, port, "--metrics-listen", f"127.0.0.1:{plain}")
    assert readyz(plain) == 200
    with socket.create_connection(("127.0.0.1", port), timeout=10) as in_flight:
        in_flight.sendall(head(len(BODY)) + BODY[:20])  # a request in flight when the signal comes
        time.sleep(0.2)
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 2
        while readyz(port) != 503:
            assert time.monotonic() < deadline, "readiness never turned false"
        assert readyz(plain) == 503
        # During the delay new requests are still answered, and told to reconnect elsewhere.
        with socket.create_connection(("127.0.0.1", port), timeout=5) as late:
            late.sendall(head(len(BODY)) + BODY)
            status, headers, _ = read_reply(late)
            assert status == 200 and headers["connection"] == "close"
        in_flight.sendall(BODY[20:])
        status, headers, _ = read_reply(in_flight)
        assert status == 200 and headers["connection"] == "close"
    assert proc.wait(timeout=DELAY + TIMEOUT + 5) == 0
    assert time.monotonic() - signalled < DELAY + TIMEOUT


def test_second_signal_skips_the_delay(config: Path) -> None:
    port = free_port()
    proc = start(config, port, "--shutdown-delay", "60s")
    proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 2
    while readyz(port) != 503:
        assert time.monotonic() < deadline
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0


class Load:
    """Workers posting filter through the Service in a loop, on keep-alive connections, with no
    retries: any exception or non-200 is a dropped request."""

    def __init__(self, port: int, workers: int = 8) -> None:
        self.port, self.workers = port, workers
        self.results: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()

    async def _run(self) -> None:
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.workers), timeout=aiohttp.ClientTimeout(total=5)
        ) as session:
            await asyncio.gather(*(self._worker(session) for _ in range(self.workers)))

    async def _worker(self, session: aiohttp.ClientSession) -> None:
        url = f"http://127.0.0.1:{self.port}/filter"
        while not self._stop.is_set():
            try:
                async with session.post(url, data=BODY) as reply:
                    await reply.read()
                    self.results["200" if reply.status == 200 else f"status {reply.status}"] += 1
            except (aiohttp.ClientError, TimeoutError) as exc:
                self.results[type(exc).__name__] += 1
            await asyncio.sleep(0.005)

    def stop(self) -> Counter[str]:
        self._stop.set()
        self._thread.join(15)
        return self.results


def test_rolling_restart_of_two_replicas_drops_no_request(config: Path) -> None:
    ports = [free_port(), free_port()]
    replicas = [start(config, port) for port in ports]
    service = Service(ports)
    load = None
    try:
        wait_until(lambda: len(service.ready) == 2, "the Service never saw both replicas ready")
        load = Load(service.port)
        wait_until(lambda: load.results["200"] > 200, "no traffic through the Service")
        first_round = service.connections.get(ports[0], 0)
        for i, port in enumerate(ports):  # one replica at a time, as a Deployment's rolling update does
            signalled = time.monotonic()
            replicas[i].send_signal(signal.SIGTERM)
            assert replicas[i].wait(timeout=DELAY + TIMEOUT + 5) == 0
            assert time.monotonic() - signalled < DELAY + TIMEOUT
            replicas[i] = start(config, port)
            wait_until(lambda p=port: p in service.ready, "the Service never saw the new replica ready")
        # Keep-alive connections stay where they are: the first new replica took over the
        # connections the second one closed while draining.
        wait_until(lambda: service.connections.get(ports[0], 0) > first_round, "the new replica got no traffic")
        wait_until(lambda: load.results["200"] > 1000, "too little traffic")
    finally:
        results = load.stop() if load is not None else Counter()
        service.close()
        for proc in replicas:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=20)
    print(f"rolling restart: {results}")
    assert set(results) == {"200"}, f"dropped requests: {results}"
