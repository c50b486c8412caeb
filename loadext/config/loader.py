"""Reading the SRE-facing YAML into a Config: line-tracking loader, field validation, builders.

Validation is strict on purpose. A typo in a ConfigMap that is silently ignored ("treshold")
leaves a cluster scheduling with defaults nobody chose; so unknown keys are errors, and every
error names the field path and the line it came from.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from typing import Any, TypeVar

import yaml

from loadext.config.presets import DEFAULT_THRESHOLDS, PRESETS
from loadext.config.promql import syntax_error
from loadext.config.schema import (
    FAILURE_POLICIES,
    FILTER_MODES,
    IDENTITY_KINDS,
    MISSING_DATA_POLICIES,
    REJECTION_KINDS,
    SIGNAL_NAME,
    Config,
    ConfigError,
    FieldError,
    HerdGuard,
    NodeIdentity,
    Pool,
    PrometheusConfig,
    Scoring,
    Signal,
    default_of,
    derive_window,
    key_of,
)
from loadext.config.units import parse_duration, quantity
from loadext.scoring import STRATEGIES
from loadext.scoring.base import ParamKind

T = TypeVar("T")

# --- YAML with line numbers -------------------------------------------------------------------


class _LineDict(dict[str, Any]):
    """A mapping that remembers the line of each key, so errors can point at it, and where each
    value starts (line, column), for errors inside a value such as a query."""

    line: int = 0
    lines: dict[str, int]
    starts: dict[str, tuple[int, int | None]]


class _LineList(list[Any]):
    line: int = 0
    lines: list[int]


class _LineLoader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> _LineDict:
    mapping = _LineDict()
    mapping.line = node.start_mark.line + 1
    mapping.lines = {}
    mapping.starts = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if not isinstance(key, str):
            raise yaml.MarkedYAMLError(problem=f"key {key!r} is not a string", problem_mark=key_node.start_mark)
        if key in mapping:
            raise yaml.MarkedYAMLError(problem=f"duplicate key {key!r}", problem_mark=key_node.start_mark)
        mapping[key] = loader.construct_object(value_node, deep=True)
        mapping.lines[key] = line
        mark = value_node.start_mark
        # A block scalar (query: >-) starts on the line after its indicator, at its indentation.
        folded = isinstance(value_node, yaml.ScalarNode) and value_node.style in ("|", ">")
        mapping.starts[key] = (mark.line + 2, None) if folded else (mark.line + 1, mark.column + 1)
    return mapping


def _construct_sequence(loader: yaml.SafeLoader, node: yaml.SequenceNode) -> _LineList:
    seq = _LineList(loader.construct_object(child, deep=True) for child in node.value)
    seq.line = node.start_mark.line + 1
    seq.lines = [child.start_mark.line + 1 for child in node.value]
    return seq


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


# --- field reader ------------------------------------------------------------------------------


class _Section:
    """Reads the keys of one mapping, recording errors instead of stopping at the first."""

    def __init__(self, data: Any, path: str, errors: list[FieldError], line: int | None) -> None:
        self.path = path
        self.errors = errors
        self.line = getattr(data, "line", line)
        self.valid = isinstance(data, dict)
        self.absent = data is None
        if data is not None and not self.valid:
            self.errors.append(FieldError(path or "<document>", self.line, "must be a mapping"))
        self.data: dict[str, Any] = data if self.valid else {}
        self.lines: dict[str, int] = getattr(data, "lines", {}) if self.valid else {}
        self.seen: set[str] = set()

    def child_path(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str, message: str) -> None:
        self.errors.append(FieldError(self.child_path(key), self.lines.get(key, self.line), message))

    def value_error(self, key: str, message: str) -> None:
        """An error inside the key's value, pointed at where the value starts."""
        line, column = getattr(self.data, "starts", {}).get(key, (self.lines.get(key, self.line), None))
        self.errors.append(FieldError(self.child_path(key), line, message, column))

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def setting(self, cls: type, name: str, convert: Callable[[Any], T], default: Any = None) -> T:
        """The field `name` of the config dataclass `cls`, read at its key (the last part of a
        dotted one: the caller holds the section), defaulting to the dataclass's default
        unless `default` (one that depends on other settings) is given."""
        key = key_of(cls, name).rpartition(".")[2]
        value: T = self.get(key, convert, default_of(cls, name) if default is None else default)
        return value

    def get(self, key: str, convert: Callable[[Any], T], default: T) -> T:
        self.seen.add(key)
        raw = self.data.get(key)
        if raw is None:
            return default
        try:
            return convert(raw)
        except (TypeError, ValueError) as exc:
            self.error(key, str(exc))
            return default

    def section(self, key: str) -> _Section:
        self.seen.add(key)
        return _Section(self.data.get(key), self.child_path(key), self.errors, self.lines.get(key, self.line))

    def raw(self, key: str) -> Any:
        self.seen.add(key)
        return self.data.get(key)

    def name_by(self, label: str) -> None:
        """Errors below an entry of a list name it by `label` (signals[cpu]) rather than by index,
        once the entry's own name is known."""
        self.path = f"{self.path.rpartition('[')[0]}[{label}]"

    def finish(self) -> None:
        for key in self.data:
            if key not in self.seen:
                known = ", ".join(sorted(self.seen))
                close = difflib.get_close_matches(str(key), sorted(self.seen), n=1, cutoff=0.6)
                hint = f"did you mean {close[0]!r}? " if close else ""
                self.error(key, f"unknown key; {hint}(known keys here: {known})")


