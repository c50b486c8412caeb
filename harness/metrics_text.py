"""The one reader of values in a Prometheus text exposition (loadext's /metrics), for assertions
and waits. A missing series is never read as 0: a wait for `== 0` must not pass because the
series vanished."""

from __future__ import annotations

import re


def metric_if_present(text: str, name: str, **labels: str) -> float | None:
    """The first sample of `name` whose labels include `labels`, or None when there is none
    (for waits on a series that may not exist yet: None equals no number)."""
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0])) if "{" in line else {}
            if all(found.get(k) == v for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    return None


def metric_value(text: str, name: str, **labels: str) -> float:
    """The first sample of `name` whose labels include `labels`; AssertionError if none."""
    value = metric_if_present(text, name, **labels)
    if value is None:
        raise AssertionError(f"{name}{labels} not in /metrics")
    return value
