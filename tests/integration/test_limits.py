"""Slow, greedy and oversized clients against a real `loadext serve` process: each gets its HTTP
status and JSON body, the server keeps answering everyone else, and no client can make it
hold more than the configured body bytes."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator

import pytest

from harness.loadext import LOADEXT, serve_argv, wait_ready
from harness.metrics_text import metric_value
from harness.prometheus import free_port
from harness.rawhttp import head, read_reply
from harness.wire import fixture_bytes

BODY = fixture_bytes("filter-names.json")
HEADER_TIMEOUT = 0.5
BODY_TIMEOUT = 1.0


def _serve(tmp_path_factory: pytest.TempPathFactory, *flags: str) -> Iterator[int]:
    """`loadext serve` with these limit flags, on a Prometheus that is not there (the verbs
    answer from the failure policy): its port, until SIGTERM."""
    config = tmp_path_factory.mktemp("limits") / "config.yaml"
    config.write_text(
        f'prometheus: {{url: "http://127.0.0.1:{free_port()}"}}\nsignals: [{{name: cpu, query: up, threshold: 0.8}}]\n'
    )
    port = free_port()
    proc = subprocess.Popen(serve_argv(config, port, *flags), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(f"http://127.0.0.1:{port}", lambda: proc.poll() is None)
        yield port
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    yield from _serve(
        tmp_path_factory,
        "--header-timeout",
        f"{HEADER_TIMEOUT}s",
        "--body-timeout",
        f"{BODY_TIMEOUT}s",
        "--max-concurrent-requests",
        "2",
        "--max-body-size",
        "512Ki",
        "--max-inflight-bytes",
        "600Ki",
    )


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def filter_once(port: int) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/filter", data=BODY, method="POST")
    with urllib.request.urlopen(request, timeout=5) as reply:
        return int(reply.status)


def scraped(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        return str(reply.read().decode())


def test_trickled_headers_get_408_and_the_connection_closed(server: int) -> None:
    before = metric_value(scraped(server), "loadext_client_read_timeouts_total", phase="header")
    with connect(server) as slow:
        slow.sendall(b"POST /filter HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the rest
        started = time.monotonic()
        status, _, body = read_reply(slow)
        waited = time.monotonic() - started
        assert status == 408 and "header" in json.loads(body)["error"]
        assert HEADER_TIMEOUT * 0.8 <= waited < HEADER_TIMEOUT + 2
        assert closed_by_server(slow)
    assert metric_value(scraped(server), "loadext_client_read_timeouts_total", phase="header") == before + 1
    assert filter_once(server) == 200


def test_an_idle_keep_alive_connection_is_not_cut_by_the_header_timeout(server: int) -> None:
    with connect(server) as conn:
        conn.sendall(head(len(BODY)) + BODY)
        assert read_reply(conn)[0] == 200
        time.sleep(HEADER_TIMEOUT * 3)  # idle, as the scheduler's pooled connections are between cycles
        conn.sendall(head(len(BODY)) + BODY)
        assert read_reply(conn)[0] == 200


def test_headers_trickled_after_a_served_request_on_the_same_connection_get_408(server: int) -> None:
    """The deadline is per request, not per connection: the second request's starts at its first byte."""
    with connect(server) as conn:
        conn.sendall(head(len(BODY)) + BODY)
        assert read_reply(conn)[0] == 200
        conn.sendall(b"POST /filter HTTP/1.1\r\n")  # and never the rest
        started = time.monotonic()
        status, _, body = read_reply(conn)
        assert status == 408 and "header" in json.loads(body)["error"]
        assert HEADER_TIMEOUT * 0.8 <= time.monotonic() - started < HEADER_TIMEOUT + 2
        assert closed_by_server(conn)


def test_trickled_body_gets_408(server: int) -> None:
    with connect(server) as slow:
        slow.sendall(head(len(BODY)) + BODY[:10])
        status, headers, body = read_reply(slow)
        assert status == 408 and "body" in json.loads(body)["error"] and headers["connection"] == "close"
    assert metric_value(scraped(server), "loadext_requests_total", outcome="timeout", verb="filter") >= 1


def test_a_client_gone_mid_body_is_counted_as_aborted_not_as_a_bug(server: int) -> None:
    before = metric_value(scraped(server), "loadext_requests_total", outcome="aborted", verb="filter")
    with connect(server) as leaving:
        leaving.sendall(head(len(BODY)) + BODY[:10])
        _await_in_flight(server, 1)
    deadline = time.monotonic() + 5
    while metric_value(scraped(server), "loadext_requests_total", outcome="aborted", verb="filter") == before:
        assert time.monotonic() < deadline, "the abandoned request was not counted as aborted"
        time.sleep(0.02)
    assert metric_value(scraped(server), "loadext_requests_total", outcome="error", verb="filter") == 0


def test_a_declared_body_over_the_limit_is_refused_before_it_is_read(server: int) -> None:
    with connect(server) as greedy:
        greedy.sendall(head(10 * 1024 * 1024))  # 10 MiB announced, nothing sent
        status, _, body = read_reply(greedy)
        assert status == 413 and "too large" in json.loads(body)["error"]


