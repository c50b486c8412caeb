"""Dashboards and alerts: linted like grafana's dashboard-linter would, rules checked and unit
tested with promtool, and every query run against a real Prometheus that has been scraping a
live loadext serving real traffic."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.kubernetes import ControlPlane, build_components
from harness.prometheus import PROMTOOL
from harness.stack import LiveStack

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "dashboards").glob("*.json"))
RULES = ROOT / "manifests" / "rules" / "loadext-rules.yaml"
VARIABLES = {
    "$__rate_interval": "5s",
    "$__range": "1m",
    "$__interval": "1s",
    "$job": "loadext",
    "$node": ".*",
    "$signal": ".*",
    "$timeout": "2",
}


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def substitute(expr: str) -> str:
    for name, value in sorted(VARIABLES.items(), key=lambda item: -len(item[0])):
        expr = expr.replace(name, value)
    return expr


def rule_exprs() -> list[tuple[str, str]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [(rule["alert"], rule["expr"]) for group in groups for rule in group["rules"]]


# --- lint ----------------------------------------------------------------------------------------


def test_generated_dashboards_are_fresh() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "dashboards" / "generate.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("path", DASHBOARDS, ids=[p.name for p in DASHBOARDS])
def test_dashboard_lint(path: Path) -> None:
    dashboard = load(path)
    assert "__inputs" not in dashboard and "id" not in dashboard
    # Grafana 11.6's schema (the SDK target pinned in pyproject); newer Grafana migrates it on load.
    assert dashboard["schemaVersion"] == 41 and dashboard["editable"] is False
    assert 0 < len(dashboard["uid"]) <= 40
    datasource_vars = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
    assert len(datasource_vars) == 1 and datasource_vars[0]["name"] == "datasource"
    assert datasource_vars[0]["query"] == "prometheus"
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels(dashboard):
        where = f"{path.name}: {panel['title']}"
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, where
        assert panel["title"] and len(panel["description"]) > 20, where
        assert panel["fieldConfig"]["defaults"].get("unit"), f"{where}: no unit"
        assert panel["targets"], f"{where}: no targets"
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", where
            expr = target["expr"]
            for window in re.findall(r"\[([^\]]+)\]", expr):
                assert window in ("$__rate_interval", "$__range"), f"{where}: window [{window}]"
            for counter in re.findall(r"\b(loadext_\w+_total)\b", expr):
                assert re.search(rf"(rate|increase)\({counter}", expr), f"{where}: {counter} not in rate/increase"
    text = path.read_text()
    assert not re.search(r'"uid":\s*"(?!\$\{datasource\}|loadext-)', text), "hard-coded datasource uid"


@pytest.mark.parametrize("path", DASHBOARDS, ids=[p.name for p in DASHBOARDS])
def test_dashboard_round_trips_through_the_sdk_models(path: Path) -> None:
    """What the file says is what Grafana's own models read: nothing unknown or mistyped."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from grafana_foundation_sdk.cog.encoder import JSONEncoder
        from grafana_foundation_sdk.models.dashboard import Dashboard

    text = path.read_text()
    again = JSONEncoder(sort_keys=True, indent=2).encode(Dashboard.from_json(json.loads(text))) + "\n"
    assert json.loads(again) == json.loads(text)


@pytest.mark.parametrize("path", DASHBOARDS, ids=[p.name for p in DASHBOARDS])
def test_dashboard_grid_has_no_overlaps_and_every_variable_is_used(path: Path) -> None:
    dashboard = load(path)
    cells: dict[tuple[int, int], str] = {}
    for panel in panels(dashboard):
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]
    used = json.dumps([dashboard["panels"], [v.get("query") for v in dashboard["templating"]["list"]]])
    for variable in dashboard["templating"]["list"]:
        name = variable["name"]
        assert f"${name}" in used or f"${{{name}}}" in used, f"variable {name} is not used"


def test_dashboards_ship_as_sidecar_configmaps_from_the_same_json() -> None:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is required (scripts/test.sh puts the one it builds on PATH)"
    rendered = subprocess.run(
        [kubectl, "kustomize", str(ROOT / "manifests" / "base")], capture_output=True, text=True, check=True
    ).stdout
    configmaps = {
        d["metadata"]["name"]: d
        for d in yaml.safe_load_all(rendered)
        if d and d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("loadext-dashboard")
    }
    shipped = {key: value for d in configmaps.values() for key, value in d["data"].items()}
    assert shipped == {path.name: path.read_text() for path in DASHBOARDS}
    assert all(d["metadata"]["labels"]["grafana_dashboard"] == "1" for d in configmaps.values())