def _string(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be a non-empty string")
    return value


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("must be true or false")
    return value


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        percent = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*%\s*", value) if isinstance(value, str) else None
        if percent:
            raise ValueError(f"must be a number, got {value!r}: write {float(percent.group(1)) / 100:g}, a ratio")
        raise ValueError(f"must be a number, got {value!r}")
    return float(value)


def _promql_or_off(value: Any) -> str:
    """A PromQL query, or "" for off."""
    if not isinstance(value, str):
        raise ValueError('must be a PromQL query, or "" to turn it off')
    problem = syntax_error(value) if value.strip() else None
    if problem is not None:
        raise ValueError(f"PromQL does not parse: {problem}")
    return value.strip()


def _positive_duration(value: Any) -> float:
    seconds = parse_duration(value)
    if seconds <= 0:
        raise ValueError("must be greater than zero")
    return seconds


def _ratio(value: Any) -> float:
    number = _number(value)
    if 1 < number <= 100:
        raise ValueError(f"must be a ratio in (0, 1], got {number:g}: for {number:g}% write {number / 100:g}")
    if not 0 < number <= 1:
        raise ValueError(f"must be a ratio in (0, 1], got {number:g}")
    return number


def _weight(value: Any) -> float:
    number = _number(value)
    if number < 0:
        raise ValueError(f"must be zero or positive, got {number}")
    return number


def _choice(*allowed: str) -> Callable[[Any], str]:
    def convert(value: Any) -> str:
        if value not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}; got {value!r}")
        return str(value)

    return convert


def _url(value: Any) -> str:
    text = _string(value)
    if not re.match(r"^https?://[^/\s]+", text):
        raise ValueError(f"must be an http:// or https:// URL, got {text!r}")
    return text.rstrip("/")


# --- document ----------------------------------------------------------------------------------


