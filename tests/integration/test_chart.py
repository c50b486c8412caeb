"""The Helm chart: it lints, renders with default and non-default values, refuses values of the
wrong type by name (values.schema.json), and ships what the kustomize manifests ship, from
the same sources (config defaults, alerts, dashboards, version)."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

import loadext
from harness.deploy import CHART, FITTED, ROOT, find, helm, kustomize, template
from loadext.cli import build_parser
from loadext.config import parse_config
from loadext.config.jsonschema import config_schema

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def pod_spec(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    spec: dict[str, Any] = find(docs, "Deployment", name)["spec"]["template"]["spec"]
    return spec


def scheduler_config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    configmap = next(
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("loadext-scheduler-config")
    )
    parsed: dict[str, Any] = yaml.safe_load(configmap["data"]["scheduler-config.yaml"])
    return parsed


def loadext_config(docs: list[dict[str, Any]], name: str = "loadext-config") -> dict[str, Any]:
    parsed: dict[str, Any] = yaml.safe_load(find(docs, "ConfigMap", name)["data"]["config.yaml"])
    return parsed


def without_instance(value: Any) -> Any:
    """The chart's selectors also carry the release (app.kubernetes.io/instance); the base's do not."""
    if isinstance(value, dict):
        return {k: without_instance(v) for k, v in value.items() if k != "app.kubernetes.io/instance"}
    if isinstance(value, list):
        return [without_instance(v) for v in value]
    return value


def test_chart_lints() -> None:
    result = helm("lint", str(CHART), "--strict")
    assert result.returncode == 0, result.stdout + result.stderr


def test_default_chart_is_the_kustomize_base() -> None:
    """Release `loadext` in namespace `loadext` names everything as manifests/base does."""
    chart, base = template(), kustomize("base")

    def names(docs: list[dict[str, Any]]) -> set[tuple[str, str]]:
        return {(d["kind"], d["metadata"]["name"]) for d in docs if d["kind"] not in ("Namespace", "ConfigMap")}

    assert names(chart) == names(base)
    # One source of truth for the config defaults: the chart's equal manifests/base/config.yaml.
    assert loadext_config(chart) == yaml.safe_load((ROOT / "manifests/base/config.yaml").read_text())
    assert scheduler_config(chart) == scheduler_config(base)
    for name in ("loadext", "loadext-scheduler"):
        ours, theirs = pod_spec(chart, name), pod_spec(base, name)
        containers = [{k: v for k, v in c.items() if k != "imagePullPolicy"} for c in ours["containers"]]
        assert containers == theirs["containers"], name
        keys = ("securityContext", "serviceAccountName", "terminationGracePeriodSeconds", "priorityClassName")
        for key in (*keys, "affinity", "topologySpreadConstraints"):
            assert without_instance(ours.get(key)) == theirs.get(key), key
    for kind in ("ClusterRole", "Role"):
        for doc in base:
            if doc["kind"] == kind:
                assert find(chart, kind, doc["metadata"]["name"])["rules"] == doc["rules"]
    policy = "loadext-node-changes"  # what narrows loadext's Node patch (annotation, taints)
    assert (
        find(chart, "ValidatingAdmissionPolicy", policy)["spec"]
        == find(base, "ValidatingAdmissionPolicy", policy)["spec"]
    )
    assert (
        find(chart, "NetworkPolicy", "loadext")["spec"]["ingress"][0]["ports"]
        == find(base, "NetworkPolicy", "loadext")["spec"]["ingress"][0]["ports"]
    )


def test_the_rebalancers_rbac_comes_with_it_in_chart_and_manifests(tmp_path: Path) -> None:
    """Off by default: no eviction, Lease or node patch. On (with taints): what
    manifests/overlays/rebalance grants, and the node patch narrowed by the node-change policy."""
    rules = lambda docs, kind: find(docs, kind, "loadext")["rules"]  # noqa: E731
    off = template("loadext", "loadext", {"requeueStranded": False}, tmp_path)
    granted = str(rules(off, "ClusterRole")) + str(rules(off, "Role"))
    assert "pods/eviction" not in granted and "leases" not in granted and "patch" not in granted
    assert not [d for d in off if d["kind"] == "ValidatingAdmissionPolicy"]
    values = {"requeueStranded": False, "config": {"rebalance": {"enabled": True, "taints": {"hot": True}}}}
    on = template("loadext", "loadext", values, tmp_path)
    overlay = kustomize("overlays/rebalance")
    for kind in ("ClusterRole", "Role"):
        for rule in find(overlay, kind, "loadext-rebalance")["rules"]:
            assert rule in rules(on, kind), (kind, rule)
    assert {"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]} in rules(on, "ClusterRole")
    assert find(on, "ValidatingAdmissionPolicy", "loadext-node-changes")
    assert parse_config(find(overlay, "ConfigMap", "loadext-config")["data"]["config.yaml"]).rebalance.enabled


def test_json_logs_by_default_in_chart_and_manifests() -> None:
    for docs in (template(), kustomize("base"), kustomize("overlays/mtls")):
        args = pod_spec(docs, "loadext")["containers"][0]["args"]
        assert "--log-format=json" in args[: args.index("serve")]


def test_non_default_values(tmp_path: Path) -> None:
    values = {
        "image": {"repository": "registry.example/platform/loadext", "tag": "9.9.9"},
        "replicas": 3,
        "logFormat": "text",
        "bind": True,
        "requeueStranded": False,
        "mtls": {"enabled": True},
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "scheduler": {"name": "load-aware", "extenderWeight": 3, "ignorable": False},
        "config": {
            "prometheus": {"url": "http://prom.monitoring:9090"},
            "preset": "node-exporter-by-ip",
            "signals": [{"name": "cpu", "threshold": 0.7, "weight": 2}],
        },
    }
    docs = template("edge", "platform", values, tmp_path)
    deployment = find(docs, "Deployment", "edge-loadext")
    assert deployment["spec"]["replicas"] == 3
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example/platform/loadext:9.9.9"
    args = [a.replace("$(POD_NAMESPACE)", "platform") for a in container["args"]]
    parsed = build_parser().parse_args(args)  # every flag the chart writes is one loadext accepts
    assert parsed.log_format == "text" and parsed.configmap == ("platform", "edge-loadext-config")
    assert (parsed.tls_cert, parsed.tls_client_ca) == ("/etc/loadext/tls/tls.crt", "/etc/loadext/tls/ca.crt")
    assert container["readinessProbe"]["httpGet"]["port"] == "metrics"

    config = parse_config(yaml.safe_dump(loadext_config(docs, "edge-loadext-config")))
    assert config.bind_enabled is True
    assert config.prometheus.url == "http://prom.monitoring:9090"

    scheduler = yaml.safe_load(
        find(docs, "ConfigMap", "edge-loadext-scheduler-config")["data"]["scheduler-config.yaml"]
    )
    assert scheduler["profiles"] == [{"schedulerName": "load-aware"}]
    extender = scheduler["extenders"][0]
    assert extender["urlPrefix"] == "https://edge-loadext.platform.svc:8888" and extender["bindVerb"] == "bind"
    assert (extender["weight"], extender["ignorable"], extender["enableHTTPS"]) == (3, False, True)
    serving = find(docs, "Certificate", "edge-loadext-serving")["spec"]
    assert extender["tlsConfig"]["serverName"] in serving["dnsNames"]
    scheduler_pod = pod_spec(docs, "edge-loadext-scheduler")
    secrets = {v["secret"]["secretName"] for v in scheduler_pod["volumes"] if "secret" in v}
    assert find(docs, "Certificate", "edge-loadext-scheduler-client")["spec"]["secretName"] in secrets

    role = find(docs, "ClusterRole", "edge-loadext")
    assert any("pods/binding" in rule["resources"] for rule in role["rules"])
    # Without requeueStranded loadext writes no Node: no flag, no patch verb, no policy.
    assert not parsed.requeue_stranded and not any("patch" in rule["verbs"] for rule in role["rules"])
    assert not [d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")]
    assert find(docs, "ServiceMonitor", "edge-loadext")["spec"]["endpoints"][0]["port"] == "metrics"
    rules = yaml.safe_load((ROOT / "manifests/rules/loadext-rules.yaml").read_text())
    assert find(docs, "PrometheusRule", "edge-loadext")["spec"]["groups"] == rules["groups"]


def test_dashboards_ship_from_the_same_json(tmp_path: Path) -> None:
    shipped = {
        key: value
        for d in template(values={"dashboards": {"enabled": True}}, workdir=tmp_path)
        if d["kind"] == "ConfigMap" and d["metadata"].get("labels", {}).get("grafana_dashboard") == "1"
        for key, value in d["data"].items()
    }
    dashboards = {p.name: p.read_text() for p in (ROOT / "dashboards").glob("*.json")}
    assert {k: json.loads(v) for k, v in shipped.items()} == {k: json.loads(v) for k, v in dashboards.items()}


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("replicas=two", "at '/replicas': got string, want integer"),
        ("config.signals[0].name=cpu,config.signals[0].threshold=85", "at '/config/signals/0/threshold': maximum"),
        ("logFormat=yaml", "at '/logFormat'"),
        ("scheduler.httpTimeout=soon", "at '/scheduler/httpTimeout'"),
        ("replcas=2", "additional properties 'replcas' not allowed"),
        ("config.treshold=0.8", "at '/config': additional properties 'treshold' not allowed"),
        ("config.prometheus.timeout=2", "at '/config/prometheus/timeout': got number, want string"),
        ("config.herdGuard.burstCap=three", "at '/config/herdGuard/burstCap': got string, want integer"),
        ("config.signals[0].name=cpu,config.signals[0].treshold=1", "additional properties 'treshold' not allowed"),
    ],
)
def test_values_of_the_wrong_type_fail_by_name(setting: str, named: str) -> None:
    result = helm("template", "x", str(CHART), "--set", setting)
    assert result.returncode != 0
    assert named in result.stderr, result.stderr


def test_the_charts_config_schema_is_loadexts_own() -> None:
    """values.schema.json's `config` is what `python -m loadext.config.jsonschema` prints: the
    loader's keys and value shapes, so a typo inside config fails helm template by name."""
    shipped = json.loads((CHART / "values.schema.json").read_text())["properties"]["config"]
    assert shipped == config_schema(), "regenerate it: python -m loadext.config.jsonschema"


