"""Prometheus as a source of per-node ratios: one instant query per signal, errors classified.

prometheus-api-client is synchronous, retries for ~6 s by default and drops the API's
`warnings`. So each client gets no retries and a short timeout, runs only in worker threads,
and a response hook picks `warnings` out of the raw body so they can be logged.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import requests
import urllib3
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from urllib3.util.retry import Retry

from loadext.config import PrometheusConfig
from loadext.nodes import identity_key

log = logging.getLogger(__name__)


class QueryError(Exception):
    """A failed query; `kind` is a bounded label value for metrics."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


@dataclass
class QueryResult:
    values: dict[str, float]  # identity -> ratio clamped to 0..1
    timestamp: float
    means: dict[str, float] = field(default_factory=dict)  # riskAware statistics, by identity
    stddevs: dict[str, float] = field(default_factory=dict)
    invalid: int = 0  # NaN/Inf samples dropped
    unlabelled: int = 0  # series without a usable identity label value
    warnings: list[str] = field(default_factory=list)


class _BearerTokenFile(requests.auth.AuthBase):
    """Re-reads the token on every request: projected service-account tokens rotate."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        with open(self.path, encoding="utf-8") as handle:
            request.headers["Authorization"] = f"Bearer {handle.read().strip()}"
        return request


class PrometheusSource:
    """One client per signal so that concurrent queries never share a requests.Session."""

    def __init__(self, config: PrometheusConfig) -> None:
        self.config = config
        self._clients: dict[str, PrometheusConnect] = {}
        self._warnings: dict[str, list[str]] = {}

    def _client(self, signal: str) -> PrometheusConnect:
        client = self._clients.get(signal)
        if client is None:
            session = requests.Session()
            if self.config.ca_file:
                session.verify = self.config.ca_file
            elif self.config.insecure_skip_verify:
                session.verify = False
            sink = self._warnings.setdefault(signal, [])
            session.hooks["response"].append(_warning_hook(sink))
            auth = _BearerTokenFile(self.config.bearer_token_file) if self.config.bearer_token_file else None
            client = PrometheusConnect(
                url=self.config.url,
                session=session,
                retry=Retry(total=0, read=False),  # no retries; read=False keeps timeouts apart
                auth=auth,
                timeout=self.config.timeout,
            )
            self._clients[signal] = client
        return client

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def query(self, signal: str, promql: str, identity_label: str, identity_kind: str) -> QueryResult:
        """Blocking: run in a worker thread, never on the event loop."""
        client = self._client(signal)
        sink = self._warnings[signal]
        sink.clear()
        result = self._call(lambda: client.custom_query(promql, params=self._server_timeout()))
        parsed = parse_vector(result, identity_label, identity_kind)
        parsed.warnings = list(sink)
        return parsed

    def query_range(self, promql: str, start: float, end: float, step: float) -> Any:
        """A range query's raw matrix (for replay); errors classified like instant queries."""
        client = self._client("replay")
        return self._call(
            lambda: client.custom_query_range(
                promql,
                datetime.fromtimestamp(start, UTC),
                datetime.fromtimestamp(end, UTC),
                f"{step:g}s",
                params=self._server_timeout(),
            )
        )

    def _server_timeout(self) -> dict[str, str]:
        """Prometheus' own evaluation deadline, a little inside ours, so a slow query is
        cancelled there rather than left running."""
        return {"timeout": f"{max(int(self.config.timeout * 900), 1)}ms"}

    @staticmethod
    def _call(run: Callable[[], Any]) -> Any:
        try:
            return run()
        except PrometheusApiClientException as exc:
            raise _classify_status(str(exc)) from exc
        except requests.exceptions.Timeout as exc:
            raise QueryError("timeout", str(exc)) from exc
        except (requests.exceptions.ConnectionError, urllib3.exceptions.HTTPError) as exc:
            raise QueryError("connection", str(exc)) from exc
        except (requests.exceptions.JSONDecodeError, ValueError, KeyError, TypeError) as exc:
            raise QueryError("parse", f"response is not a Prometheus API reply: {exc}") from exc
        except requests.exceptions.RequestException as exc:
            raise QueryError("request", str(exc)) from exc


def _warning_hook(sink: list[str]) -> Any:
    def hook(response: requests.Response, *args: Any, **kwargs: Any) -> None:
        if response.status_code == 200 and b'"warnings"' in response.content:
            with contextlib.suppress(ValueError):
                sink.extend(str(w) for w in response.json().get("warnings") or [])

    return hook


_STATUS = re.compile(r"HTTP Status Code (\d+)")


def _classify_status(message: str) -> QueryError:
    match = _STATUS.search(message)
    code = int(match.group(1)) if match else 0
    kind = {400: "bad_query", 422: "execution", 503: "unavailable"}.get(code)
    if kind is None:
        kind = "http_5xx" if code >= 500 else "http_4xx" if code >= 400 else "http_other"
    return QueryError(kind, message[:500])


def parse_vector(result: Any, identity_label: str, identity_kind: str) -> QueryResult:
    """Turn a vector result into identity -> ratio; NaN/Inf dropped, ratios clamped to 0..1.

    Two series for one node (say, two scrape jobs) keep the higher value: the safe side.
    Series labelled loadext_stat="mean"/"stddev" (riskAware queries) are kept apart.
    """
    if not isinstance(result, list):
        raise QueryError("result_type", f"expected an instant vector, got {type(result).__name__}")
    by_stat: dict[str, dict[str, float]] = {"current": {}, "mean": {}, "stddev": {}}
    invalid = unlabelled = 0
    newest = 0.0
    for item in result:
        try:
            metric, (stamp, raw) = item["metric"], item["value"]
            value, stamp = float(raw), float(stamp)
        except (KeyError, TypeError, ValueError) as exc:
            raise QueryError("result_type", f"not an instant-vector sample: {item!r:.200}") from exc
        if not math.isfinite(value):
            invalid += 1
            continue
        key = identity_key(str(metric.get(identity_label, "")), identity_kind)
        if key is None:
            unlabelled += 1
            continue
        newest = max(newest, stamp)
        stat = by_stat.get(str(metric.get("loadext_stat", "current")), by_stat["current"])
        clamped = min(1.0, max(0.0, value))
        stat[key] = max(clamped, stat.get(key, 0.0))
    return QueryResult(by_stat["current"], newest, by_stat["mean"], by_stat["stddev"], invalid, unlabelled)