def parse_config(text: str, source: str = "config", check_queries: bool = False) -> Config:
    """Parse and validate a YAML config document, or raise ConfigError listing every problem.

    With `check_queries` every signal's PromQL is parsed too (check-config does; a live reload
    does not, so that a parser lagging Prometheus' syntax can never lock a working config out).
    """
    try:
        data = yaml.load(text, Loader=_LineLoader)
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else None
        raise ConfigError([FieldError("<document>", line, f"invalid YAML: {exc.problem}")], source) from exc
    except yaml.YAMLError as exc:
        raise ConfigError([FieldError("<document>", None, f"invalid YAML: {exc}")], source) from exc
    errors: list[FieldError] = []
    if data is None:
        what = "the file is empty" if not text.strip() else "the document holds no settings (only comments?)"
        needed = f"{what}: it needs at least prometheus.url, and a preset or signals"
        raise ConfigError([FieldError("<document>", None, needed)], source)
    document = _Section(data, "", errors, 1)
    if not document.valid:
        raise ConfigError(errors, source)
    config = _build(document)
    if check_queries:
        _check_queries(document, config)
    if errors:
        raise ConfigError(errors, source)
    return config


def load_config(path: str, check_queries: bool = False) -> Config:
    with open(path, encoding="utf-8") as handle:
        return parse_config(handle.read(), source=path, check_queries=check_queries)


def _check_queries(doc: _Section, config: Config) -> None:
    """Each query's PromQL, reported at the signal's own query, or at `preset` for a preset's."""
    listed = doc.data.get("signals")
    entries = {
        item.get("name"): (f"signals[{item.get('name')}]", item)
        for item in (listed if isinstance(listed, list) else [])
        if isinstance(item, dict) and "query" in item
    }
    for signal in config.signals:
        problem = syntax_error(signal.query)
        if problem is None:
            continue
        if signal.name in entries:
            path, item = entries[signal.name]
            _Section(item, path, doc.errors, None).value_error("query", f"PromQL does not parse: {problem}")
        else:
            doc.error("preset", f"the preset's {signal.name} query does not parse: {problem}")


def _build(doc: _Section) -> Config:
    prom = doc.section("prometheus")
    if not prom.has("url") and (prom.valid or prom.absent):
        doc.errors.append(FieldError("prometheus.url", prom.line, "is required"))
    prometheus = PrometheusConfig(
        url=prom.get("url", _url, ""),
        timeout=prom.setting(PrometheusConfig, "timeout", _positive_duration),
        bearer_token_file=prom.setting(PrometheusConfig, "bearer_token_file", _string),
        ca_file=prom.setting(PrometheusConfig, "ca_file", _string),
        insecure_skip_verify=prom.setting(PrometheusConfig, "insecure_skip_verify", _boolean),
    )
    prom.finish()

    preset_name = doc.get("preset", _choice(*PRESETS), None)
    preset = PRESETS.get(preset_name) if preset_name else None

    ident = doc.section("nodeIdentity")
    identity = NodeIdentity(
        label=ident.setting(NodeIdentity, "label", _string, preset.identity_label if preset else None),
        kind=ident.setting(NodeIdentity, "kind", _choice(*IDENTITY_KINDS), preset.identity_kind if preset else None),
    )
    ident.finish()

    refresh = doc.setting(Config, "refresh_interval", _positive_duration)
    max_age = doc.setting(Config, "max_data_age", _positive_duration)
    if max_age < refresh and doc.has("maxDataAge"):
        doc.error(
            "maxDataAge",
            f"must be at least refreshInterval ({refresh:g}s), or data expires before the next refresh can renew it",
        )

    signals = _signals(doc, preset.queries if preset else {})

    scoring = _scoring(doc.section("scoring"))

    bind = doc.section("bind")
    bind_enabled = bind.setting(Config, "bind_enabled", _boolean)
    bind.finish()
    telemetry = doc.section("telemetry")
    per_node = telemetry.setting(Config, "per_node_metrics", _boolean)
    telemetry.finish()

    config = Config(
        prometheus=prometheus,
        signals=signals,
        node_identity=identity,
        preset=preset_name,
        refresh_interval=refresh,
        max_data_age=max_age,
        missing_data=doc.setting(Config, "missing_data", _choice(*MISSING_DATA_POLICIES)),
        failure_policy=doc.setting(Config, "failure_policy", _choice(*FAILURE_POLICIES)),
        scoring=scoring,
        rejected_nodes=doc.setting(Config, "rejected_nodes", _choice(*REJECTION_KINDS)),
        bind_enabled=bind_enabled,
        per_node_metrics=per_node,
        pools=_pools(doc, signals),
        herd_guard=_herd_guard(doc, signals, refresh),
        filter_mode=doc.setting(Config, "filter_mode", _choice(*FILTER_MODES)),
    )
    doc.finish()
    return config