def test_one_version_everywhere() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    kustomization = yaml.safe_load((ROOT / "manifests/base/kustomization.yaml").read_text())
    assert chart["appVersion"] == VERSION and loadext.__version__ == VERSION
    assert kustomization["images"] == [{"name": "loadext", "newName": "localhost/loadext", "newTag": VERSION}]


def test_every_placement_value_renders_where_it_belongs(tmp_path: Path) -> None:
    docs = template("fit", "platform", FITTED, tmp_path)
    pod = pod_spec(docs, "fit-loadext")
    template_meta = find(docs, "Deployment", "fit-loadext")["spec"]["template"]["metadata"]
    for key in ("nodeSelector", "tolerations", "affinity", "topologySpreadConstraints", "priorityClassName"):
        assert pod[key] == FITTED[key], key
    assert template_meta["annotations"] == FITTED["podAnnotations"] and template_meta["labels"]["team"] == "platform"
    container = pod["containers"][0]
    assert {"name": "NO_PROXY", "value": ".svc,.cluster.local"} in container["env"]
    assert {"name": "prometheus-auth", "mountPath": "/etc/loadext/prometheus", "readOnly": True} in container[
        "volumeMounts"
    ]
    assert {"name": "scratch", "mountPath": "/scratch"} in container["volumeMounts"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["prometheus-auth"]["secret"] == {"secretName": "prometheus-credentials"} and "scratch" in volumes
    account = find(docs, "ServiceAccount", pod["serviceAccountName"])["metadata"]
    assert account["annotations"] == FITTED["serviceAccount"]["annotations"]  # IRSA, for prometheus.sigv4
    scheduler = pod_spec(docs, "fit-loadext-scheduler")
    assert scheduler["priorityClassName"] == "system-node-critical"
    assert scheduler["nodeSelector"] == {"node-role.kubernetes.io/infra": ""}
    assert "podAntiAffinity" in scheduler["affinity"]  # the default: replicas preferably apart
    assert find(docs, "ServiceMonitor", "fit-loadext")["metadata"]["labels"]["release"] == "monitoring"
    budgets = {d["metadata"]["name"] for d in docs if d["kind"] == "PodDisruptionBudget"}
    assert budgets == {"fit-loadext"}  # the one-replica scheduler gets none: it would block drains
    single = template("single", "platform", {"replicas": 1}, tmp_path)
    assert "topologySpreadConstraints" not in pod_spec(single, "single-loadext")
    assert {d["metadata"]["name"] for d in single if d["kind"] == "PodDisruptionBudget"} == {"single-loadext-scheduler"}


def test_the_rendered_chart_post_renders_with_kustomize(tmp_path: Path) -> None:
    """helm install --post-renderer kustomize: every object must be valid YAML with unique keys
    (Deployment and Service labels once carried app.kubernetes.io/instance twice)."""
    docs = template("fit", "platform", FITTED, tmp_path)
    (tmp_path / "rendered.yaml").write_text(yaml.safe_dump_all(docs))
    helm_output = helm("template", "fit", str(CHART), "--values", str(tmp_path / "values-fit.yaml"))
    assert helm_output.returncode == 0, helm_output.stderr
    (tmp_path / "raw.yaml").write_text(helm_output.stdout)  # helm's own text, not our re-dump
    (tmp_path / "kustomization.yaml").write_text(
        "resources: [raw.yaml]\nlabels:\n  - pairs: {team: platform}\n    includeSelectors: false\n"
    )
    post = kustomize(tmp_path)
    assert {d["kind"] for d in post} >= {"Deployment", "Service", "PodDisruptionBudget"}
    assert all(d["metadata"]["labels"]["team"] == "platform" for d in post if d["kind"] == "Deployment")


def test_helm_template_refuses_a_kubernetes_older_than_the_chart_needs() -> None:
    old = subprocess.run(
        ["helm", "template", "x", str(CHART), "--kube-version", "1.29.0"], capture_output=True, text=True
    )
    assert old.returncode != 0 and ">=1.30.0-0" in old.stderr, old.stderr
