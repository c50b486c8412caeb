"""`loadext serve`'s flags, each declared once: a field of the dataclass of its group (limits,
shutdown, TLS, ...) says its name, default and help (`flag()`); cli.py builds argparse from the
groups and commands/serve.py reads the parsed namespace into them, as `setting()` does for the
config file. tests/unit/test_flags.py holds each default against its flag, --help and
docs/cli.md. The argparse types below refuse a bad value with a message naming it.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loadext.config.units import parse_duration


@dataclass(frozen=True)
class Flag:
    name: str  # "--header-timeout"
    help: str
    parse: Callable[[str], Any] | None  # None: a switch, off unless given
    shown: str | None  # the default as it is typed ("5s"); None: none to show
    metavar: str | None = None
    one_of: str | None = None  # the flags sharing it: exactly one is given


def flag(
    name: str,
    default: Any,
    help: str,
    *,
    parse: Callable[[str], Any] | None = None,
    shown: str | None = None,
    metavar: str | None = None,
    one_of: str | None = None,
) -> Any:
    """A field that is a command-line flag: `default` is the parsed value, `shown` the same
    default as typed (parse(shown) == default, checked by the tests)."""
    return field(default=default, metadata={"flag": Flag(name, help, parse, shown, metavar, one_of)})


def flags_of(group: type) -> list[tuple[str, Flag]]:
    """(field name, flag) of each field of a group's dataclass, in declaration order."""
    return [(item.name, item.metadata["flag"]) for item in dataclasses.fields(group)]


def dest(spec: Flag) -> str:
    """Where argparse puts the flag's value (its own default rule: --max-body-size -> max_body_size)."""
    return spec.name.removeprefix("--").replace("-", "_")


def add_flags(parser: argparse.ArgumentParser, title: str, group: type) -> None:
    """The group's flags as one argparse group, each help ending in its default."""
    target = parser.add_argument_group(title)
    exclusive: dict[str, Any] = {}
    for name, spec in flags_of(group):
        where = target
        if spec.one_of is not None:
            if spec.one_of not in exclusive:
                exclusive[spec.one_of] = target.add_mutually_exclusive_group(required=True)
            where = exclusive[spec.one_of]
        text = spec.help if spec.shown is None else f"{spec.help} (default {spec.shown})"
        metavar = spec.metavar or _METAVARS.get(spec.parse)
        default = group.__dataclass_fields__[name].default  # type: ignore[attr-defined]
        if spec.parse is None:
            where.add_argument(spec.name, action="store_true", help=text)
        else:
            where.add_argument(spec.name, type=spec.parse, default=default, metavar=metavar, help=text)


def read_flags(group: type[Any], args: argparse.Namespace) -> Any:
    """The group's dataclass with the values argparse parsed for its flags."""
    return group(**{name: getattr(args, dest(spec)) for name, spec in flags_of(group)})


# --- argparse types ----------------------------------------------------------------------------


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


# What --help shows for a value of each type (a flag may say better: FILE, KEY).
_METAVARS: dict[Callable[[str], Any] | None, str] = {
    parse_listen: "HOST:PORT",
    parse_size: "SIZE",
    duration: "DURATION",
    positive_duration: "DURATION",
    positive_int: "N",
    configmap_ref: "NAMESPACE/NAME",
}
