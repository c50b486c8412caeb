"""The `prometheus:` section: where the API is and how to authenticate, checked before use.

Every credential is a file (a mounted Secret), so the check reads it: a file that is missing,
empty or unreadable, a certificate that does not parse, a key that does not belong to its
certificate, a header name that is no HTTP token are config errors naming the field and its
line, at check-config and on reload (the last good config stays), never a failure at the
first query. A URL is the base URL: one with a query string or ending in /api/v1 is refused
with what to write instead.
"""

from __future__ import annotations

import importlib.util
import re
import ssl
from typing import Any
from urllib.parse import urlsplit

from loadext.config.reading import Section, boolean, choice, positive_duration, string
from loadext.config.schema import PARTIAL_RESPONSES, BasicAuth, FieldError, PrometheusConfig, SigV4

# RFC 9110's token: what a header name may be made of.
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
# Headers loadext sets itself from bearerTokenFile, basicAuth or sigv4.
_AUTH_HEADERS = {"authorization", "x-amz-date", "x-amz-security-token"}
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-[0-9]{1,2}$")  # us-east-1, us-gov-west-1, cn-north-1
_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]+$")


def endpoint(value: Any) -> str:
    """A base URL: http(s)://host[:port][/path prefix], no query string, not ending in /api/v1."""
    text = string(value).strip()
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https"):
        if "://" not in text:
            raise ValueError(f"missing scheme: write http://{text} (or https://)")
        raise ValueError(f"must be an http:// or https:// URL, got {text!r}")
    if not parts.hostname:
        raise ValueError(f"no host in {text!r}")
    if parts.query:
        raise ValueError(
            f"has a query string (?{parts.query}): give its parameters in prometheus.queryParams, "
            "which every endpoint gets"
        )
    if parts.fragment:
        raise ValueError(f"has a fragment (#{parts.fragment}): give the base URL")
    if re.search(r"/api/v1(/.*)?$", parts.path.rstrip("/")):
        base = text[: text.index("/api/v1")]
        raise ValueError(f"ends in {parts.path}: give the base URL ({base}); loadext adds /api/v1/query")
    return text.rstrip("/")


def endpoints(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise ValueError("must be a non-empty list of base URLs, tried in order")
    urls = []
    for index, item in enumerate(value):
        try:
            url = endpoint(item)
        except ValueError as exc:
            raise ValueError(f"[{index}]: {exc}") from exc
        if url in urls:
            raise ValueError(f"[{index}]: {url} is listed twice")
        urls.append(url)
    return tuple(urls)


def credential_file(value: Any) -> str:
    """A file whose content is a secret: it must exist, be readable and not be empty."""
    path = string(value)
    try:
        with open(path, "rb") as handle:
            content = handle.read()
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ValueError(f"{path}: is a directory, not a file") from None
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read ({exc.strerror})") from None
    if not content.strip():
        raise ValueError(f"{path}: is empty")
    return path


def _text_map(value: Any, *, names_are_headers: bool = False) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict):
        raise ValueError("must be a map of name: value")
    out = []
    for name, item in value.items():
        if names_are_headers and not _TOKEN.match(str(name)):
            raise ValueError(f"{name!r} is not a valid header name")
        if isinstance(item, bool):
            item = "true" if item else "false"
        if not isinstance(item, str | int | float):
            raise ValueError(f"{name}: must be a string, got {item!r}")
        out.append((str(name), str(item)))
    return tuple(out)


def headers(value: Any) -> tuple[tuple[str, str], ...]:
    return _text_map(value, names_are_headers=True)


def query_params(value: Any) -> tuple[tuple[str, str], ...]:
    return _text_map(value)