_PARAM_READERS: dict[ParamKind, Callable[[Any], float]] = {
    "ratio": _ratio,
    "duration": _positive_duration,
    "nonnegative": _weight,
}


def _scoring(section: _Section) -> Scoring:
    """The strategy and its parameters, as loadext/scoring/ declares them. Every strategy's
    parameters are read and checked, whichever is chosen, so that switching strategies is one
    line and a typo in another's parameter is still an error."""
    name = section.setting(Scoring, "strategy", _choice(*STRATEGIES))
    read = {
        strategy: tuple((p.key, section.get(p.key, _PARAM_READERS[p.kind], p.default)) for p in spec.params)
        for strategy, spec in STRATEGIES.items()
    }
    section.finish()
    return Scoring(name, read[name])


def _quantity(value: Any) -> float:
    parsed = quantity(value)
    if parsed is None or parsed < 0:
        raise ValueError(f"must be a Kubernetes quantity such as 250m or 200Mi, got {value!r}")
    return parsed


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"must be a whole number >= 0, got {value!r}")
    return value


def _herd_guard(doc: _Section, signals: tuple[Signal, ...], refresh: float) -> HerdGuard:
    section = doc.section("herdGuard")
    best_effort = section.section("bestEffort")
    pod_usage = section.section("podUsage")
    guard = HerdGuard(
        enabled=section.setting(HerdGuard, "enabled", _boolean),
        window=section.setting(
            HerdGuard, "window", _positive_duration, derive_window((s.query for s in signals), refresh)
        ),
        cpu_limit_factor=section.setting(HerdGuard, "cpu_limit_factor", _ratio),
        memory_limit_factor=section.setting(HerdGuard, "memory_limit_factor", _ratio),
        best_effort_cpu=best_effort.setting(HerdGuard, "best_effort_cpu", _quantity),
        best_effort_memory=best_effort.setting(HerdGuard, "best_effort_memory", _quantity),
        burst_cap=section.setting(HerdGuard, "burst_cap", _count),
        soft=section.setting(HerdGuard, "soft", _boolean),
        pod_usage_cpu=pod_usage.setting(HerdGuard, "pod_usage_cpu", _promql_or_off),
        pod_usage_memory=pod_usage.setting(HerdGuard, "pod_usage_memory", _promql_or_off),
    )
    pod_usage.finish()
    best_effort.finish()
    section.finish()
    return guard


