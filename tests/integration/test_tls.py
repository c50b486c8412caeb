"""HTTPS and mTLS: the scheduler's client certificate gets in, a client without one is refused
in the handshake, and a rotated certificate is served without a restart."""

from __future__ import annotations

import signal
import socket
import ssl
import subprocess
import time
from pathlib import Path

from harness.certs import make_ca, make_cert
from harness.loadext import serve_argv, wait_ready
from harness.prometheus import free_port
from harness.rawhttp import head
from harness.wire import fixture_bytes


def handshake(port: int, context: ssl.SSLContext) -> ssl.SSLSocket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    return context.wrap_socket(sock, server_hostname="127.0.0.1")


def post_filter(port: int, context: ssl.SSLContext) -> bytes:
    body = fixture_bytes("filter-names.json")
    with handshake(port, context) as tls:
        tls.sendall(head(len(body), close=True) + body)
        reply = b""
        while chunk := tls.recv(65536):
            reply += chunk
    return reply


def test_mtls_and_certificate_rotation(tmp_path: Path) -> None:
    ca = make_ca(tmp_path, "ca")
    server = make_cert(tmp_path, ca, "loadext", "IP:127.0.0.1")
    scheduler = make_cert(tmp_path, ca, "kube-scheduler")
    config = tmp_path / "config.yaml"
    config.write_text(
        f'prometheus: {{url: "http://127.0.0.1:{free_port()}"}}\nsignals: [{{name: cpu, query: up, threshold: 0.8}}]\n'
    )
    port = free_port()
    proc = subprocess.Popen(
        serve_argv(
            config,
            port,
            "--tls-cert",
            str(server[0]),
            "--tls-key",
            str(server[1]),
            "--tls-client-ca",
            str(ca[0]),
            "--reload-interval",
            "200ms",
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    client = ssl.create_default_context(cafile=str(ca[0]))
    client.load_cert_chain(str(scheduler[0]), str(scheduler[1]))
    anonymous = ssl.create_default_context(cafile=str(ca[0]))
    try:
        wait_ready(f"https://127.0.0.1:{port}", lambda: proc.poll() is None, context=client)
        reply = post_filter(port, client)
        assert reply.startswith(b"HTTP/1.1 200") and b'"NodeNames"' in reply

        try:  # no client certificate: the server aborts the handshake (TLS 1.3 reports it on read)
            refused = post_filter(port, anonymous)
        except (ssl.SSLError, ConnectionError):
            refused = b""
        assert refused == b"", refused[:200]

        with handshake(port, client) as tls:
            first = tls.getpeercert()
        rotated = make_cert(tmp_path, ca, "loadext-rotated", "IP:127.0.0.1")
        server[0].write_bytes(rotated[0].read_bytes())
        server[1].write_bytes(rotated[1].read_bytes())
        deadline = time.monotonic() + 10
        while True:
            with handshake(port, client) as tls:
                current = tls.getpeercert()
            if current["serialNumber"] != first["serialNumber"]:
                break
            assert time.monotonic() < deadline, "the rotated certificate was never served"
            time.sleep(0.1)
        assert dict(x[0] for x in current["subject"])["commonName"] == "loadext-rotated"
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=20)[0].decode()
    assert "TLS certificate reloaded" in output
