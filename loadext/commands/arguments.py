"""argparse types for loadext's flags: each refuses a bad value with a message naming it."""

from __future__ import annotations

import argparse

from loadext.config import parse_duration


def parse_listen(value: str) -> tuple[str, int]:
    """'HOST:PORT', '[::1]:PORT' or ':PORT' (all interfaces)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{value!r} is not HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


def parse_size(value: str) -> int:
    """'256Mi', '64M', '1Gi' or plain bytes."""
    units = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "K": 1000, "M": 1000**2, "G": 1000**3}
    for suffix, factor in units.items():
        if value.endswith(suffix) and value[: -len(suffix)].isdigit():
            return int(value[: -len(suffix)]) * factor
    if value.isdigit():
        return int(value)
    raise argparse.ArgumentTypeError(f"{value!r} is not a size such as 256Mi")


def duration(value: str) -> float:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def positive_duration(value: str) -> float:
    seconds = duration(value)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{value!r} must be longer than 0s")
    return seconds


def positive_int(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of at least 1")
    return int(value)


def configmap_ref(value: str) -> tuple[str, str]:
    namespace, sep, name = value.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"{value!r} is not NAMESPACE/NAME")
    return namespace, name
