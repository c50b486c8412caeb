"""The SRE-facing configuration: schema.py (the Config values), loader.py (YAML with line
numbers and validation), units.py (durations, quantities), presets.py (queries per exporter
stack), promql.py (the offline syntax check). What other packages import is re-exported here.
"""

from loadext.config.loader import load_config, parse_config
from loadext.config.schema import (
    BasicAuth,
    Config,
    ConfigError,
    FieldError,
    HerdGuard,
    NodeIdentity,
    Pool,
    PrometheusConfig,
    Scoring,
    Signal,
    SigV4,
)
from loadext.config.units import parse_duration, quantity

__all__ = [
    "BasicAuth",
    "Config",
    "ConfigError",
    "FieldError",
    "HerdGuard",
    "NodeIdentity",
    "Pool",
    "PrometheusConfig",
    "Scoring",
    "SigV4",
    "Signal",
    "load_config",
    "parse_config",
    "parse_duration",
    "quantity",
]
