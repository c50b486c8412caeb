"""The shipped manifests render, and the config they ship is valid loadext config."""

from __future__ import annotations

import pytest
import yaml

from harness.deploy import kustomize
from loadext.cli import build_parser
from loadext.config import parse_config

KUSTOMIZATIONS = ["base", "overlays/bind", "overlays/default-scheduler", "overlays/mtls"]


def configmap(docs: list[dict], prefix: str) -> dict:  # type: ignore[type-arg]
    return next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith(prefix))


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_shipped_loadext_config_is_valid(kustomization: str) -> None:
    docs = kustomize(kustomization)
    config = parse_config(configmap(docs, "loadext-config")["data"]["config.yaml"])
    assert config.bind_enabled is (kustomization == "overlays/bind")


def test_rbac_grants_binding_only_in_the_bind_overlay() -> None:
    def loadext_resources(docs: list[dict]) -> set[str]:  # type: ignore[type-arg]
        role = next(d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "loadext")
        return {r for rule in role["rules"] for r in rule["resources"]}

    assert "pods/binding" not in loadext_resources(kustomize("base"))
    assert "pods/binding" in loadext_resources(kustomize("overlays/bind"))
    bind_scheduler = yaml.safe_load(
        configmap(kustomize("overlays/bind"), "loadext-scheduler-config")["data"]["scheduler-config.yaml"]
    )
    assert bind_scheduler["extenders"][0]["bindVerb"] == "bind"


def test_workloads_run_as_non_root_with_read_only_root() -> None:
    for doc in kustomize("base"):
        if doc["kind"] != "Deployment":
            continue
        pod = doc["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        for container in pod["containers"]:
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            assert "livenessProbe" in container and "readinessProbe" in container


def _deployment(docs: list[dict], name: str) -> dict:  # type: ignore[type-arg]
    return next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == name)


@pytest.mark.parametrize("kustomization", ["base", "overlays/bind", "overlays/mtls"])
def test_loadext_args_are_accepted_by_the_cli_and_fit_the_grace_period(kustomization: str) -> None:
    pod = _deployment(kustomize(kustomization), "loadext")["spec"]["template"]["spec"]
    args = [a.replace("$(POD_NAMESPACE)", "loadext") for a in pod["containers"][0]["args"]]
    parsed = build_parser().parse_args(args)  # exits (fails the test) on an unknown or bad flag
    assert parsed.shutdown_delay + parsed.shutdown_timeout < pod["terminationGracePeriodSeconds"]


def test_mtls_overlay_wires_certificates_end_to_end() -> None:
    docs = kustomize("overlays/mtls")
    certificates = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "Certificate"}
    issuers = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "Issuer"}
    serving, client = certificates["loadext-serving"], certificates["loadext-scheduler-client"]
    assert serving["issuerRef"]["name"] == client["issuerRef"]["name"] == "loadext-ca"
    assert issuers["loadext-ca"]["ca"]["secretName"] == certificates["loadext-ca"]["secretName"]
    assert "server auth" in serving["usages"] and "client auth" in client["usages"]

    loadext = _deployment(docs, "loadext")["spec"]["template"]["spec"]
    container = loadext["containers"][0]
    args = build_parser().parse_args([a.replace("$(POD_NAMESPACE)", "loadext") for a in container["args"]])
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    secrets = {v["name"]: v["secret"]["secretName"] for v in loadext["volumes"] if "secret" in v}
    tls_dir = mounts[next(n for n, s in secrets.items() if s == serving["secretName"])]
    assert (args.tls_cert, args.tls_key, args.tls_client_ca) == (
        f"{tls_dir}/tls.crt",
        f"{tls_dir}/tls.key",
        f"{tls_dir}/ca.crt",
    )
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert args.metrics_listen[1] == ports["metrics"]  # the probes' port is the plain one
    assert container["readinessProbe"]["httpGet"]["port"] == container["livenessProbe"]["httpGet"]["port"] == "metrics"

    scheduler = _deployment(docs, "loadext-scheduler")["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in scheduler["containers"][0]["volumeMounts"]}
    secrets = {v["name"]: v["secret"]["secretName"] for v in scheduler["volumes"] if "secret" in v}
    client_dir = mounts[next(n for n, s in secrets.items() if s == client["secretName"])]
    extender = yaml.safe_load(configmap(docs, "loadext-scheduler-config")["data"]["scheduler-config.yaml"])[
        "extenders"
    ][0]
    assert extender["urlPrefix"].startswith("https://") and extender["enableHTTPS"] is True
    assert extender["tlsConfig"] == {
        "caFile": f"{client_dir}/ca.crt",
        "certFile": f"{client_dir}/tls.crt",
        "keyFile": f"{client_dir}/tls.key",
        "serverName": extender["tlsConfig"]["serverName"],
    }
    assert extender["tlsConfig"]["serverName"] in serving["dnsNames"]
    assert extender["urlPrefix"].split("//")[1].split(":")[0] in serving["dnsNames"]
