"""Running `loadext serve` as a process, as tests, the demo and the benchmarks all do."""

from __future__ import annotations

import ssl
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

LOADEXT = [sys.executable, "-m", "loadext"]


def serve_argv(config: Path | str, port: int, *extra: str, options: Sequence[str] = ()) -> list[str]:
    """`loadext serve` on loopback with this config file; `extra` are further serve flags,
    `options` go before the command (--log-level, --log-format)."""
    return [*LOADEXT, *options, "serve", "--config", str(config), "--listen", f"127.0.0.1:{port}", *extra]


def from_tree(argv: Sequence[str], tree: Path | None) -> list[str]:
    """A LOADEXT command line run with another checkout's `loadext` package (before and after
    side by side); `-P` keeps the working directory's package off the path."""
    if tree is None:
        return list(argv)
    return ["env", f"PYTHONPATH={tree.resolve()}", argv[0], "-P", *argv[1:]]


def ready(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url + "/readyz", timeout=1, context=context) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


def wait_ready(
    url: str, alive: Callable[[], bool], timeout: float = 20.0, context: ssl.SSLContext | None = None
) -> None:
    """Until /readyz answers 200; fails at once if the process died."""
    deadline = time.monotonic() + timeout
    while not ready(url, context):
        assert alive(), "loadext exited before it became ready"
        assert time.monotonic() < deadline, f"loadext at {url} never became ready"
        time.sleep(0.05)
