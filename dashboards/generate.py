"""Generates loadext's Grafana dashboards (classic JSON model) into this folder.

    python3 dashboards/generate.py          # rewrite the JSON files
    python3 dashboards/generate.py --check  # exit 1 if the committed JSON is stale

The JSON files are the artifact Grafana and the kustomize ConfigMap generator consume; this
script is their single source, so panels share one style and the tests can read the queries.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SCHEMA_VERSION = 42


def target(expr: str, legend: str = "", instant: bool = False, fmt: str = "time_series") -> dict[str, Any]:
    return {
        "datasource": DATASOURCE,
        "expr": expr,
        "legendFormat": legend,
        "instant": instant,
        "range": not instant,
        "format": fmt,
    }


class Layout:
    """Hands out panel ids and grid positions row by row on Grafana's 24-column grid."""

    def __init__(self) -> None:
        self.panels: list[dict[str, Any]] = []
        self.x = self.y = self.row_height = 0

    def add(self, panel: dict[str, Any], width: int, height: int = 8) -> None:
        if self.x + width > 24:
            self.x, self.y = 0, self.y + self.row_height
            self.row_height = 0
        panel["id"] = len(self.panels) + 1
        panel["gridPos"] = {"x": self.x, "y": self.y, "w": width, "h": height}
        self.x += width
        self.row_height = max(self.row_height, height)
        self.panels.append(panel)


def panel(
    kind: str, title: str, description: str, unit: str, targets: list[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    for ref, t in zip("ABCDEFGH", targets, strict=False):
        t["refId"] = ref
    defaults: dict[str, Any] = {"unit": unit}
    defaults.update(extra.pop("defaults", {}))
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "targets": targets,
        "fieldConfig": {"defaults": defaults, "overrides": extra.pop("overrides", [])},
        "options": extra.pop("options", {}),
        **extra,
    }


def dashboard(
    uid: str, title: str, description: str, layout: Layout, variables: list[dict[str, Any]]
) -> dict[str, Any]:
    datasource_variable = {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
    }
    job_variable = {
        "name": "job",
        "label": "Job",
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": "label_values(loadext_build_info, job)", "refId": "job"},
        "definition": "label_values(loadext_build_info, job)",
        "refresh": 2,
        "current": {},
        "includeAll": False,
        "multi": False,
        "hide": 0,
    }
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["loadext", "kubernetes", "scheduling"],
        "editable": False,
        "graphTooltip": 1,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "timezone": "",
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "templating": {"list": [datasource_variable, job_variable, *variables]},
        "annotations": {"list": []},
        "links": [],
        "panels": layout.panels,
    }


def value_map(zero: tuple[str, str], one: tuple[str, str]) -> dict[str, Any]:
    """Show 0 and 1 as words in colour (a gauge that is really a yes/no)."""
    options = {"0": {"text": zero[0], "color": zero[1]}, "1": {"text": one[0], "color": one[1]}}
    return {"mappings": [{"type": "value", "options": options}]}


def threshold_steps(*steps: tuple[str, float | None]) -> dict[str, Any]:
    return {"thresholds": {"mode": "absolute", "steps": [{"color": c, "value": v} for c, v in steps]}}


SEL = 'job="$job"'


