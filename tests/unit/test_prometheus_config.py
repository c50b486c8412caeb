"""The `prometheus:` section (config/prometheus.py): every connection setting read, and every
bad one refused with the field, its line and what to write instead."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from harness.certs import make_ca, make_cert
from loadext.config import BasicAuth, ConfigError, SigV4, parse_config

SIGNALS = "signals: [{name: cpu, query: up, threshold: 0.8}]\n"


def errors_of(prometheus: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(f"prometheus:\n{prometheus}\n{SIGNALS}")
    return [str(e) for e in info.value.errors]


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("s3cr3t\n")
    return path


def test_every_connection_setting_is_read(tmp_path: Path, secret: Path) -> None:
    ca = make_ca(tmp_path, "ca")
    client = make_cert(tmp_path, ca, "client")
    config = parse_config(
        f"""prometheus:
  urls: [http://127.0.0.1:9090, "https://prom-b.example:9091/prefix/"]
  basicAuth: {{username: sre, passwordFile: {secret}}}
  caFile: {ca[0]}
  certFile: {client[0]}
  keyFile: {client[1]}
  serverName: prometheus.monitoring.svc
  headers: {{X-Scope-OrgID: team-a}}
  headerFiles: {{X-Api-Key: {secret}}}
  queryParams: {{dedup: true, partial_response: "false"}}
  partialResponse: fail
{SIGNALS}"""
    ).prometheus
    assert config.endpoints == ("http://127.0.0.1:9090", "https://prom-b.example:9091/prefix")
    assert config.url == "http://127.0.0.1:9090"
    assert config.basic_auth == BasicAuth("sre", str(secret))
    assert (config.cert_file, config.key_file, config.server_name) == (
        str(client[0]),
        str(client[1]),
        "prometheus.monitoring.svc",
    )
    assert config.headers == (("X-Scope-OrgID", "team-a"),) and config.header_files == (("X-Api-Key", str(secret)),)
    assert config.query_params == (("dedup", "true"), ("partial_response", "false"))
    assert config.partial_response == "fail"
    assert parse_config(f"prometheus: {{url: http://p:9090}}\n{SIGNALS}").prometheus.endpoints == ("http://p:9090",)


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        (
            "  url: 127.0.0.1:19090",
            "line 2: prometheus.url: missing scheme: write http://127.0.0.1:19090 (or https://)",
        ),
        (
            "  url: http://host:9090?dedup=true",
            "line 2: prometheus.url: has a query string (?dedup=true): give its parameters in prometheus.queryParams",
        ),
        (
            "  url: http://host:9090/api/v1",
            "line 2: prometheus.url: ends in /api/v1: give the base URL (http://host:9090); loadext adds /api/v1/query",
        ),
        ("  urls: []", "line 2: prometheus.urls: must be a non-empty list of base URLs, tried in order"),
        ("  urls: [http://a:1, http://a:1]", "line 2: prometheus.urls: [1]: http://a:1 is listed twice"),
        ("  url: http://a:1\n  urls: [http://b:1]", "line 3: prometheus.urls: give url or urls, not both"),
        ("  timeout: 2s", "line 2: prometheus.url: is required (or urls: a list of endpoints)"),
        (
            "  url: http://a:1\n  headers: {'X Bad': v}",
            "line 3: prometheus.headers: 'X Bad' is not a valid header name",
        ),
        (
            "  url: http://a:1\n  partialResponse: sometimes",
            "line 3: prometheus.partialResponse: must be one of use, fail",
        ),
    ],
)
def test_bad_endpoints_and_settings_say_what_to_write(setting: str, expected: str) -> None:
    assert any(error.startswith(expected) for error in errors_of(setting)), errors_of(setting)


def test_credential_files_are_checked_when_the_config_is(tmp_path: Path, secret: Path) -> None:
    empty, folder = tmp_path / "empty", tmp_path / "dir"
    empty.write_text("\n")
    folder.mkdir()
    base = "  url: http://a:1\n"
    assert errors_of(base + f"  bearerTokenFile: {tmp_path}/missing") == [
        f"line 3: prometheus.bearerTokenFile: {tmp_path}/missing: no such file"
    ]
    assert errors_of(base + f"  bearerTokenFile: {empty}") == [f"line 3: prometheus.bearerTokenFile: {empty}: is empty"]
    assert errors_of(base + f"  caFile: {folder}") == [
        f"line 3: prometheus.caFile: {folder}: is a directory, not a file"
    ]
    assert errors_of(base + "  basicAuth: {username: sre}") == [
        "line 3: prometheus.basicAuth.passwordFile: is required with basicAuth"
    ]
    assert errors_of(base + f"  headerFiles: {{X-Scope-OrgID: {empty}}}") == [
        f"line 3: prometheus.headerFiles: X-Scope-OrgID: {empty}: is empty"
    ]
    conflict = errors_of(base + f"  bearerTokenFile: {secret}\n  headers: {{Authorization: Basic x}}")
    assert conflict == ["line 4: prometheus.headers: Authorization is set by bearerTokenFile already"]
    two = errors_of(base + f"  bearerTokenFile: {secret}\n  sigv4: {{region: us-east-1}}")
    assert two == [
        "line 4: prometheus.sigv4: give one of bearerTokenFile, basicAuth and sigv4, not bearerTokenFile and sigv4"
    ]


def test_sigv4_takes_a_region_and_an_optional_role() -> None:
    config = parse_config(
        "prometheus:\n  url: https://aps-workspaces.eu-west-1.amazonaws.com/workspaces/ws-1\n"
        f"  sigv4: {{region: eu-west-1, roleArn: 'arn:aws:iam::123456789012:role/loadext'}}\n{SIGNALS}"
    ).prometheus
    assert config.sigv4 == SigV4("eu-west-1", "arn:aws:iam::123456789012:role/loadext")
    base = "  url: http://a:1\n"
    assert errors_of(base + "  sigv4: {roleArn: 'arn:aws:iam::123456789012:role/x'}") == [
        "line 3: prometheus.sigv4.region: is required with sigv4: the region of the workspace (us-east-1)"
    ]
    assert errors_of(base + "  sigv4: {region: europe}") == [
        "line 3: prometheus.sigv4.region: 'europe' is not an AWS region (such as us-east-1)"
    ]
    assert errors_of(base + "  sigv4: {region: us-east-1, roleArn: loadext}") == [
        "line 3: prometheus.sigv4.roleArn: 'loadext' is not an IAM role ARN (arn:aws:iam::123456789012:role/name)"
    ]
    assert errors_of(base + "  sigv4: {region: us-east-1}\n  headers: {X-Amz-Date: now}") == [
        "line 4: prometheus.headers: X-Amz-Date is set by sigv4 already"
    ]


def test_sigv4_without_the_aws_extra_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *rest: None if name == "botocore" else real(name, *rest)
    )
    assert errors_of("  url: http://a:1\n  sigv4: {region: us-east-1}") == [
        "line 3: prometheus.sigv4: needs the AWS SDK (botocore): pip install 'loadext[aws]' (the image has it)"
    ]


def test_certificates_that_do_not_parse_or_belong_together_are_refused(tmp_path: Path, secret: Path) -> None:
    ca = make_ca(tmp_path, "ca")
    client, other = make_cert(tmp_path, ca, "client"), make_cert(tmp_path, ca, "other")
    base = "  url: https://a:1\n"
    assert errors_of(base + f"  certFile: {client[0]}") == [
        "line 3: prometheus.certFile: needs keyFile too: a client certificate is a certificate and its key"
    ]
    mismatch = errors_of(base + f"  certFile: {client[0]}\n  keyFile: {other[1]}")
    assert mismatch == [f"line 4: prometheus.keyFile: {other[1]} does not belong to the certificate ({client[0]})"]
    not_pem = errors_of(base + f"  caFile: {secret}")
    assert len(not_pem) == 1 and not_pem[0].startswith(f"line 3: prometheus.caFile: {secret} is not a PEM certificate")
