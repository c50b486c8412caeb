"""Prometheus as a source of per-node ratios: one instant query per signal, errors classified.

This speaks Prometheus' HTTP API (/api/v1/query, /api/v1/query_range) with requests directly.
prometheus-api-client was used before; for one instant query per signal it added nothing but
costs: it retried for ~6 s by default, dropped the API's `warnings`, reported errors as a bytes
repr of the body, and brought dateparser, regex, pytz and tzlocal along (8 MB of the image,
measured: 215 MB with it, 207 MB without). Each signal gets its own session (a requests.Session is not thread-safe and
refreshes query in parallel worker threads), no retries (the refresh interval is the retry)
and a short timeout.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import orjson
import requests

from loadext.config import NodeIdentity, PrometheusConfig
from loadext.core.identity import identities_for

log = logging.getLogger(__name__)


ErrorKind = Literal[
    "timeout",  # no answer within prometheus.timeout
    "connection",  # refused, reset, DNS, TLS
    "bad_query",  # HTTP 400: Prometheus could not parse or plan the query
    "execution",  # HTTP 422: it failed while evaluating (too many samples, ...)
    "unavailable",  # HTTP 503: overloaded or shutting down
    "http_4xx",
    "http_5xx",
    "http_other",
    "parse",  # a reply that is not Prometheus' API JSON
    "result_type",  # a matrix where a vector was due, or malformed samples
    "request",  # anything else requests raised
]
ERROR_KINDS: tuple[str, ...] = get_args(ErrorKind)  # the label values of loadext_prometheus_query_errors_total


class QueryError(Exception):
    """A failed query; `kind` is a bounded label value for metrics, `detail` says why."""

    def __init__(self, kind: ErrorKind, detail: str) -> None:
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
    highest: float | None = None  # the largest finite value before clamping (a 0-100 query shows here)


class _BearerTokenFile(requests.auth.AuthBase):
    """Re-reads the token on every request: projected service-account tokens rotate."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        with open(self.path, encoding="utf-8") as handle:
            request.headers["Authorization"] = f"Bearer {handle.read().strip()}"
        return request


class PrometheusSource:
    def __init__(self, config: PrometheusConfig) -> None:
        self.config = config
        self._sessions: dict[str, requests.Session] = {}

    def _session(self, signal: str) -> requests.Session:
        session = self._sessions.get(signal)
        if session is None:
            session = requests.Session()  # its default adapter makes no retries
            if self.config.ca_file:
                session.verify = self.config.ca_file
            elif self.config.insecure_skip_verify:
                session.verify = False
            if self.config.bearer_token_file:
                session.auth = _BearerTokenFile(self.config.bearer_token_file)
            self._sessions[signal] = session
        return session

    def close(self) -> None:
        for session in self._sessions.values():
            session.close()
        self._sessions.clear()

    def query(self, signal: str, promql: str, identity: NodeIdentity) -> QueryResult:
        """Blocking: run in a worker thread, never on the event loop."""
        data, warnings = self._get(signal, "/api/v1/query", {"query": promql}, "vector")
        parsed = parse_vector(data, identity)
        parsed.warnings = warnings
        return parsed

    def query_pods(self, name: str, promql: str) -> tuple[dict[tuple[str, str], float], list[str]]:
        """Blocking: a per-pod usage query's (namespace, pod) -> value, and its warnings."""
        data, warnings = self._get(name, "/api/v1/query", {"query": promql}, "vector")
        return parse_pod_vector(data), warnings

    def query_range(self, promql: str, start: float, end: float, step: float) -> Any:
        """A range query's raw matrix (for replay); errors classified like instant queries."""
        params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}s"}
        return self._get("replay", "/api/v1/query_range", params, "matrix")[0]

    def _get(self, signal: str, path: str, params: dict[str, str], result_type: str) -> tuple[Any, list[str]]:
        # Prometheus' own evaluation deadline, a little inside ours, so that a slow query is
        # cancelled there rather than left running.
        params = {**params, "timeout": f"{max(int(self.config.timeout * 900), 1)}ms"}
        try:
            response = self._session(signal).get(
                self.config.url.rstrip("/") + path, params=params, timeout=self.config.timeout
            )
        except requests.exceptions.Timeout as exc:
            raise QueryError("timeout", f"no answer within {self.config.timeout:g}s ({exc})") from exc
        except requests.exceptions.ConnectionError as exc:
            raise QueryError("connection", str(exc)) from exc
        except requests.exceptions.RequestException as exc:
            raise QueryError("request", str(exc)) from exc
        try:
            body = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            body = None
        if response.status_code != 200:
            raise _status_error(response.status_code, body, response.content)
        if not isinstance(body, dict) or not isinstance(body.get("data"), dict):
            raise QueryError("parse", f"response is not a Prometheus API reply: {response.content[:200]!r}")
        data = body["data"]
        if data.get("resultType") != result_type:
            raise QueryError("result_type", f"expected a {result_type}, got {data.get('resultType')!r}")
        return data.get("result"), [str(w) for w in body.get("warnings") or []]