def placement() -> dict[str, Any]:
    layout = Layout()
    layout.add(
        panel(
            "timeseries",
            "Signal per node, with thresholds",
            "What loadext believes each node uses, per signal (0..1), against the configured threshold (dashed). "
            "Nodes above their line are refused by filter. Flat lines mean Prometheus data stopped changing.",
            "percentunit",
            [
                target(f'loadext_node_signal_ratio{{{SEL}, node=~"$node", signal=~"$signal"}}', "{{node}} {{signal}}"),
                target(f'loadext_signal_threshold_ratio{{{SEL}, signal=~"$signal"}}', "threshold {{signal}}"),
            ],
            defaults={"min": 0, "max": 1},
            overrides=[
                {
                    "matcher": {"id": "byRegexp", "options": "threshold.*"},
                    "properties": [
                        {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
                        {"id": "color", "value": {"mode": "fixed", "fixedColor": "red"}},
                    ],
                }
            ],
        ),
        16,
        9,
    )
    layout.add(
        panel(
            "bargauge",
            "Hottest nodes now",
            "The ten nodes with the highest value of each signal. Read against the thresholds on the left.",
            "percentunit",
            [
                target(
                    f'topk(10, loadext_node_signal_ratio{{{SEL}, signal=~"$signal"}})',
                    "{{node}} {{signal}}",
                    instant=True,
                )
            ],
            defaults={"min": 0, "max": 1, **threshold_steps(("green", None), ("orange", 0.7), ("red", 0.85))},
            options={"orientation": "horizontal", "displayMode": "gradient"},
        ),
        8,
        9,
    )
    layout.add(
        panel(
            "timeseries",
            "Preferred node per prioritize call",
            "How often each node got loadext's best score in prioritize: where loadext steers new pods. "
            "kube-scheduler adds its own plugins' scores, so this is loadext's vote, not the placement.",
            "ops",
            [
                target(
                    f'sum by (node) (rate(loadext_node_preferred_total{{{SEL}, node=~"$node"}}[$__rate_interval]))',
                    "{{node}}",
                )
            ],
        ),
        12,
    )
    layout.add(
        panel(
            "timeseries",
            "Pods placed per node (kube-state-metrics)",
            "Pods per node as kube-state-metrics reports them, to compare with loadext's preferences. Empty where "
            "kube-state-metrics is not installed.",
            "short",
            [target('sum by (node) (kube_pod_info{node=~"$node", node!=""})', "{{node}}")],
        ),
        12,
    )
    layout.add(
        panel(
            "timeseries",
            "Rejections by signal",
            "Nodes refused per second, by the signal and cause (threshold, missing data, degraded mode). A rising "
            "'threshold' share means real load is the limit; 'missing' points at node mapping or exporters.",
            "ops",
            [
                target(
                    f'sum by (signal, cause) (rate(loadext_node_rejections_total{{{SEL}, signal=~"$signal"}}'
                    "[$__rate_interval]))",
                    "{{signal}} {{cause}}",
                )
            ],
        ),
        12,
    )
    layout.add(
        panel(
            "state-timeline",
            "Refused nodes by node",
            "Nodes loadext's filter refuses right now (red), over time. A node that stays red is hot or has no data.",
            "short",
            [target(f'loadext_node_schedulable{{{SEL}, node=~"$node"}}', "{{node}}")],
            defaults=value_map(("refused", "red"), ("ok", "green")),
        ),
        12,
    )
    layout.add(
        panel(
            "bargauge",
            "Score distribution",
            "Scores loadext returned to prioritize in the range, by value (0 = busiest, 10 = idle). A pile at 5 "
            "means missing data or degraded mode (neutral scores).",
            "short",
            [
                target(
                    f"sum by (score) (increase(loadext_prioritize_scores_total{{{SEL}}}[$__range]))",
                    "{{score}}",
                    instant=True,
                )
            ],
            options={"orientation": "vertical", "displayMode": "basic"},
        ),
        12,
    )
    layout.add(
        panel(
            "timeseries",
            "Share of filter calls with no fit",
            "Filter calls in which loadext refused every candidate node. Sustained non-zero: the cluster is near "
            "capacity in real terms, or thresholds are too tight.",
            "percentunit",
            [
                target(
                    f"sum(rate(loadext_filter_no_fit_total{{{SEL}}}[$__rate_interval])) / "
                    f'clamp_min(sum(rate(loadext_requests_total{{{SEL}, verb="filter"}}'
                    "[$__rate_interval])), 1e-9)",
                    "no fit",
                )
            ],
            defaults={"min": 0, "max": 1},
        ),
        12,
    )
    layout.add(
        panel(
            "table",
            "Nodes now: signals, verdict, data age",
            "One row per node: each signal's value, whether filter passes it, its score, and the age of its data. "
            "Data older than maxDataAge counts as missing.",
            "short",
            [
                target(
                    f'loadext_node_signal_ratio{{{SEL}, node=~"$node", signal=~"$signal"}}', instant=True, fmt="table"
                ),
                target(f'loadext_node_schedulable{{{SEL}, node=~"$node"}}', instant=True, fmt="table"),
                target(f'loadext_node_score{{{SEL}, node=~"$node"}}', instant=True, fmt="table"),
                target(
                    f'time() - loadext_node_signal_timestamp_seconds{{{SEL}, node=~"$node", signal=~"$signal"}}',
                    instant=True,
                    fmt="table",
                ),
            ],
            transformations=[
                {"id": "merge", "options": {}},
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {"Time": True, "__name__": True, "instance": True, "job": True},
                        "renameByName": {
                            "Value #A": "value",
                            "Value #B": "passes",
                            "Value #C": "score",
                            "Value #D": "data age (s)",
                        },
                    },
                },
            ],
        ),
        24,
        10,
    )
    variables = [
        {
            "name": "node",
            "label": "Node",
            "type": "query",
            "datasource": DATASOURCE,
            "query": {"query": f"label_values(loadext_node_signal_ratio{{{SEL}}}, node)", "refId": "node"},
            "definition": f"label_values(loadext_node_signal_ratio{{{SEL}}}, node)",
            "refresh": 2,
            "includeAll": True,
            "multi": True,
            "allValue": ".*",
            "current": {},
            "hide": 0,
        },
        {
            "name": "signal",
            "label": "Signal",
            "type": "query",
            "datasource": DATASOURCE,
            "query": {"query": f"label_values(loadext_signal_threshold_ratio{{{SEL}}}, signal)", "refId": "signal"},
            "definition": f"label_values(loadext_signal_threshold_ratio{{{SEL}}}, signal)",
            "refresh": 2,
            "includeAll": True,
            "multi": True,
            "allValue": ".*",
            "current": {},
            "hide": 0,
        },
    ]
    return dashboard(
        "loadext-placement",
        "loadext / Placement",
        "Where loadext steers pods and why: node load against thresholds, refusals, scores.",
        layout,
        variables,
    )


