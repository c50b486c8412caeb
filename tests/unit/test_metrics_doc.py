"""docs/metrics.md lists exactly the metrics loadext exports, each with its type and labels, so
the reference cannot drift from the telemetry definitions."""

from __future__ import annotations

import re
import time
from pathlib import Path

from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from loadext.core.policy import NodeState, Verdict
from loadext.core.snapshot import Sample
from loadext.sources.query_error import ERROR_KINDS
from loadext.telemetry import Telemetry

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
SUFFIX = {"counter": "_total", "info": "_info"}


def documented() -> dict[str, tuple[str, frozenset[str]]]:
    """name -> (type, labels) from the table rows: | `name{a,b}`[, `other{c}`] | type | meaning |"""
    found = {}
    for row in DOC.read_text().splitlines():
        cells = [c.strip() for c in row.strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`loadext_"):
            continue
        for name, labels in re.findall(r"`(loadext_\w+)(?:\{([\w,]*)\})?`", cells[0]):
            found[name] = (cells[1], frozenset(filter(None, labels.split(","))))
    return found


def exported() -> dict[str, tuple[str, frozenset[str]]]:
    telemetry = Telemetry()
    found = {}
    for metric in telemetry.metrics():
        if isinstance(metric, MetricWrapperBase):
            kind = metric._type
            name = metric._name + SUFFIX.get(kind, "")
            found[name] = ("gauge" if kind == "info" else kind, frozenset(metric._labelnames))
    build = next(f for f in telemetry.registry.collect() if f.name == "loadext_build")
    found["loadext_build_info"] = ("gauge", frozenset(build.samples[0].labels))
    state = NodeState("n1", "n1", {"cpu": Sample(0.5, time.time())}, Verdict(True, 5, ""))
    telemetry.nodes.render([state])  # the per-node text, parsed as Prometheus would
    for family in text_string_to_metric_families(telemetry.exposition()[0].decode()):
        if family.name.startswith("loadext_node_") and family.samples and family.name not in found:
            found[family.name] = (family.type, frozenset(family.samples[0].labels))
    return found


def test_metrics_reference_matches_the_telemetry_definitions() -> None:
    doc, code = documented(), exported()
    assert sorted(set(code) - set(doc)) == [], "exported but not in docs/metrics.md"
    assert sorted(set(doc) - set(code)) == [], "in docs/metrics.md but not exported"
    mismatched = {name: (doc[name], code[name]) for name in code if doc[name] != code[name]}
    assert mismatched == {}, "type or labels differ (docs, code)"


def test_every_prometheus_error_kind_is_documented() -> None:
    row = next(line for line in DOC.read_text().splitlines() if "`loadext_prometheus_query_errors_total" in line)
    assert sorted(kind for kind in ERROR_KINDS if f"`{kind}`" not in row) == []


def test_a_watch_stopped_and_started_again_reports_its_health_again() -> None:
    """The herd guard off then on again: the pod watch's series goes, then comes back."""
    telemetry = Telemetry()
    report, forget = telemetry.watches.health_of("pods"), telemetry.watches.unwatched("pods")
    report(True)
    assert telemetry.registry.get_sample_value("loadext_kube_watch_healthy", {"resource": "pods"}) == 1
    forget()
    assert telemetry.registry.get_sample_value("loadext_kube_watch_healthy", {"resource": "pods"}) is None
    report(True)
    assert telemetry.registry.get_sample_value("loadext_kube_watch_healthy", {"resource": "pods"}) == 1