def _pools(doc: _Section, signals: tuple[Signal, ...]) -> tuple[Pool, ...]:
    """`pools: [{name, nodeSelector: {label: value}, signals: [{name, threshold, weight}]}]`."""
    raw = doc.raw("pools")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        doc.error("pools", "must be a list of {name, nodeSelector, signals}")
        return ()
    by_name = {s.name: s for s in signals}
    pools: list[Pool] = []
    for index, item in enumerate(raw):
        entry = _Section(item, f"pools[{index}]", doc.errors, raw.lines[index] if isinstance(raw, _LineList) else None)
        if not entry.valid:
            continue
        name = entry.get("name", _string, "")
        if not name:
            entry.error("name", "is required")
        elif name in {p.name for p in pools}:
            entry.error("name", f"pool {name!r} is listed twice")
        if name:
            entry.name_by(name)
        selector = entry.raw("nodeSelector")
        if (
            not isinstance(selector, dict)
            or not selector
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in selector.items())
        ):
            entry.error("nodeSelector", "must be a non-empty map of label: value strings")
            selector = {}
        overrides: dict[str, Signal] = {}
        listed = entry.raw("signals")
        if not isinstance(listed, list) or not listed:
            entry.error("signals", "must list at least one {name, threshold, weight} override")
            listed = []
        for signal_index, override in enumerate(listed):
            where = f"{entry.path}.signals[{signal_index}]"
            line = listed.lines[signal_index] if isinstance(listed, _LineList) else entry.line
            section = _Section(override, where, doc.errors, line)
            if not section.valid:
                continue
            signal_name = section.get("name", _string, "")
            base = by_name.get(signal_name)
            if base is None:
                section.error("name", f"no signal named {signal_name!r} (signals: {', '.join(by_name)})")
                section.finish()
                continue
            section.name_by(signal_name)
            threshold = base.threshold
            if "threshold" in section.data and section.data["threshold"] is None:
                threshold = None
            overrides[signal_name] = Signal(
                name=signal_name,
                hard=base.hard,
                query=base.query,
                threshold=section.get("threshold", _ratio, threshold),
                weight=section.get("weight", _weight, base.weight),
            )
            section.finish()
        entry.finish()
        pools.append(Pool(name, tuple(sorted(selector.items())), tuple(overrides.get(s.name, s) for s in signals)))
    return tuple(pools)


def _default_spec(name: str, query: str | None) -> dict[str, Any]:
    """A signal's settings before the user's entry: a preset's query (or none), the default
    threshold for its name, and Signal's defaults for the rest."""
    return {
        "query": query,
        "threshold": DEFAULT_THRESHOLDS.get(name),
        "weight": default_of(Signal, "weight"),
        "hard": default_of(Signal, "hard"),
    }


def _signals(doc: _Section, preset_queries: dict[str, str]) -> tuple[Signal, ...]:
    """Preset signals first, then the user's entries: same name overrides, new name adds."""
    merged = {name: _default_spec(name, query) for name, query in preset_queries.items()}
    raw = doc.raw("signals")
    if raw is not None and not isinstance(raw, list):
        doc.error("signals", "must be a list of {name, query, threshold, weight}")
        raw = None
    user_names: set[str] = set()
    for index, item in enumerate(raw or []):
        path = f"signals[{index}]"
        entry = _Section(item, path, doc.errors, raw.lines[index] if isinstance(raw, _LineList) else None)
        if not entry.valid:
            continue
        name = entry.get("name", _string, "")
        if not name:
            entry.error("name", "is required")
            entry.finish()
            continue
        if name in user_names:
            entry.error("name", f"signal {name!r} is listed twice")
        user_names.add(name)
        if not SIGNAL_NAME.match(name):
            entry.error("name", "must match [a-z][a-z0-9_]* (it becomes a metric label)")
        entry.name_by(name)
        base = merged.get(name) or _default_spec(name, None)
        if "threshold" in entry.data and entry.data["threshold"] is None:
            base["threshold"] = None  # explicit null: score on this signal, never filter on it
        merged[name] = {
            "query": entry.get("query", _string, base["query"]),
            "threshold": entry.get("threshold", _ratio, base["threshold"]),
            "weight": entry.get("weight", _weight, base["weight"]),
            "hard": entry.get("hard", _boolean, base["hard"]),
        }
        if merged[name]["query"] is None:
            entry.error("query", "is required (no preset provides a query for this signal)")
        if merged[name]["threshold"] is None and merged[name]["weight"] == 0:
            entry.error("weight", "is 0 and there is no threshold: this signal would do nothing")
        entry.finish()
    if not merged:
        doc.error("signals", "no signals: give a preset or at least one signal")
    return tuple(
        Signal(
            name=name, query=spec["query"] or "", threshold=spec["threshold"], weight=spec["weight"], hard=spec["hard"]
        )
        for name, spec in merged.items()
    )
