"""Config validation: every error names the field and its line; presets merge with overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from loadext.config import ConfigError, parse_config, parse_duration
from loadext.config.presets import PRESETS
from loadext.config.schema import setting_keys

BASE = 'prometheus: {url: "http://prometheus:9090"}\n'


def errors_of(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(text)
    return [str(e) for e in info.value.errors]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("15s", 15), ("1m30s", 90), ("250ms", 0.25), ("1h", 3600), ("1.5s", 1.5), ("2m0s", 120)],
)
def test_durations_as_kubernetes_writes_them(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["15", "15 s", "s", "1d", "-5s", "", "1m30"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_minimal_config_with_preset() -> None:
    config = parse_config(BASE + "preset: kube-prometheus-stack\n")
    assert [s.name for s in config.signals] == ["cpu", "memory"]
    assert config.node_identity.label == "node" and config.node_identity.kind == "name"
    assert config.signals[0].threshold == 0.85 and config.refresh_interval == 15
    assert config.failure_policy == "open" and config.missing_data == "pass"


def test_preset_identity_and_overrides() -> None:
    config = parse_config(
        BASE
        + """
preset: node-exporter-by-ip
signals:
  - {name: cpu, threshold: 0.7}
  - {name: memory, threshold: null, weight: 2}
  - {name: pressure, query: 'rate(node_pressure_cpu_waiting_seconds_total[5m])', threshold: 0.5}
"""
    )
    signals = {s.name: s for s in config.signals}
    assert config.node_identity.kind == "address" and config.node_identity.label == "instance"
    assert signals["cpu"].threshold == 0.7
    assert signals["cpu"].query == PRESETS["node-exporter-by-ip"].queries["cpu"]
    assert signals["memory"].threshold is None and signals["memory"].weight == 2
    assert signals["pressure"].weight == 1


def test_every_error_names_field_and_line() -> None:
    errors = errors_of("""prometheus:
  url: "ftp://nowhere"
  timeout: 2
refreshInterval: 10s
maxDataAge: 5s
signals:
  - name: cpu
    query: up
    treshold: 0.8
  - name: memory
    query: up
    threshold: 1.5
