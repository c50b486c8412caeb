"""Every backend snippet of docs/configuration.md (```yaml backend blocks) is a valid config,
with its credential files present where the snippet names them (written here, under a scratch
folder standing in for the mounted Secrets)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.certs import make_ca, make_cert
from loadext.config import parse_config

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
SNIPPETS = re.findall(r"```yaml backend\n(.*?)```", DOC.read_text(), re.DOTALL)
SECRETS = ("/var/run/secrets/kubernetes.io/serviceaccount/", "/etc/loadext/prometheus/")


def test_the_doc_has_a_snippet_per_backend() -> None:
    text = "\n".join(SNIPPETS)
    for backend in (
        "thanos-querier",
        "thanos-query",
        "mimir",
        "victoria-metrics",
        "vmauth",
        "grafana.net",
        "urls:",
        "sigv4:",
    ):
        assert backend in text, f"no snippet for {backend}"


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[f"snippet{i}" for i in range(len(SNIPPETS))])
def test_each_backend_snippet_is_a_valid_config(snippet: str, tmp_path: Path) -> None:
    ca = make_ca(tmp_path, "ca")
    cert = make_cert(tmp_path, ca, "client")
    files = {"ca.crt": ca[0].read_text(), "service-ca.crt": ca[0].read_text(), "tls.crt": cert[0].read_text()}
    files["tls.key"] = cert[1].read_text()
    text = snippet
    for prefix in SECRETS:
        for name in re.findall(re.escape(prefix) + r"([\w.-]+)", snippet):
            path = tmp_path / "secrets" / name
            path.parent.mkdir(exist_ok=True)
            path.write_text(files.get(name, "a-secret-value\n"))
        text = text.replace(prefix, f"{tmp_path}/secrets/")
    config = parse_config(text, check_queries=True)
    assert config.prometheus.endpoints
