"""Reading the SRE-facing YAML into a Config: line-tracking loader, field validation, builders.

Validation is strict on purpose. A typo in a ConfigMap that is silently ignored ("treshold")
leaves a cluster scheduling with defaults nobody chose; so unknown keys are errors, and every
error names the field path and the line it came from.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml

from loadext.config.presets import DEFAULT_THRESHOLDS, PRESETS
from loadext.config.prometheus import read_prometheus
from loadext.config.promql import syntax_error
from loadext.config.reading import (
    LineList,
    LineLoader,
    Section,
    boolean,
    choice,
    positive_duration,
    ratio,
    string,
    weight,
)
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
    NodeIdentity,
    Pool,
    Scoring,
    Signal,
    default_of,
)
from loadext.config.sections import herd_guard as herd_guard_section
from loadext.config.sections import rebalance as rebalance_section
from loadext.scoring import STRATEGIES
from loadext.scoring.base import ParamKind


def parse_config(text: str, source: str = "config", check_queries: bool = False) -> Config:
    """Parse and validate a YAML config document, or raise ConfigError listing every problem.

    With `check_queries` every signal's PromQL is parsed too (check-config does; a live reload
    does not, so that a parser lagging Prometheus' syntax can never lock a working config out).
    """
    try:
        data = yaml.load(text, Loader=LineLoader)
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
    document = Section(data, "", errors, 1)
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


def _check_queries(doc: Section, config: Config) -> None:
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
            Section(item, path, doc.errors, None).value_error("query", f"PromQL does not parse: {problem}")
        else:
            doc.error("preset", f"the preset's {signal.name} query does not parse: {problem}")


def _build(doc: Section) -> Config:
    prometheus = read_prometheus(doc)

    preset_name = doc.get("preset", choice(*PRESETS), None)
    preset = PRESETS.get(preset_name) if preset_name else None

    ident = doc.section("nodeIdentity")
    identity = NodeIdentity(
        label=ident.setting(NodeIdentity, "label", string, preset.identity_label if preset else None),
        kind=ident.setting(NodeIdentity, "kind", choice(*IDENTITY_KINDS), preset.identity_kind if preset else None),
    )
    ident.finish()

    refresh = doc.setting(Config, "refresh_interval", positive_duration)
    max_age = doc.setting(Config, "max_data_age", positive_duration)
    if max_age < refresh and doc.has("maxDataAge"):
        doc.error(
            "maxDataAge",
            f"must be at least refreshInterval ({refresh:g}s), or data expires before the next refresh can renew it",
        )

    signals = _signals(doc, preset.queries if preset else {}, preset.optional if preset else {})

    scoring = _scoring(doc.section("scoring"))

    bind = doc.section("bind")
    bind_enabled = bind.setting(Config, "bind_enabled", boolean)
    bind.finish()
    telemetry = doc.section("telemetry")
    per_node = telemetry.setting(Config, "per_node_metrics", boolean)
    telemetry.finish()

    config = Config(
        prometheus=prometheus,
        signals=signals,
        node_identity=identity,
        preset=preset_name,
        refresh_interval=refresh,
        max_data_age=max_age,
        missing_data=doc.setting(Config, "missing_data", choice(*MISSING_DATA_POLICIES)),
        failure_policy=doc.setting(Config, "failure_policy", choice(*FAILURE_POLICIES)),
        scoring=scoring,
        rejected_nodes=doc.setting(Config, "rejected_nodes", choice(*REJECTION_KINDS)),
        bind_enabled=bind_enabled,
        per_node_metrics=per_node,
        pools=_pools(doc, signals),
        herd_guard=herd_guard_section(doc, signals, refresh),
        filter_mode=doc.setting(Config, "filter_mode", choice(*FILTER_MODES)),
        rebalance=rebalance_section(doc.section("rebalance")),
    )
    doc.finish()
    return config


_PARAM_READERS: dict[ParamKind, Callable[[Any], float]] = {
    "ratio": ratio,
    "duration": positive_duration,
    "nonnegative": weight,
}


def _scoring(section: Section) -> Scoring:
    """The strategy and its parameters, as loadext/scoring/ declares them. Every strategy's
    parameters are read and checked, whichever is chosen, so that switching strategies is one
    line and a typo in another's parameter is still an error."""
    name = section.setting(Scoring, "strategy", choice(*STRATEGIES))
    read = {
        strategy: tuple((p.key, section.get(p.key, _PARAM_READERS[p.kind], p.default)) for p in spec.params)
        for strategy, spec in STRATEGIES.items()
    }
    section.finish()
    return Scoring(name, read[name])


