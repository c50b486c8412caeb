"""How loadext reaches the Prometheus HTTP API: endpoints in order, credentials, TLS, and what a
failure says.

- Endpoints (`prometheus.urls`, or `url` alone) are equivalent: a query goes to the first, and
  on a connection error, a timeout or a 5xx to the next, within the same refresh. An answer
  that would be the same everywhere (401, 400, 404) is not retried elsewhere. Each endpoint's
  last outcome is kept (`status`) for /explain and the metrics.
- Credentials come from files, read on every request, so rotation needs no reload: a bearer
  token, basic auth's password, header values (`headerFiles`); or `sigv4` signs each request
  with the AWS SDK's credentials (sigv4.py). A file that cannot be read is
  a query error naming the setting (kind `credentials`), never a traceback.
- TLS is what the config says: `caFile` or `insecureSkipVerify` is passed with every request,
  so REQUESTS_CA_BUNDLE and CURL_CA_BUNDLE cannot override it (requests lets them replace a
  session's `verify`); without either, the environment's CA bundle applies. Proxies
  (HTTPS_PROXY, NO_PROXY) are honoured as requests honours them.
- A failure is one line that leads with its cause (`connection refused to http://...`,
  `401 unauthorized at ... (basic auth user 'sre')`), and every secret loadext sent is
  redacted from it, whatever the backend echoed back.
"""

from __future__ import annotations

import base64
import re
import threading
import time
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson
import requests
from requests.adapters import HTTPAdapter

from loadext.config import PrometheusConfig
from loadext.core.ingest import EndpointState
from loadext.sources.query_error import ErrorKind, QueryError
from loadext.sources.sigv4 import Signer, canonical_query

_FAILOVER: frozenset[str] = frozenset({"timeout", "connection", "unavailable", "http_5xx"})
REDACTED = "<redacted>"


@dataclass(frozen=True)
class Reply:
    url: str  # the endpoint that answered
    result_type: str  # the API reply's data.resultType
    result: msgspec.Raw  # data.result, not decoded yet: the caller decodes only what it keeps
    warnings: list[str]
    partial: bool  # warnings (Prometheus, Thanos) or isPartial (VictoriaMetrics): some data may be missing


class _Data(msgspec.Struct, gc=False):
    resultType: str = ""
    result: msgspec.Raw = msgspec.Raw(b"null")


class _Envelope(msgspec.Struct, gc=False):
    """A 200 reply of the Prometheus API, its `data.result` left as bytes: at 15 000 series a
    reply decoded whole into dicts held the interpreter for 20 ms (one call into C) and left
    tens of thousands of objects for the garbage collector to walk."""

    data: _Data
    warnings: list[Any] | None = None
    isPartial: Any = False  # VictoriaMetrics' flag; only a JSON true counts


_ENVELOPE = msgspec.json.Decoder(_Envelope)


class _ServerName(HTTPAdapter):
    """Checks the server's certificate for `server_name` instead of the URL's host (and sends
    it as SNI): an endpoint reached by IP or through a tunnel."""

    def __init__(self, server_name: str) -> None:
        self._server_name = server_name
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["server_hostname"] = self._server_name
        kwargs["assert_hostname"] = self._server_name
        super().init_poolmanager(*args, **kwargs)


