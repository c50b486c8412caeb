"""Scoring strategies, one module each: how one signal's value becomes a desirability in 0..1.

Each module declares a `Strategy` (base.py): its config name, its parameters with defaults,
its score function with the formula beside it, and whether it scores on a window's
statistics. The config loader takes names, keys and defaults from STRATEGIES, the PromQL sent
is shaped by Strategy.query, and core/policy.py scores with Strategy.make. Adding a strategy
is a module here, a line below, and its test in tests/unit/test_strategies.py. This package
imports nothing else of loadext: config/ and core/ both read it.
"""

from __future__ import annotations

from loadext.scoring import least_loaded, risk_aware, target_utilization
from loadext.scoring.base import Strategy

STRATEGIES: dict[str, Strategy] = {s.STRATEGY.name: s.STRATEGY for s in (least_loaded, target_utilization, risk_aware)}
DEFAULT_STRATEGY = least_loaded.STRATEGY.name