def _pem_problem(cert_file: str, key_file: str | None) -> str | None:
    """What is wrong with a certificate (and its key), in a few words; None when it loads."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        if key_file is None:
            context.load_verify_locations(cafile=cert_file)
        else:
            context.load_cert_chain(cert_file, key_file)
    except ssl.SSLError as exc:
        if "KEY_VALUES_MISMATCH" in str(exc):
            return "does not belong to the certificate"
        return f"is not a PEM certificate{'' if key_file is None else ' and key'} ({exc.reason or exc})"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    return None


def read_prometheus(doc: Section) -> PrometheusConfig:
    section = doc.section("prometheus")
    has_url, has_urls = section.has("url"), section.has("urls")
    if not has_url and not has_urls and (section.valid or section.absent):
        doc.errors.append(FieldError("prometheus.url", section.line, "is required (or urls: a list of endpoints)"))
    if has_url and has_urls:
        section.error("urls", "give url or urls, not both (url is a list of one)")
    url = section.get("url", endpoint, "")
    urls: tuple[str, ...] = section.get("urls", endpoints, ())
    basic_auth = _basic_auth(section.section("basicAuth"))
    sigv4 = _sigv4(section.section("sigv4"))
    config = PrometheusConfig(
        url=url or (urls[0] if urls else ""),
        urls=urls,
        timeout=section.setting(PrometheusConfig, "timeout", positive_duration),
        bearer_token_file=section.setting(PrometheusConfig, "bearer_token_file", credential_file),
        basic_auth=basic_auth,
        sigv4=sigv4,
        ca_file=section.setting(PrometheusConfig, "ca_file", credential_file),
        cert_file=section.setting(PrometheusConfig, "cert_file", credential_file),
        key_file=section.setting(PrometheusConfig, "key_file", credential_file),
        server_name=section.setting(PrometheusConfig, "server_name", string),
        insecure_skip_verify=section.setting(PrometheusConfig, "insecure_skip_verify", boolean),
        headers=section.setting(PrometheusConfig, "headers", headers),
        header_files=section.setting(PrometheusConfig, "header_files", header_files),
        query_params=section.setting(PrometheusConfig, "query_params", query_params),
        partial_response=section.setting(PrometheusConfig, "partial_response", choice(*PARTIAL_RESPONSES)),
    )
    _check_together(section, config)
    section.finish()
    return config


def _basic_auth(section: Section) -> BasicAuth | None:
    if section.absent or not section.valid:
        return None
    username = section.get("username", string, "")
    password_file = section.get("passwordFile", credential_file, "")
    for key, value in (("username", username), ("passwordFile", password_file)):
        if not value and key not in section.data:
            section.error(key, "is required with basicAuth")
    section.finish()
    return BasicAuth(username, password_file) if username and password_file else None


def region(value: Any) -> str:
    text = string(value)
    if not _REGION.match(text):
        raise ValueError(f"{text!r} is not an AWS region (such as us-east-1)")
    return text


def role_arn(value: Any) -> str:
    text = string(value)
    if not _ROLE_ARN.match(text):
        raise ValueError(f"{text!r} is not an IAM role ARN (arn:aws:iam::123456789012:role/name)")
    return text


def _sigv4(section: Section) -> SigV4 | None:
    if section.absent or not section.valid:
        return None
    found_region = section.get("region", region, "")
    if not found_region and "region" not in section.data:
        section.error("region", "is required with sigv4: the region of the workspace (us-east-1)")
    arn = section.get("roleArn", role_arn, None)
    section.finish()
    if importlib.util.find_spec("botocore") is None:
        message = "needs the AWS SDK (botocore): pip install 'loadext[aws]' (the image has it)"
        section.errors.append(FieldError(section.path, section.line, message))
        return None
    return SigV4(found_region, arn) if found_region else None


def header_files(value: Any) -> tuple[tuple[str, str], ...]:
    """Header name -> a file holding its value (a tenant ID or an API key from a Secret)."""
    pairs = headers(value)
    for name, path in pairs:
        try:
            credential_file(path)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    return pairs


def _check_together(section: Section, config: PrometheusConfig) -> None:
    """The settings that only make sense with, or without, one another."""
    if bool(config.cert_file) != bool(config.key_file):
        given, missing = ("certFile", "keyFile") if config.cert_file else ("keyFile", "certFile")
        section.error(given, f"needs {missing} too: a client certificate is a certificate and its key")
    elif config.cert_file and config.key_file:
        problem = _pem_problem(config.cert_file, config.key_file)
        if problem:
            section.error("keyFile", f"{config.key_file} {problem} ({config.cert_file})")
    if config.ca_file:
        problem = _pem_problem(config.ca_file, None)
        if problem:
            section.error("caFile", f"{config.ca_file} {problem}")
    authentications = [key for key, value in _authentications(config) if value]
    if len(authentications) > 1:
        both = " and ".join(authentications)
        section.error(authentications[1], f"give one of bearerTokenFile, basicAuth and sigv4, not {both}")
    if authentications:
        for name, _ in (*config.headers, *config.header_files):
            if name.lower() in _AUTH_HEADERS:
                where = "headers" if name in dict(config.headers) else "headerFiles"
                section.error(where, f"{name} is set by {authentications[0]} already")


def _authentications(config: PrometheusConfig) -> tuple[tuple[str, object], ...]:
    """The settings that each set the Authorization header: one at most."""
    return (("bearerTokenFile", config.bearer_token_file), ("basicAuth", config.basic_auth), ("sigv4", config.sigv4))