class Connection:
    def __init__(self, config: PrometheusConfig) -> None:
        self.config = config
        self._local = threading.local()  # a requests.Session per thread: sessions are not thread-safe
        self._sessions: list[requests.Session] = []
        self._lock = threading.Lock()
        self._status: dict[str, EndpointState] = {}
        self._verify: bool | str = config.ca_file or not config.insecure_skip_verify
        self._cert = (config.cert_file, config.key_file) if config.cert_file and config.key_file else None
        self._params = dict(config.query_params)
        self._signer = Signer(config.sigv4) if config.sigv4 else None

    def status(self) -> list[EndpointState]:
        """Each endpoint's last outcome, in the order they are tried (not yet tried: absent)."""
        return [self._status[url] for url in self.config.endpoints if url in self._status]

    def close(self) -> None:
        with self._lock:
            for session in self._sessions:
                session.close()
            self._sessions.clear()

    def get(self, path: str, params: dict[str, str]) -> Reply:
        """Blocking (a worker thread): the first endpoint's answer, or the next one's after a
        connection error, a timeout or a 5xx. Raises QueryError with the last failure."""
        failures: list[QueryError] = []
        for url in self.config.endpoints:
            try:
                reply = self._get(url, path, params)
            except QueryError as exc:
                self._status[url] = EndpointState(url, False, exc.detail, time.time())
                failures.append(exc)
                if exc.kind not in _FAILOVER:
                    break
                continue
            self._status[url] = EndpointState(url, True, "", time.time())
            return reply
        last = failures[-1]
        if len(failures) > 1:
            raise QueryError(last.kind, "every endpoint failed: " + "; ".join(f.detail for f in failures))
        raise last

    def _session(self) -> requests.Session:
        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()  # its default adapter makes no retries: the refresh is the retry
            if self.config.server_name:
                session.mount("https://", _ServerName(self.config.server_name))
            self._local.session = session
            with self._lock:
                self._sessions.append(session)
        return session

    def _get(self, url: str, path: str, params: dict[str, str]) -> Reply:
        secrets: list[str] = []
        timeout = self.config.timeout
        # The query string in SigV4's canonical form, whether signed or not: one encoding, always.
        query = canonical_query({**self._params, **params})
        target = f"{url}{path}?{query}" if query else url + path
        try:
            headers = self._headers(secrets)
            if self._signer is not None:
                headers.update(self._signer.headers(target, secrets))
            try:
                response = self._session().get(
                    target,
                    headers=headers,
                    timeout=timeout,
                    verify=self._verify,  # passed each time: the environment cannot replace it
                    cert=self._cert,
                )
            except requests.exceptions.Timeout:
                raise QueryError("timeout", f"no answer within {timeout:g}s from {url}") from None
            except requests.exceptions.SSLError as exc:
                raise QueryError("connection", f"TLS with {url} failed: {_tls_cause(exc)}") from None
            except requests.exceptions.ConnectionError as exc:
                raise QueryError("connection", f"{connection_cause(exc)} to {url}") from None
            except requests.exceptions.RequestException as exc:
                raise QueryError("request", f"{exc} ({url})") from None
            return self._reply(url, path, response)
        except QueryError as exc:
            raise QueryError(exc.kind, _redacted(exc.detail, secrets)) from None

    def _headers(self, secrets: list[str]) -> dict[str, str]:
        """The headers of one request, credentials read from their files now."""
        config = self.config
        headers = dict(config.headers)
        if config.bearer_token_file:
            token = _read("bearerTokenFile", config.bearer_token_file)
            secrets.append(token)
            headers["Authorization"] = f"Bearer {token}"
        if config.basic_auth is not None:
            password = _read("basicAuth.passwordFile", config.basic_auth.password_file)
            secrets.append(password)
            pair = base64.b64encode(f"{config.basic_auth.username}:{password}".encode()).decode()
            secrets.append(pair)
            headers["Authorization"] = f"Basic {pair}"
        for name, path in config.header_files:
            value = _read(f"headerFiles.{name}", path)
            secrets.append(value)
            headers[name] = value
        return headers

    def _credentials(self) -> str:
        """What was sent, as a 401 or 403 should say it (never the secret)."""
        config = self.config
        if config.bearer_token_file:
            return f"bearer token from {config.bearer_token_file}"
        if self._signer is not None:
            return self._signer.describe()
        if config.basic_auth is not None:
            return f"basic auth user {config.basic_auth.username!r}"
        if config.header_files or config.headers:
            return "headers " + ", ".join(name for name, _ in (*config.headers, *config.header_files))
        return "no credentials configured"

    def _reply(self, url: str, path: str, response: requests.Response) -> Reply:
        code = response.status_code
        if code != 200:
            try:
                body = orjson.loads(response.content)
            except orjson.JSONDecodeError:
                body = None
            raise self._status_error(url, path, code, body, response.content)
        try:
            envelope = _ENVELOPE.decode(response.content)
        except msgspec.DecodeError:
            raise QueryError(
                "parse", f"the reply from {url} is not a Prometheus API reply: {response.content[:200]!r}"
            ) from None
        data, warnings = envelope.data, [str(w) for w in envelope.warnings or []]
        return Reply(url, data.resultType, data.result, warnings, bool(warnings) or envelope.isPartial is True)

    def _status_error(self, url: str, path: str, code: int, body: Any, raw: bytes) -> QueryError:
        """One line that leads with the status and says what to check. Prometheus answers
        errors as {"status": "error", "errorType": ..., "error": ...}: its own words are kept."""
        prometheus_error = isinstance(body, dict) and body.get("status") == "error" and body.get("error")
        if prometheus_error:
            reason = f"{body.get('errorType', 'error')}: {body['error']}"
        else:
            reason = raw[:300].decode("utf-8", "replace").strip() or "(empty body)"
        if code in (401, 403):
            what = "unauthorized" if code == 401 else "forbidden"
            return QueryError("auth", f"{code} {what} at {url} ({self._credentials()}): {reason}")
        if code == 404:
            return QueryError(
                "http_4xx", f"404 not found at {url}{path}: is prometheus.url the API's base URL? ({reason})"
            )
        if code == 400:
            if prometheus_error and body.get("errorType") == "bad_data":
                return QueryError("bad_query", f"HTTP 400: {reason}")
            return QueryError("http_other", f"400 bad request from {url} (not a query error): {reason}")
        by_code: dict[int, ErrorKind] = {422: "execution", 503: "unavailable"}
        kind = by_code.get(code) or ("http_5xx" if code >= 500 else "http_4xx" if code >= 400 else "http_other")
        return QueryError(kind, f"HTTP {code} from {url}: {reason}")


def _read(setting: str, path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            value = handle.read().strip()
    except FileNotFoundError:
        raise QueryError("credentials", f"prometheus.{setting}: {path}: no such file") from None
    except OSError as exc:
        raise QueryError("credentials", f"prometheus.{setting}: {path}: cannot be read ({exc.strerror})") from None
    if not value:
        raise QueryError("credentials", f"prometheus.{setting}: {path}: is empty")
    return value


def _redacted(text: str, secrets: list[str]) -> str:
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= 4:  # a secret that short would redact ordinary words
            text = text.replace(secret, REDACTED)
    return text


_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")\]]+)")


def connection_cause(exc: Exception) -> str:
    """'connection refused', 'name or service not known', ... from urllib3's nested repr."""
    found = _ERRNO.search(str(exc))
    if found:
        return found.group(1).strip().rstrip(".").lower()
    if "RemoteDisconnected" in str(exc) or "Connection aborted" in str(exc):
        return "connection closed by the server"
    return f"cannot connect ({str(exc)[:200]})"


_SSL = re.compile(r"\] ([^(]+?) \(_ssl")


def _tls_cause(exc: Exception) -> str:
    found = _SSL.search(str(exc))
    return found.group(1).strip() if found else str(exc)[:200]
