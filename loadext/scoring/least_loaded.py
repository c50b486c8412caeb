"""leastLoaded: f(u) = 1 - u, the free share. Spreads load to where there is real headroom."""

from __future__ import annotations

from collections.abc import Mapping

from loadext.scoring.base import Reading, Scorer, Strategy


def free_share(reading: Reading) -> float:
    return 1.0 - reading.value


def _make(params: Mapping[str, float]) -> Scorer:
    return free_share


STRATEGY = Strategy("leastLoaded", (), _make)
