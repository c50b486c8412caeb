"""Durations and Kubernetes quantities as plain floats (seconds, cores, bytes).

Quantities are parsed here rather than with the kubernetes client's `parse_quantity` so that
the pure core (which estimates pod usage from requests and limits) never imports the client
library; tests/unit/test_units.py checks this parser against the client's on the same inputs.
"""

from __future__ import annotations

import functools
import re
from decimal import ROUND_CEILING, Decimal, DecimalException

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Parse a Go/Kubernetes duration ("15s", "1m30s", "250ms") into seconds."""
    if not isinstance(text, str) or not text:
        raise ValueError("must be a duration string such as 15s or 1m30s")
    pos, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text):
        raise ValueError(f"{text!r} is not a duration (use units h, m, s, ms: e.g. 15s, 1m30s)")
    return total


_QUANTITY = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
_DECIMAL_POWERS = {"n": -3, "u": -2, "m": -1, "k": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}
_INT64_MAX = Decimal(2**63 - 1)  # a Quantity's own ceiling
_MULTIPLIERS: dict[str | None, Decimal] = {
    None: Decimal(1),
    **{suffix: Decimal(1024) ** power for power, suffix in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"), 1)},
    **{suffix: Decimal(1000) ** power for suffix, power in _DECIMAL_POWERS.items()},
}


def quantity(value: object) -> float | None:
    """A Kubernetes quantity ("500m", "1Gi", "2", 1.5) as a float; None if absent or unparsable."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    return _parsed(str(value))


@functools.lru_cache(maxsize=4096)
def _parsed(text: str) -> float | None:
    """Memoized: the herd guard estimates every pod on every call from its requests and limits,
    and a cluster uses a few dozen distinct quantity strings; the regex and Decimal arithmetic
    were 4-5 % of loadext's GIL time in the scheduler benchmark (py-spy --gil)."""
    match = _QUANTITY.match(text)
    if match is None:
        return None
    try:
        return float(Decimal(match.group(1)) * _MULTIPLIERS[match.group(2)])
    except DecimalException:
        return None


def whole_quantity(value: object, milli: bool = False) -> int | None:
    """A Kubernetes quantity as the scheduler compares it: an integer, rounded up (Quantity's
    Value, or MilliValue with `milli`, as for CPU). Exact where floats are not: "100m" three
    times is 300 millicores, never 300.00000000000006. None if absent or unparsable."""
    if value is None or isinstance(value, bool):
        return None
    text = str(value)
    match = _QUANTITY.match(text)
    if match is None:
        return None
    try:
        exact = Decimal(match.group(1)) * _MULTIPLIERS[match.group(2)] * (1000 if milli else 1)
        return int(min(exact, _INT64_MAX).to_integral_value(rounding=ROUND_CEILING))
    except DecimalException:
        return None