def health() -> dict[str, Any]:
    layout = Layout()
    layout.add(
        panel(
            "stat",
            "Degraded",
            "1 while no signal has fresh data: the failure policy decides every node "
            "(open: all pass with neutral scores; closed: all refused).",
            "short",
            [target(f"max(loadext_degraded{{{SEL}}})", instant=True)],
            defaults=value_map(("no", "green"), ("DEGRADED", "red")),
        ),
        6,
        5,
    )
    layout.add(
        panel(
            "stat",
            "Snapshot age",
            "Time since the newest successful Prometheus query behind loadext's decisions. "
            "Above maxDataAge, values count as missing.",
            "s",
            [target(f"time() - max(loadext_snapshot_timestamp_seconds{{{SEL}}})", instant=True)],
            defaults=threshold_steps(("green", None), ("orange", 60), ("red", 120)),
        ),
        6,
        5,
    )
    layout.add(
        panel(
            "stat",
            "Active config",
            "Hash of the config in force, per replica. Replicas disagreeing means a reload reached some of them only.",
            "short",
            [target(f"count by (hash) (loadext_config_info{{{SEL}}})", "{{hash}}", instant=True)],
            options={"textMode": "name"},
        ),
        6,
        5,
    )
    layout.add(
        panel(
            "stat",
            "Last config reload",
            "Whether the last config version loadext saw was valid. 'failed' means "
            "the last good config is still in force; see the log or the ConfigMap's Events.",
            "short",
            [target(f"min(loadext_config_last_reload_successful{{{SEL}}})", instant=True)],
            defaults=value_map(("failed", "red"), ("ok", "green")),
        ),
        6,
        5,
    )
    layout.add(
        panel(
            "timeseries",
            "Requests per verb",
            "Extender calls per second by verb and outcome. bad_request: "
            "malformed bodies; error: a loadext bug (see the log).",
            "reqps",
            [
                target(
                    f"sum by (verb, outcome) (rate(loadext_requests_total{{{SEL}}}[$__rate_interval]))",
                    "{{verb}} {{outcome}}",
                )
            ],
        ),
        12,
    )
    layout.add(
        panel(
            "timeseries",
            "Latency p50 / p99 per verb, against the scheduler's timeout",
            "How long loadext takes to answer, by verb. The dashed line is the extender's httpTimeout ($timeout s): "
            "a filter call slower than that fails the pod's scheduling attempt unless the extender is ignorable.",
            "s",
            [
                target(
                    f"histogram_quantile(0.5, sum by (le, verb) (rate(loadext_request_duration_seconds_bucket{{{SEL}}}"
                    "[$__rate_interval])))",
                    "p50 {{verb}}",
                ),
                target(
                    f"histogram_quantile(0.99, sum by (le, verb) (rate(loadext_request_duration_seconds_bucket{{{SEL}}}"
                    "[$__rate_interval])))",
                    "p99 {{verb}}",
                ),
                target("vector($timeout)", "scheduler timeout"),
            ],
            overrides=[
                {
                    "matcher": {"id": "byName", "options": "scheduler timeout"},
                    "properties": [
                        {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
                        {"id": "color", "value": {"mode": "fixed", "fixedColor": "red"}},
                    ],
                }
            ],
            defaults={"custom": {"scaleDistribution": {"type": "log", "log": 10}}},
        ),
        12,
    )
    layout.add(
        panel(
            "timeseries",
            "Prometheus query latency p99 per signal",
            "Background refresh queries (one per signal per refreshInterval). Slow queries never delay scheduling, "
            "but beyond prometheus.timeout they fail and data ages.",
            "s",
            [
                target(
                    f"histogram_quantile(0.99, sum by (le, signal) (rate("
                    f"loadext_prometheus_query_duration_seconds_bucket{{{SEL}}}[$__rate_interval])))",
                    "{{signal}}",
                )
            ],
        ),
        12,
    )
    layout.add(
        panel(
            "timeseries",
            "Prometheus query errors by kind",
            "Failed refresh queries per second by signal and kind: timeout, connection, bad_query (a PromQL typo), "
            "execution, unavailable, http_4xx/5xx, parse, result_type.",
            "ops",
            [
                target(
                    f"sum by (signal, error) (rate(loadext_prometheus_query_errors_total{{{SEL}}}[$__rate_interval]))",
                    "{{signal}} {{error}}",
                )
            ],
        ),
        12,
    )
    layout.add(
        panel(
            "timeseries",
            "Node mapping",
            "Known nodes without a series (unmapped) and series naming no known node "
            "(unmatched), per signal. Non-zero usually means nodeIdentity does not match your Prometheus labels.",
            "short",
            [
                target(f"max by (signal) (loadext_unmapped_nodes{{{SEL}}})", "unmapped {{signal}}"),
                target(f"max by (signal) (loadext_unmatched_series{{{SEL}}})", "unmatched {{signal}}"),
            ],
        ),
        12,
    )
    layout.add(
        panel(
            "timeseries",
            "Config reloads",
            "Config versions applied (success) and rejected (failure) per minute.",
            "short",
            [
                target(
                    f"sum by (result) (increase(loadext_config_reloads_total{{{SEL}}}[$__rate_interval]))", "{{result}}"
                )
            ],
        ),
        12,
    )
    layout.add(
        panel(
            "timeseries",
            "Requests in flight, and refused",
            "Extender requests being read or answered per replica (capped by --max-concurrent-requests), "
            "and per second those refused: 503 overloaded (over a cap), 408 header/body (client too slow).",
            "short",
            [
                target(f"max by (instance) (loadext_requests_in_flight{{{SEL}}})", "in flight {{instance}}"),
                target(
                    f'sum(rate(loadext_requests_total{{{SEL}, outcome="overloaded"}}[$__rate_interval]))',
                    "503 overloaded /s",
                ),
                target(
                    f"sum by (phase) (rate(loadext_client_read_timeouts_total{{{SEL}}}[$__rate_interval]))",
                    "408 {{phase}} /s",
                ),
            ],
        ),
        12,
    )
    layout.add(
        panel(
            "state-timeline",
            "Kubernetes watches",
            "Whether each list/watch (nodes, pods for the herd guard, the configmap) is current (1) or "
            "retrying (0). While retrying loadext decides with what it last knew.",
            "short",
            [target(f"min by (resource) (loadext_kube_watch_healthy{{{SEL}}})", "{{resource}}")],
            defaults=value_map(("retrying", "red"), ("current", "green")),
        ),
        12,
    )
    variables = [
        {
            "name": "timeout",
            "label": "Extender httpTimeout (s)",
            "type": "custom",
            "query": "2,5",
            "current": {"text": "2", "value": "2"},
            "options": [],
            "hide": 0,
        }
    ]
    return dashboard(
        "loadext-health",
        "loadext / Health",
        "Is loadext answering fast, from fresh data, with a valid config?",
        layout,
        variables,
    )


DASHBOARDS = {"loadext-placement.json": placement, "loadext-health.json": health}


def render(build: Any) -> str:
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="fail if the JSON files differ from the generator")
    args = parser.parse_args()
    stale = []
    for name, build in DASHBOARDS.items():
        path = HERE / name
        text = render(build)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"stale: {', '.join(stale)}; run python3 dashboards/generate.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
