"""`loadext serve`: the parsed flags as ServeOptions, and the server run until SIGTERM."""

from __future__ import annotations

import argparse

from loadext.config.serving import ServeOptions


def run(args: argparse.Namespace) -> int:
    # The server's modules load here, not when the CLI starts: check-config needs none of them.
    from loadext.app import serve

    return serve(ServeOptions.from_args(args))