def _status_error(code: int, body: Any, raw: bytes) -> QueryError:
    """Prometheus answers errors as {"status": "error", "errorType": ..., "error": ...}: keep its
    own words, which name what is wrong with the query."""
    by_code: dict[int, ErrorKind] = {400: "bad_query", 422: "execution", 503: "unavailable"}
    kind = by_code.get(code)
    if kind is None:
        kind = "http_5xx" if code >= 500 else "http_4xx" if code >= 400 else "http_other"
    if isinstance(body, dict) and body.get("error"):
        reason = f"{body.get('errorType', 'error')}: {body['error']}"
    else:
        reason = raw[:300].decode("utf-8", "replace").strip() or "(empty body)"
    return QueryError(kind, f"HTTP {code}: {reason}")


def parse_vector(result: Any, identity: NodeIdentity) -> QueryResult:
    """Turn a vector result into identity -> ratio; NaN/Inf dropped, ratios clamped to 0..1.

    Two series for one node (say, two scrape jobs) keep the higher value: the safe side.
    Series labelled loadext_stat="mean"/"stddev" (riskAware queries) are kept apart.
    """
    if not isinstance(result, list):
        raise QueryError("result_type", f"expected an instant vector, got {type(result).__name__}")
    label, key_of = identity.label, identities_for(identity).key
    by_stat: dict[str, dict[str, float]] = {"current": {}, "mean": {}, "stddev": {}}
    invalid = unlabelled = 0
    newest = 0.0
    highest: float | None = None
    for item in result:
        try:
            metric, (stamp, raw) = item["metric"], item["value"]
            value, stamp = float(raw), float(stamp)
        except (KeyError, TypeError, ValueError) as exc:
            raise QueryError("result_type", f"not an instant-vector sample: {item!r:.200}") from exc
        if not math.isfinite(value):
            invalid += 1
            continue
        highest = value if highest is None else max(highest, value)
        key = key_of(str(metric.get(label, "")))
        if key is None:
            unlabelled += 1
            continue
        newest = max(newest, stamp)
        stat = by_stat.get(str(metric.get("loadext_stat", "current")), by_stat["current"])
        clamped = min(1.0, max(0.0, value))
        stat[key] = max(clamped, stat.get(key, 0.0))
    current, mean, stddev = by_stat["current"], by_stat["mean"], by_stat["stddev"]
    return QueryResult(current, newest, mean, stddev, invalid, unlabelled, highest=highest)


def parse_matrix(result: Any, identity: NodeIdentity) -> dict[float, QueryResult]:
    """A range query's matrix as one QueryResult per step, by the same rules as the live path
    (parse_vector): NaN/Inf dropped, clamped to 0..1, the higher of two series for one node."""
    if not isinstance(result, list):
        raise QueryError("result_type", f"expected a range matrix, got {type(result).__name__}")
    vectors: dict[float, list[dict[str, Any]]] = {}
    for series in result:
        try:
            metric, values = series["metric"], series["values"]
            for stamp, raw in values:
                vectors.setdefault(float(stamp), []).append({"metric": metric, "value": (stamp, raw)})
        except (KeyError, TypeError, ValueError) as exc:
            raise QueryError("result_type", f"not a range-matrix series: {series!r:.200}") from exc
    return {stamp: parse_vector(vector, identity) for stamp, vector in vectors.items()}


def parse_pod_vector(result: Any) -> dict[tuple[str, str], float]:
    """A per-pod vector as (namespace, pod) -> value, in the query's unit (cores, bytes).
    Series without both labels, negative values and NaN/Inf are dropped: a pod is then
    estimated as if it were not measured, never from garbage."""
    if not isinstance(result, list):
        raise QueryError("result_type", f"expected an instant vector, got {type(result).__name__}")
    pods: dict[tuple[str, str], float] = {}
    for item in result:
        try:
            metric, (_, raw) = item["metric"], item["value"]
            value = float(raw)
        except (KeyError, TypeError, ValueError) as exc:
            raise QueryError("result_type", f"not an instant-vector sample: {item!r:.200}") from exc
        namespace, pod = metric.get("namespace"), metric.get("pod")
        if not namespace or not pod or not math.isfinite(value) or value < 0:
            continue
        key = (str(namespace), str(pod))
        pods[key] = max(value, pods.get(key, 0.0))  # two series for one pod (two scrape jobs): the higher
    return pods
