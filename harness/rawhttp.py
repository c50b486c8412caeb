"""HTTP/1.1 by hand over a socket, for tests that must control every byte and its timing
(trickled headers, half-sent bodies, a request in flight across SIGTERM)."""

from __future__ import annotations

import socket


def head(length: int, path: str = "/filter", close: bool = False) -> bytes:
    """A POST's request line and headers, announcing a body of `length` bytes; with `close`,
    asking the server to close the connection after its reply."""
    connection = "Connection: close\r\n" if close else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n{connection}\r\n"
    ).encode()


def read_reply(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response with a Content-Length body: status, lower-cased headers, body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a reply: {data!r}"
        data += chunk
    header_block, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = header_block.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    while len(body) < int(headers.get("content-length", 0)):
        body += sock.recv(65536)
    return int(status_line.split()[1]), headers, body
