"""Generates loadext's Grafana dashboards (classic JSON model) into this folder, with Grafana's own
builders (grafana-foundation-sdk, pinned to its Grafana 11.6 target in the dev extra).

    python dashboards/generate.py          # rewrite the JSON files
    python dashboards/generate.py --check  # exit 1 if the committed JSON is stale

The JSON files are the artefact Grafana, the kustomize ConfigMap generator and the Helm chart
consume; this script is their single source, so panels share one style and the tests can read
the queries. The SDK lays out the grid and types every option; the helpers below only keep the
shared conventions in one place: the `${datasource}` variable everywhere, a `job` selector, a
unit and a description on every panel, ids in order.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

with warnings.catch_warnings():  # the classic builder warns that V2 exists (preview-only)
    warnings.simplefilter("ignore", DeprecationWarning)
    from grafana_foundation_sdk.builders import bargauge, stat, statetimeline, table, timeseries
    from grafana_foundation_sdk.builders import common as common_builders
    from grafana_foundation_sdk.builders import dashboard as builders
    from grafana_foundation_sdk.builders import prometheus as prom
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models import common
    from grafana_foundation_sdk.models import dashboard as models
    from grafana_foundation_sdk.models.prometheus import PromQueryFormat

HERE = Path(__file__).resolve().parent
DATASOURCE = models.DataSourceRef(type_val="prometheus", uid="${datasource}")
SEL = 'job="$job"'
Panel = Any  # any of the SDK's panel builders


def query(expr: str, legend: str = "", instant: bool = False, table_format: bool = False) -> prom.Dataquery:
    target = prom.Dataquery().expr(expr).legend_format(legend).datasource(DATASOURCE)
    target = target.instant() if instant else target.range()
    if table_format:
        target = target.format(PromQueryFormat.TABLE)
    return target


def describe(panel: Panel, title: str, description: str, unit: str, width: int, height: int = 8) -> Panel:
    return panel.title(title).description(description).unit(unit).datasource(DATASOURCE).span(width).height(height)


def with_queries(panel: Panel, *targets: prom.Dataquery) -> Panel:
    for ref, target in zip("ABCDEFGH", targets, strict=False):
        panel = panel.with_target(target.ref_id(ref))
    return panel


def yes_no(zero: tuple[str, str], one: tuple[str, str]) -> list[models.ValueMap]:
    """Show 0 and 1 as words in colour (a gauge that is really a yes/no)."""
    return [
        models.ValueMap(
            options={
                "0": models.ValueMappingResult(text=zero[0], color=zero[1], index=0),
                "1": models.ValueMappingResult(text=one[0], color=one[1], index=1),
            }
        )
    ]


def steps(*colours: tuple[str, float | None]) -> builders.ThresholdsConfig:
    return (
        builders.ThresholdsConfig()
        .mode(models.ThresholdsMode.ABSOLUTE)
        .steps([models.Threshold(value=v, color=c) for c, v in colours])
    )


DASHED_RED = [
    models.DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]}),
    models.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": "red"}),
]


def label_values(name: str, metric: str, label: str, label_text: str) -> builders.QueryVariable:
    expr = f"label_values({metric}, {label})"
    return (
        builders.QueryVariable(name)
        .label(label_text)
        .datasource(DATASOURCE)
        .query({"query": expr, "refId": name})
        .refresh(models.VariableRefresh.ON_TIME_RANGE_CHANGED)
    )


def dashboard(uid: str, title: str, description: str) -> builders.Dashboard:
    return (
        builders.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["loadext", "kubernetes", "scheduling"])
        .readonly()
        .tooltip(models.DashboardCursorSync.CROSSHAIR)
        .time("now-1h", "now")
        .refresh("30s")
        .timezone("")
        .with_variable(builders.DatasourceVariable("datasource").label("Data source").type("prometheus"))
        .with_variable(label_values("job", "loadext_build_info", "job", "Job").multi(False).include_all(False))
    )


def placement() -> builders.Dashboard:
    board = dashboard(
        "loadext-placement",
        "loadext / Placement",
        "Where loadext steers pods and why: node load against thresholds, refusals, scores.",
    )
    board.with_variable(
        label_values("node", f"loadext_node_signal_ratio{{{SEL}}}", "node", "Node")
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )
    board.with_variable(
        label_values("signal", f"loadext_signal_threshold_ratio{{{SEL}}}", "signal", "Signal")
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )
    panels: list[Panel] = [
        with_queries(
            describe(
                timeseries.Panel(),
                "Signal per node, with thresholds",
                "What loadext believes each node uses, per signal (0..1), against the configured threshold (dashed). "
                "Nodes above their line are refused by filter. Flat lines mean Prometheus data stopped changing.",
                "percentunit",
                16,
                9,
            )
            .min(0)
            .max(1)
            .override_by_regexp("threshold.*", DASHED_RED),
            query(f'loadext_node_signal_ratio{{{SEL}, node=~"$node", signal=~"$signal"}}', "{{node}} {{signal}}"),
            query(f'loadext_signal_threshold_ratio{{{SEL}, signal=~"$signal"}}', "threshold {{signal}}"),
        ),
        with_queries(
            describe(
                bargauge.Panel(),
                "Hottest nodes now",
                "The ten nodes with the highest value of each signal. Read against the thresholds on the left.",
                "percentunit",
                8,
                9,
            )
            .min(0)
            .max(1)
            .thresholds(steps(("green", None), ("orange", 0.7), ("red", 0.85)))
            .orientation(common.VizOrientation.HORIZONTAL)
            .display_mode(common.BarGaugeDisplayMode.GRADIENT),
            query(f'topk(10, loadext_node_signal_ratio{{{SEL}, signal=~"$signal"}})', "{{node}} {{signal}}", True),
        ),
        with_queries(
            describe(
                timeseries.Panel(),
                "Preferred node per prioritize call",
                "How often each node got loadext's best score in prioritize: where loadext steers new pods. "
                "kube-scheduler adds its own plugins' scores, so this is loadext's vote, not the placement.",
                "ops",
                12,
            ),
            query(
                f'sum by (node) (rate(loadext_node_preferred_total{{{SEL}, node=~"$node"}}[$__rate_interval]))',
                "{{node}}",
            ),
        ),
        with_queries(
            describe(
                timeseries.Panel(),
                "Pods placed per node (kube-state-metrics)",
                "Pods per node as kube-state-metrics reports them, to compare with loadext's preferences. Empty where "
                "kube-state-metrics is not installed.",
                "short",
                12,
            ),
            query('sum by (node) (kube_pod_info{node=~"$node", node!=""})', "{{node}}"),
        ),
        with_queries(
            describe(
                timeseries.Panel(),
                "Rejections by signal",
                "Nodes refused per second, by the signal and cause (threshold, missing data, degraded mode). A rising "
                "'threshold' share means real load is the limit; 'missing' points at node mapping or exporters.",
                "ops",
                12,
            ),
            query(
                f'sum by (signal, cause) (rate(loadext_node_rejections_total{{{SEL}, signal=~"$signal"}}'
                "[$__rate_interval]))",
                "{{signal}} {{cause}}",
            ),
        ),
        with_queries(
            describe(
                statetimeline.Panel(),
                "Refused nodes by node",
                "Nodes loadext's filter refuses right now (red), over time. A node that stays red is hot or has no "
                "data.",
                "short",
                12,
            ).mappings(yes_no(("refused", "red"), ("ok", "green"))),
            query(f'loadext_node_schedulable{{{SEL}, node=~"$node"}}', "{{node}}"),
        ),
        with_queries(
            describe(
                bargauge.Panel(),
                "Score distribution",
                "Scores loadext returned to prioritize in the range, by value (0 = busiest, 10 = idle). A pile at 5 "
                "means missing data or degraded mode (neutral scores).",
                "short",
                12,
            )
            .orientation(common.VizOrientation.VERTICAL)
            .display_mode(common.BarGaugeDisplayMode.BASIC),
            query(f"sum by (score) (increase(loadext_prioritize_scores_total{{{SEL}}}[$__range]))", "{{score}}", True),
        ),
        with_queries(
            describe(
                timeseries.Panel(),
                "Share of filter calls with no fit",
                "Filter calls in which loadext refused every candidate node. Sustained non-zero: the cluster is near "
                "capacity in real terms, or thresholds are too tight.",
                "percentunit",
                12,
            )
            .min(0)
            .max(1),
            query(
                f"sum(rate(loadext_filter_no_fit_total{{{SEL}}}[$__rate_interval])) / "
                f'clamp_min(sum(rate(loadext_requests_total{{{SEL}, verb="filter"}}[$__rate_interval])), 1e-9)',
                "no fit",
            ),
        ),
        with_queries(
            describe(
                table.Panel(),
                "Nodes now: signals, verdict, data age",
                "One row per node: each signal's value, whether filter passes it, its score, and the age of its "
                "data. Data older than maxDataAge counts as missing.",
                "short",
                24,
                10,
            )
            .with_transformation(models.DataTransformerConfig(id_val="merge", options={}))
            .with_transformation(
                models.DataTransformerConfig(
                    id_val="organize",
                    options={
                        "excludeByName": {"Time": True, "__name__": True, "instance": True, "job": True},
                        "renameByName": {
                            "Value #A": "value",
                            "Value #B": "passes",
                            "Value #C": "score",
                            "Value #D": "data age (s)",
                        },
                    },
                )
            ),
            query(
                f'loadext_node_signal_ratio{{{SEL}, node=~"$node", signal=~"$signal"}}', instant=True, table_format=True
            ),
            query(f'loadext_node_schedulable{{{SEL}, node=~"$node"}}', instant=True, table_format=True),
            query(f'loadext_node_score{{{SEL}, node=~"$node"}}', instant=True, table_format=True),
            query(
                f'time() - loadext_node_signal_timestamp_seconds{{{SEL}, node=~"$node", signal=~"$signal"}}',
                instant=True,
                table_format=True,
            ),
        ),
        with_queries(
            describe(
                timeseries.Panel(),
                "Rebalancer: hot nodes",
                "Nodes at or above evictAt for hotFor refreshes and not yet cool again (docs/rebalancing.md), on the "
                "replica that holds the Lease; the others stand by and show 0.",
                "short",
                12,
            ).min(0),
            query(f"max(loadext_rebalance_hot_nodes{{{SEL}}})", "hot nodes"),
        ),
        with_queries(
            describe(
                timeseries.Panel(),
                "Rebalancer: moves by result",
                "Pods the rebalancer planned to move, by what came of them: evicted, dry_run, pdb_blocked (a "
                "PodDisruptionBudget said no), no_target, rate_limited, no_candidate, failed.",
                "ops",
                12,
            ).min(0),
            query(
                f"sum by (result) (rate(loadext_rebalance_evictions_total{{{SEL}}}[$__rate_interval]))", "{{result}}"
            ),
        ),
        with_queries(
            describe(
                timeseries.Panel(),
                "Rebalancer: did the moves help?",
                "What came of each evicted pod's replacement (the stop rule, docs/rebalancing.md): on_target or "
                "elsewhere (placed, its node within the thresholds for a herd window), pending (not placed within "
                "stopRule.pendingFor), hot (its node went over a threshold). pending and hot pause the workload: "
                "the paused workloads are drawn too, and /explain names them.",
                "short",
                12,
            ).min(0),
            query(
                f"sum by (outcome) (increase(loadext_rebalance_replacements_total{{{SEL}}}[$__rate_interval]))",
                "{{outcome}}",
            ),
            query(f"max(loadext_rebalance_paused_workloads{{{SEL}}})", "paused workloads"),
        ),
        with_queries(
            describe(
                timeseries.Panel(),
                "Rebalancer: daemon pods held back by the refused taint",
                "DaemonSet pods missing from a node only because of loadext.io/refused (taints.refused): the "
                "DaemonSet controller creates none there until the node cools. /explain names node and DaemonSet.",
                "short",
                12,
            ).min(0),
            query(f"max(loadext_rebalance_daemon_pods_held_back{{{SEL}}})", "daemon pods held back"),
        ),
    ]
    return with_panels(board, panels)


def health() -> builders.Dashboard:
    board = dashboard(
        "loadext-health",
        "loadext / Health",
        "Is loadext answering fast, from fresh data, with a valid config?",
    )
    board.with_variable(
        builders.CustomVariable("timeout")
        .label("Extender httpTimeout (s)")
        .values("2,5")
        .current(models.VariableOption(text="2", value="2", selected=True))
    )
    panels: list[Panel] = [
        with_queries(
            describe(
                stat.Panel(),
                "Degraded",
                "1 while no signal has fresh data: the failure policy decides every node "
                "(open: all pass with neutral scores; closed: all refused).",
                "short",
                6,
                5,
            ).mappings(yes_no(("no", "green"), ("DEGRADED", "red"))),
            query(f"max(loadext_degraded{{{SEL}}})", instant=True),
        ),
        with_queries(
            describe(
                stat.Panel(),
                "Snapshot age",
                "Time since the newest successful Prometheus query behind loadext's decisions. "
                "Above maxDataAge, values count as missing.",
                "s",
                6,
                5,
            ).thresholds(steps(("green", None), ("orange", 60), ("red", 120))),
            query(f"time() - max(loadext_snapshot_timestamp_seconds{{{SEL}}})", instant=True),
        ),
        with_queries(
            describe(
                stat.Panel(),
                "Active config",
                "Hash of the config in force, per replica. Replicas disagreeing means a reload reached some of them "
                "only.",
                "short",
                6,
                5,
            ).text_mode(common.BigValueTextMode.NAME),
            query(f"count by (hash) (loadext_config_info{{{SEL}}})", "{{hash}}", True),
        ),
        with_queries(
            describe(
                stat.Panel(),
                "Last config reload",
                "Whether the last config version loadext saw was valid. 'failed' means "
                "the last good config is still in force; see the log or the ConfigMap's Events.",
                "short",
                6,
                5,
            ).mappings(yes_no(("failed", "red"), ("ok", "green"))),
            query(f"min(loadext_config_last_reload_successful{{{SEL}}})", instant=True),
        ),
        with_queries(
            describe(
                timeseries.Panel(),
                "Requests per verb",
                "Extender calls per second by verb and outcome. bad_request: "
                "malformed bodies; error: a loadext bug (see the log).",
                "reqps",
                12,
            ),
            query(
                f"sum by (verb, outcome) (rate(loadext_requests_total{{{SEL}}}[$__rate_interval]))",
                "{{verb}} {{outcome}}",
            ),
        ),
        with_queries(
            describe(
                timeseries.Panel(),
                "Latency p50 / p99 per verb, against the scheduler's timeout",
                "How long loadext takes to answer, by verb. The dashed line is the extender's httpTimeout ($timeout "
                "s): a filter call slower than that fails the pod's scheduling attempt unless the extender is "
                "ignorable.",
                "s",
                12,
            )
            .scale_distribution(common_builders.ScaleDistributionConfig().type(common.ScaleDistribution.LOG).log(10))
            .override_by_name("scheduler timeout", DASHED_RED),
            query(
                f"histogram_quantile(0.5, sum by (le, verb) (rate(loadext_request_duration_seconds_bucket{{{SEL}}}"
                "[$__rate_interval])))",
                "p50 {{verb}}",
            ),
            query(
                f"histogram_quantile(0.99, sum by (le, verb) (rate(loadext_request_duration_seconds_bucket{{{SEL}}}"
                "[$__rate_interval])))",
                "p99 {{verb}}",
            ),
            query("vector($timeout)", "scheduler timeout"),
        ),
        with_queries(
            describe(
                timeseries.Panel(),
                "Prometheus query latency p99 per signal",
                "Background refresh queries (one per signal per refreshInterval). Slow queries never delay "
                "scheduling, but beyond prometheus.timeout they fail and data ages.",
                "s",
                12,
            ),
            query(
                f"histogram_quantile(0.99, sum by (le, signal) (rate("
                f"loadext_prometheus_query_duration_seconds_bucket{{{SEL}}}[$__rate_interval])))",
                "{{signal}}",
            ),
        ),
        with_queries(
            describe(
                timeseries.Panel(),
                "Prometheus query errors by kind",
                "Failed refresh queries per second by signal and kind: timeout, connection, bad_query (a PromQL "
                "typo), execution, unavailable, http_4xx/5xx, parse, result_type.",
                "ops",
                12,
            ),
            query(
                f"sum by (signal, error) (rate(loadext_prometheus_query_errors_total{{{SEL}}}[$__rate_interval]))",
                "{{signal}} {{error}}",
            ),
        ),
        with_queries(
            describe(
                timeseries.Panel(),
                "Node mapping",
                "Known nodes without a series (unmapped) and series naming no known node "
                "(unmatched), per signal. Non-zero usually means nodeIdentity does not match your Prometheus labels.",
                "short",
                12,
            ),
            query(f"max by (signal) (loadext_unmapped_nodes{{{SEL}}})", "unmapped {{signal}}"),
            query(f"max by (signal) (loadext_unmatched_series{{{SEL}}})", "unmatched {{signal}}"),
        ),
        with_queries(
            describe(
                timeseries.Panel(),
                "Config reloads",
                "Config versions applied (success) and rejected (failure) per minute.",
                "short",
                12,
            ),
            query(f"sum by (result) (increase(loadext_config_reloads_total{{{SEL}}}[$__rate_interval]))", "{{result}}"),
        ),
        with_queries(
            describe(
                timeseries.Panel(),
                "Requests in flight, and refused",
                "Extender requests being read or answered per replica (capped by --max-concurrent-requests), "
                "and per second those refused: 503 overloaded (over a cap), 408 header/body (client too slow).",
                "short",
                12,
            ),
            query(f"max by (instance) (loadext_requests_in_flight{{{SEL}}})", "in flight {{instance}}"),
            query(
                f'sum(rate(loadext_requests_total{{{SEL}, outcome="overloaded"}}[$__rate_interval]))',
                "503 overloaded /s",
            ),
            query(
                f"sum by (phase) (rate(loadext_client_read_timeouts_total{{{SEL}}}[$__rate_interval]))",
                "408 {{phase}} /s",
            ),
        ),
        with_queries(
            describe(
                statetimeline.Panel(),
                "Kubernetes watches",
                "Whether each list/watch (nodes, pods for the herd guard, the configmap) is current (1) or "
                "retrying (0). While retrying loadext decides with what it last knew.",
                "short",
                12,
            ).mappings(yes_no(("retrying", "red"), ("current", "green"))),
            query(f"min by (resource) (loadext_kube_watch_healthy{{{SEL}}})", "{{resource}}"),
        ),
    ]
    return with_panels(board, panels)


def with_panels(board: builders.Dashboard, panels: list[Panel]) -> builders.Dashboard:
    for number, panel in enumerate(panels, start=1):
        board.with_panel(panel.id(number))
    return board


DASHBOARDS: dict[str, Callable[[], builders.Dashboard]] = {
    "loadext-placement.json": placement,
    "loadext-health.json": health,
}


def render(build: Callable[[], builders.Dashboard]) -> str:
    return JSONEncoder(sort_keys=True, indent=2).encode(build().build()) + "\n"


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
        print(f"stale: {', '.join(stale)}; run python dashboards/generate.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