missingData: maybe
scoring: {strategy: mostFree}
""")
    assert errors == [
        "line 2: prometheus.url: must be an http:// or https:// URL, got 'ftp://nowhere'",
        "line 3: prometheus.timeout: must be a duration string such as 15s or 1m30s",
        "line 5: maxDataAge: must be at least refreshInterval (10s), or data expires before the "
        "next refresh can renew it",
        "line 9: signals[cpu].treshold: unknown key; did you mean 'threshold'? (known keys here: hard, name, query, "
        "threshold, weight)",
        "line 12: signals[memory].threshold: must be a ratio in (0, 1], got 1.5: for 1.5% write 0.015",
        "line 14: scoring.strategy: must be one of leastLoaded, targetUtilization, riskAware; got 'mostFree'",
        "line 13: missingData: must be one of pass, reject; got 'maybe'",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("signals: []\n", "prometheus.url: is required"),
        (BASE, "signals: no signals: give a preset or at least one signal"),
        (BASE + "preset: kube-prom\n", "preset: must be one of kube-prometheus-stack"),
        (BASE + "signals:\n  - {name: cpu}\n", "signals[cpu].query: is required"),
        (
            BASE + "signals:\n  - {name: cpu, threshold: 85}\n",
            "signals[cpu].threshold: must be a ratio in (0, 1], got 85: for 85% write 0.85",
        ),
        (
            BASE + "signals:\n  - {name: cpu, threshold: 85%}\n",
            "signals[cpu].threshold: must be a number, got '85%': write 0.85, a ratio",
        ),
        (BASE + "refreshIntervall: 15s\n", "refreshIntervall: unknown key; did you mean 'refreshInterval'?"),
        ("", "<document>: the file is empty: it needs at least prometheus.url, and a preset or signals"),
        ("# only a comment\n", "<document>: the document holds no settings (only comments?)"),
        (BASE + "signals:\n  - {name: CPU, query: up}\n", "signals[0].name: must match"),
        (BASE + "signals:\n  - {name: x, query: up, threshold: null, weight: 0}\n", "would do nothing"),
        (BASE + "signals:\n  - {name: x, query: up}\n  - {name: x, query: up}\n", "listed twice"),
        (BASE + "signals: {cpu: up}\n", "signals: must be a list"),
        (BASE + "failurePolicy: open\nfailurePolicy: closed\n", "duplicate key 'failurePolicy'"),
        ("prometheus: [\n", "invalid YAML"),
        ("- 1\n", "<document>: must be a mapping"),
        (BASE + "preset: kube-prometheus\nextra: 1\n", "line 3: extra: unknown key"),
        (
            BASE + "preset: kube-prometheus\nherdGuard:\n  podUsage:\n    cpu: sum(rate(x[2m])\n",
            "line 5: herdGuard.podUsage.cpu: PromQL does not parse",
        ),
        (
            BASE + "preset: kube-prometheus\nherdGuard: {podUsage: {cpu: 3}}\n",
            "herdGuard.podUsage.cpu: must be a PromQL",
        ),
        (BASE + "preset: kube-prometheus\nherdGuard: {podUsage: {disk: x}}\n", "herdGuard.podUsage.disk: unknown key"),
    ],
)
def test_rejected_documents(text: str, expected: str) -> None:
    assert any(expected in error for error in errors_of(text)), errors_of(text)


def test_pod_usage_learning_is_on_by_default_and_off_per_resource() -> None:
    guard = parse_config(BASE + "preset: kube-prometheus\n").herd_guard
    assert set(guard.pod_usage_queries()) == {"cpu", "memory"} and guard.pod_usage_settle == 0  # irate
    off = parse_config(BASE + "preset: kube-prometheus\nherdGuard: {podUsage: {memory: ''}}\n").herd_guard
    assert set(off.pod_usage_queries()) == {"cpu"}
    slow = "herdGuard: {podUsage: {cpu: 'sum by (namespace, pod) (rate(c[3m]))'}}\n"
    assert parse_config(BASE + "preset: kube-prometheus\n" + slow).herd_guard.pod_usage_settle == 180


def test_hash_tracks_effective_config_not_formatting() -> None:
    a = parse_config(BASE + "preset: kube-prometheus\n")
    b = parse_config("# a comment\n" + BASE + "preset: kube-prometheus\nrefreshInterval: 15s\n")
    c = parse_config(BASE + "preset: kube-prometheus\nrefreshInterval: 10s\n")
    assert a.hash == b.hash != c.hash


VALUES = Path(__file__).resolve().parents[2] / "charts" / "loadext" / "values.yaml"


def _chart_config() -> tuple[dict[str, Any], dict[str, Any]]:
    """The chart's `config` value, and its commented block of every other setting, parsed."""
    text = VALUES.read_text()
    active = yaml.safe_load(text)["config"]
    block = text[text.index("  # Every other setting") :].splitlines()[2:]
    reference = yaml.safe_load("\n".join(line.removeprefix("  # ") for line in block if line.startswith("  # ")))
    return active, reference


def _paths(value: Any, prefix: str = "") -> set[str]:
    if isinstance(value, dict):
        found = set()
        for key, item in value.items():
            path = f"{prefix}.{key}" if prefix else key
            found |= {path} | _paths(item, path)
        return found
    if isinstance(value, list) and value:
        return _paths(value[0], prefix + "[]")
    return set()


def test_the_charts_values_name_every_setting() -> None:
    active, reference = _chart_config()
    missing = set(setting_keys()) - _paths(active) - _paths(reference)
    assert not missing, f"charts/loadext/values.yaml does not name {sorted(missing)}"


def test_the_charts_documented_defaults_are_the_defaults() -> None:
    """The commented block, applied over the chart's config, changes nothing (its examples of
    lists and its derived values aside)."""
    active, reference = _chart_config()

    def merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
        out = dict(base)
        for key, value in extra.items():
            if value is None or key in ("signals", "pools"):
                continue
            value = merged(out.get(key) or {}, value) if isinstance(value, dict) else value
            if value != {}:  # a block of nulls: named, not set
                out[key] = value
        return out

    assert parse_config(yaml.safe_dump(merged(active, reference))) == parse_config(yaml.safe_dump(active))
