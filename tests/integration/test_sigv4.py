"""`prometheus.sigv4` (Amazon Managed Service for Prometheus) against a stand-in for the
workspace and STS (harness/aws.py) in front of the session's real Prometheus. loadext signs
with botocore; the stand-in recomputes every signature with requests-aws4auth, so the two
independent implementations must agree on every query loadext sends (PromQL with spaces,
parentheses and quotes included)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from harness.aws import AwsStandIn, Key
from harness.exporter import Exporter
from harness.inprocess import StartLoadext, live_config, sees, set_load, signal_error
from harness.metrics_text import metric_value
from harness.prometheus import PrometheusServer

REGION = "eu-west-1"
ACCESS_KEY, SECRET = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
ROLE = "arn:aws:iam::123456789012:role/loadext"
LOAD = {"cpu": {"n1": 0.4, "n2": 0.7}, "memory": {"n1": 0.2, "n2": 0.3}}
SEEN = {"n1": {"cpu": 0.4, "memory": 0.2}, "n2": {"cpu": 0.7, "memory": 0.3}}


@pytest.fixture
def aws(prometheus: PrometheusServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[AwsStandIn]:
    """The stand-in, and an AWS environment that points at it and at nothing else (no ~/.aws,
    no instance metadata)."""
    stand_in = AwsStandIn(prometheus.url, REGION, keys={ACCESS_KEY: Key(SECRET)}, roles={ROLE: {ACCESS_KEY}})
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", stand_in.url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    yield stand_in
    stand_in.stop()


def workspace_config(aws: AwsStandIn, case: str, **sigv4: Any) -> dict[str, Any]:
    config = live_config(f"{aws.url}/workspaces/ws-loadext", case)
    config["prometheus"]["sigv4"] = {"region": REGION, **sigv4}
    return config


async def test_every_query_is_signed_as_aws_checks_it(
    aws: AwsStandIn, exporter: Exporter, start_loadext: StartLoadext, case: str
) -> None:
    set_load(exporter, case, LOAD["cpu"], LOAD["memory"])
    config = workspace_config(aws, case)
    cpu = next(s for s in config["signals"] if s["name"] == "cpu")
    cpu["query"] = f"max by (node) ({cpu['query']})"  # spaces: what a '+' for a space would break
    loadext = await start_loadext(config)
    await sees(loadext, SEEN)
    assert aws.rejected == [] and ("aps", ACCESS_KEY) in aws.verified


async def test_a_wrong_secret_is_a_403_that_names_the_key_and_never_the_secret(
    aws: AwsStandIn, exporter: Exporter, start_loadext: StartLoadext, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_load(exporter, case, LOAD["cpu"], LOAD["memory"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret-at-all-0123456789")
    loadext = await start_loadext(workspace_config(aws, case))
    error = await signal_error(loadext)
    assert error["kind"] == "auth"
    assert error["message"].startswith(
        f"403 forbidden at {aws.url}/workspaces/ws-loadext (sigv4 as {ACCESS_KEY} in "
    ), error
    assert "signature we calculated does not match" in error["message"]
    assert "not-the-secret-at-all" not in json.dumps(await loadext.explain())
    assert metric_value(await loadext.metrics(), "loadext_prometheus_query_errors_total", error="auth") >= 1


async def test_a_role_is_assumed_through_sts_and_its_temporary_credentials_sign(
    aws: AwsStandIn, exporter: Exporter, start_loadext: StartLoadext, case: str
) -> None:
    set_load(exporter, case, LOAD["cpu"], LOAD["memory"])
    loadext = await start_loadext(workspace_config(aws, case, roleArn=ROLE))
    await sees(loadext, SEEN)
    assert aws.rejected == []
    assert ("sts", ACCESS_KEY) in aws.verified  # AssumeRole, signed with the base credentials
    signers = {key for service, key in aws.verified if service == "aps"}
    assert signers and all(key.startswith("ASIA") for key in signers), signers  # never the base key
    explained = json.dumps(await loadext.explain())
    assert all(aws.keys[key].token not in explained for key in signers)  # the session token stays secret


async def test_a_role_sts_refuses_says_so(
    aws: AwsStandIn, exporter: Exporter, start_loadext: StartLoadext, case: str
) -> None:
    set_load(exporter, case, LOAD["cpu"], LOAD["memory"])
    other = "arn:aws:iam::123456789012:role/someone-else"
    refused = await start_loadext(workspace_config(aws, case, roleArn=other))
    error = await signal_error(refused)
    assert error["kind"] == "auth"
    assert error["message"].startswith(f"prometheus.sigv4: STS refused to assume {other}: AccessDenied: "), error
    assert metric_value(await refused.metrics(), "loadext_prometheus_query_errors_total", error="auth") >= 1


async def test_no_credentials_anywhere_is_a_credentials_error(
    aws: AwsStandIn, exporter: Exporter, start_loadext: StartLoadext, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_load(exporter, case, LOAD["cpu"], LOAD["memory"])
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    anonymous = await start_loadext(workspace_config(aws, case))
    error = await signal_error(anonymous)
    assert error["kind"] == "credentials"
    assert error["message"].startswith("prometheus.sigv4: no AWS credentials found"), error