def test_beyond_max_concurrent_requests_503_with_retry_after(server: int) -> None:
    holders = [connect(server) for _ in range(2)]
    try:
        for sock in holders:  # two requests in flight, each waiting for the rest of its body
            sock.sendall(head(len(BODY)) + BODY[:10])
        _await_in_flight(server, 2)
        with connect(server) as third:
            third.sendall(head(len(BODY)) + BODY)
            status, headers, body = read_reply(third)
        assert status == 503 and headers["retry-after"] == "1"
        assert "in flight" in json.loads(body)["error"]
        for sock in holders:  # they finish their bodies: both are answered
            sock.sendall(BODY[10:])
            assert read_reply(sock)[0] == 200
    finally:
        for sock in holders:
            sock.close()
    assert filter_once(server) == 200
    assert metric_value(scraped(server), "loadext_requests_total", outcome="overloaded", verb="filter") >= 1


def test_body_bytes_in_flight_are_capped(server: int) -> None:
    """500 KiB announced and pending, then 200 KiB more: over the 600 KiB budget, refused
    without reading; a small request in the same moment still fits."""
    with connect(server) as big:
        big.sendall(head(500 * 1024) + b"{")
        _await_in_flight(server, 1)
        with connect(server) as second:
            second.sendall(head(200 * 1024))
            status, _, _ = read_reply(second)
        assert status == 503
        with connect(server) as small:
            small.sendall(head(len(BODY)) + BODY)
            assert read_reply(small)[0] == 200


@pytest.fixture(scope="module")
def budget_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """Room for one large body at a time (1.5 MiB bodies, 2 MiB of body memory)."""
    yield from _serve(tmp_path_factory, "--max-body-size", "8Mi", "--body-memory", "2Mi", "--body-timeout", "20s")


def large_filter_body(names: int) -> bytes:
    """A names filter of about 25 bytes per name: 60000 names are 1.5 MiB, a large body."""
    listed = [f"node-{i:07d}-padding" for i in range(names)]
    return json.dumps({"Pod": None, "Nodes": None, "NodeNames": listed}).encode()


def test_large_bodies_past_body_memory_wait_their_turn_and_are_answered(budget_server: int) -> None:
    """The first large body is half sent and holds the budget; the second, whole, waits unread
    (no 503, no reply) until the first is answered, then is answered in full."""
    big = large_filter_body(60_000)
    assert len(big) > 1024 * 1024
    with connect(budget_server) as first, connect(budget_server) as second:
        first.sendall(head(len(big)) + big[: len(big) // 2])
        _await_in_flight(budget_server, 1)
        second.sendall(head(len(big)) + big)
        _await_in_flight(budget_server, 2)
        second.settimeout(0.5)
        with pytest.raises(TimeoutError):  # waiting its turn: not refused, not answered
            second.recv(1)
        second.settimeout(10)
        first.sendall(big[len(big) // 2 :])
        status, _, body = read_reply(first)
        assert status == 200 and len(json.loads(body)["NodeNames"]) == 60_000
        status, _, body = read_reply(second)
        assert status == 200 and len(json.loads(body)["NodeNames"]) == 60_000
    assert metric_value(scraped(budget_server), "loadext_requests_total", outcome="overloaded", verb="filter") == 0


def test_small_bodies_do_not_wait_behind_a_large_one(budget_server: int) -> None:
    big = large_filter_body(60_000)
    with connect(budget_server) as first:
        first.sendall(head(len(big)) + big[:100])
        _await_in_flight(budget_server, 1)
        assert filter_once(budget_server) == 200
        first.sendall(big[100:])
        assert read_reply(first)[0] == 200


def _await_in_flight(port: int, count: int) -> None:
    deadline = time.monotonic() + 5
    while metric_value(scraped(port), "loadext_requests_in_flight") < count:
        assert time.monotonic() < deadline, "requests never showed as in flight"
        time.sleep(0.02)


def test_every_limit_has_a_flag_in_help() -> None:
    out = subprocess.run([*LOADEXT, "serve", "--help"], capture_output=True, text=True)
    flags = ("--header-timeout", "--body-timeout", "--max-concurrent-requests", "--max-inflight-bytes", "--body-memory")
    for flag in flags:
        assert flag in out.stdout


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--max-concurrent-requests", "0", "not a whole number of at least 1"),
        ("--header-timeout", "0s", "must be longer than 0s"),
        ("--body-timeout", "soon", "soon"),
        ("--max-inflight-bytes", "lots", "not a size"),
        ("--body-memory", "plenty", "not a size"),
    ],
)
def test_bad_limit_flags_are_refused_by_name(flag: str, value: str, message: str) -> None:
    out = subprocess.run([*LOADEXT, "serve", "--config", "x.yaml", flag, value], capture_output=True, text=True)
    assert out.returncode == 2 and f"argument {flag}" in out.stderr and message in out.stderr