# --- rules ---------------------------------------------------------------------------------------


def test_prometheusrule_carries_the_plain_rules() -> None:
    rule = yaml.safe_load((ROOT / "manifests/components/prometheus-operator/prometheusrule.yaml").read_text())
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]
    for _, expr in rule_exprs():
        assert expr
    for group in rule["spec"]["groups"]:
        for alert in group["rules"]:
            annotations = alert["annotations"]
            assert {"summary", "description", "runbook_url"} <= set(annotations), alert["alert"]
            anchor = annotations["runbook_url"].rsplit("#", 1)[1]
            runbook = (ROOT / "docs" / "runbook.md").read_text()
            assert f"## {alert['alert']}" in runbook and anchor == alert["alert"].lower()


def test_promtool_checks_and_unit_tests_the_rules() -> None:
    check = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    unit = subprocess.run(
        [PROMTOOL, "test", "rules", "loadext-rules.test.yaml"], cwd=RULES.parent, capture_output=True, text=True
    )
    assert unit.returncode == 0, unit.stdout + unit.stderr
    tested = set(re.findall(r"alertname: (\w+)", (RULES.parent / "loadext-rules.test.yaml").read_text()))
    assert tested == {name for name, _ in rule_exprs()}, "every alert needs a promtool unit test"


# --- against a real Prometheus scraping a live loadext ------------------------------------------


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    """Needs the Go-built API server (loadext's Node watch feeds the watch-health panel)."""
    kube = ControlPlane(tmp_path_factory.mktemp("stack-k8s"), build_components())
    live = None
    try:
        kube.start()
        live = LiveStack(tmp_path_factory.mktemp("stack"), kube)
        live.start()
        live.break_config_once()
        live.wait_scraped(8)
        yield live
    finally:
        if live is not None:
            live.stop()
        kube.stop()


def query(stack: LiveStack, expr: str) -> dict[str, Any]:
    url = stack.prometheus.url + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            result: dict[str, Any] = json.load(reply)
    except urllib.error.HTTPError as exc:
        result = json.load(exc)
    return result


PANEL_QUERIES = [
    (path.name, panel["title"], target["expr"])
    for path in DASHBOARDS
    for panel in panels(load(path))
    for target in panel["targets"]
]


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("dashboard", "title", "expr"), PANEL_QUERIES, ids=[f"{d}:{t}:{i}" for i, (d, t, _) in enumerate(PANEL_QUERIES)]
)
def test_every_panel_query_returns_data(stack: LiveStack, dashboard: str, title: str, expr: str) -> None:
    result = query(stack, substitute(expr))
    assert result["status"] == "success", result
    assert result["data"]["result"], f"{dashboard} / {title}: no data for {substitute(expr)}"


@pytest.mark.e2e
@pytest.mark.parametrize(("alert", "expr"), rule_exprs(), ids=[name for name, _ in rule_exprs()])
def test_every_alert_expression_evaluates(stack: LiveStack, alert: str, expr: str) -> None:
    assert query(stack, expr)["status"] == "success"


@pytest.mark.e2e
def test_every_loadext_metric_referenced_exists(stack: LiveStack) -> None:
    with urllib.request.urlopen(stack.url + "/metrics", timeout=5) as reply:
        exposed = reply.read().decode()
    referenced = set()
    for _, _, expr in PANEL_QUERIES:
        referenced |= set(re.findall(r"\b(loadext_\w+)", expr))
    for _, expr in rule_exprs():
        referenced |= set(re.findall(r"\b(loadext_\w+)", expr))
    # A sample, or at least the family's TYPE line: loadext_kube_watch_healthy has no series until
    # a watch runs, and this stack has no API server.
    declared = set(re.findall(r"^# TYPE (loadext_\w+) (?:counter|gauge|histogram)", exposed, re.M))
    declared = {n for d in declared for n in (d, d + "_total", d + "_bucket", d + "_count", d + "_sum")}
    missing = {name for name in referenced if name not in declared and not re.search(rf"^{name}[{{ ]", exposed, re.M)}
    assert not missing, f"queries use metrics loadext does not export: {missing}"


def test_render_dashboards_draws_every_dashboard(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "render_dashboards.py"), "--seconds", "6", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    drawn = sorted(p.name for p in tmp_path.glob("*.png"))
    assert drawn == sorted(p.with_suffix(".png").name for p in DASHBOARDS)
    assert all((tmp_path / name).stat().st_size > 20_000 for name in drawn)
