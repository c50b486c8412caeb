"""Reading values out of a Prometheus text exposition (loadext's /metrics) in assertions."""

from __future__ import annotations

import re


def metric_value(text: str, name: str, **labels: str) -> float:
    """The first sample of `name` whose labels include `labels`; AssertionError if none."""
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0])) if "{" in line else {}
            if all(found.get(k) == v for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name}{labels} not in /metrics")
