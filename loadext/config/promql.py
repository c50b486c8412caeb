"""PromQL read offline: its syntax, checked so that a typo in a signal's query is a config
error with its line rather than a failed query at run time; and the ranges it reads over, from
which the herd guard's window and the settle time of a pod's measured usage are derived.

promql-parser (the Rust parser GreptimeDB maintains, Prometheus 2.45 syntax, 4.8 MB installed)
parses a preset query in 14-470 us, measured here. promtool, the other candidate, has no
offline query check (only whole rule files) and is not in the image.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import promql_parser


def syntax_error(query: str) -> str | None:
    """Why `query` does not parse, or None when it does."""
    try:
        promql_parser.parse(query)
    except ValueError as exc:
        return str(exc) or "does not parse"
    return None


_RANGE = re.compile(r"\[(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)(?::[^\]]*)?\]")
_PROMQL_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


# rate(), increase(), deriv() and the *_over_time() functions average over their whole range, so
# a series younger than the range reads low (rate's extrapolation is capped); irate() and plain
# gauges do not. \b keeps irate( from matching rate(.
_AVERAGING_RANGE = re.compile(
    r"\b(?:rate|increase|deriv|\w+_over_time)\s*\([^\[]*\[(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)(?::[^\]]*)?\]"
)


def settle_time(queries: Iterable[str]) -> float:
    """The longest range an averaging function in the queries reads over: until a new pod's
    series is that old, its value is an under-read, not its usage."""
    ranges = [float(n) * _PROMQL_UNITS[unit] for query in queries for n, unit in _AVERAGING_RANGE.findall(query)]
    return max(ranges, default=0.0)


def derive_window(queries: Iterable[str], refresh_interval: float) -> float:
    """The longest range in the signals' PromQL (the rate window: how long until a new pod's
    usage is fully visible), plus a refresh and a scrape; 5 minutes if no query has a range."""
    ranges = [float(n) * _PROMQL_UNITS[unit] for query in queries for n, unit in _RANGE.findall(query)]
    return max(ranges, default=300.0) + refresh_interval + 30.0