def _evict_at(section: Section, threshold: float | None, inherited: float | None) -> float | None:
    """A signal's evictAt: above its threshold (the gap is the hysteresis), and only with one.
    Not written here, it is `inherited` (a pool's signal: the base signal's) while that is still
    above this threshold, else the default (None: threshold + EVICT_MARGIN)."""
    if "evictAt" not in section.data:
        return inherited if threshold is not None and inherited is not None and inherited > threshold else None
    evict_at = section.get("evictAt", ratio, inherited)
    if threshold is None:
        section.error("evictAt", "needs a threshold: a node is hot only above the level the filter refuses at")
    elif evict_at is not None and evict_at <= threshold:
        section.error(
            "evictAt",
            f"must be above the threshold ({threshold:g}): between the two a node is refused but not yet "
            "moved from, which keeps the rebalancer from flapping",
        )
    return evict_at


def _pools(doc: Section, signals: tuple[Signal, ...]) -> tuple[Pool, ...]:
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
        entry = Section(item, f"pools[{index}]", doc.errors, raw.lines[index] if isinstance(raw, LineList) else None)
        if not entry.valid:
            continue
        name = entry.get("name", string, "")
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
            line = listed.lines[signal_index] if isinstance(listed, LineList) else entry.line
            section = Section(override, where, doc.errors, line)
            if not section.valid:
                continue
            signal_name = section.get("name", string, "")
            base = by_name.get(signal_name)
            if base is None:
                section.error("name", f"no signal named {signal_name!r} (signals: {', '.join(by_name)})")
                section.finish()
                continue
            section.name_by(signal_name)
            threshold = base.threshold
            if "threshold" in section.data and section.data["threshold"] is None:
                threshold = None
            threshold = section.get("threshold", ratio, threshold)
            overrides[signal_name] = Signal(
                name=signal_name,
                hard=base.hard,
                query=base.query,
                threshold=threshold,
                weight=section.get("weight", weight, base.weight),
                evict_at=_evict_at(section, threshold, base.evict_at),
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
        "evict_at": default_of(Signal, "evict_at"),
    }


def _signals(doc: Section, preset_queries: dict[str, str], optional: dict[str, str]) -> tuple[Signal, ...]:
    """Preset signals first, then the user's entries: same name overrides, new name adds (with
    the preset's optional query for that name, if it has one: cpu_pressure)."""
    merged = {name: _default_spec(name, query) for name, query in preset_queries.items()}
    raw = doc.raw("signals")
    if raw is not None and not isinstance(raw, list):
        doc.error("signals", "must be a list of {name, query, threshold, weight}")
        raw = None
    user_names: set[str] = set()
    for index, item in enumerate(raw or []):
        path = f"signals[{index}]"
        entry = Section(item, path, doc.errors, raw.lines[index] if isinstance(raw, LineList) else None)
        if not entry.valid:
            continue
        name = entry.get("name", string, "")
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
        base = merged.get(name) or _default_spec(name, optional.get(name))
        if "threshold" in entry.data and entry.data["threshold"] is None:
            base["threshold"] = None  # explicit null: score on this signal, never filter on it
        merged[name] = {
            "query": entry.get("query", string, base["query"]),
            "threshold": entry.get("threshold", ratio, base["threshold"]),
            "weight": entry.get("weight", weight, base["weight"]),
            "hard": entry.get("hard", boolean, base["hard"]),
        }
        merged[name]["evict_at"] = _evict_at(entry, merged[name]["threshold"], base["evict_at"])
        if merged[name]["query"] is None:
            entry.error("query", "is required (no preset provides a query for this signal)")
        if merged[name]["threshold"] is None and merged[name]["weight"] == 0:
            entry.error("weight", "is 0 and there is no threshold: this signal would do nothing")
        entry.finish()
    if not merged:
        doc.error("signals", "no signals: give a preset or at least one signal")
    return tuple(
        Signal(
            name=name,
            query=spec["query"] or "",
            threshold=spec["threshold"],
            weight=spec["weight"],
            hard=spec["hard"],
            evict_at=spec["evict_at"],
        )
        for name, spec in merged.items()
    )
