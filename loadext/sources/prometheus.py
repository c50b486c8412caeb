"""Prometheus as a source of per-node ratios: one instant query per signal, its reply parsed.

This speaks Prometheus' HTTP API (/api/v1/query, /api/v1/query_range) through connection.py.
prometheus-api-client was used before; for one instant query per signal it added nothing but
costs: it retried for ~6 s by default, dropped the API's `warnings`, reported errors as a bytes
repr of the body, and brought dateparser, regex, pytz and tzlocal along (8 MB of the image,
measured: 215 MB with it, 207 MB without).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from loadext.config import NodeIdentity, PrometheusConfig
from loadext.core.identity import identities_for
from loadext.core.ingest import EndpointState
from loadext.sources.connection import Connection, Reply
from loadext.sources.query_error import QueryError


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
    partial: bool = False  # the reply warned that some data is missing (partialResponse: use)


class PrometheusSource:
    """The queries loadext runs, over one Connection (connection.py: endpoints, credentials,
    TLS, failures). Blocking: run in worker threads, never on the event loop."""

    def __init__(self, config: PrometheusConfig) -> None:
        self.config = config
        self.connection = Connection(config)

    def close(self) -> None:
        self.connection.close()

    def status(self) -> list[EndpointState]:
        return self.connection.status()

    def query(self, signal: str, promql: str, identity: NodeIdentity) -> QueryResult:
        reply = self._get("/api/v1/query", {"query": promql}, "vector")
        parsed = decode_vector(reply.result, identity)
        parsed.warnings, parsed.partial = reply.warnings, reply.partial
        return parsed

    def query_pods(self, name: str, promql: str) -> tuple[dict[tuple[str, str], float], list[str]]:
        """A per-pod usage query's (namespace, pod) -> value, and its warnings."""
        reply = self._get("/api/v1/query", {"query": promql}, "vector")
        return decode_pod_vector(reply.result), reply.warnings

    def query_range(
        self, promql: str, start: float, end: float, step: float, identity: NodeIdentity
    ) -> dict[float, QueryResult]:
        """A range query as one result per step (parse_matrix); errors classified like instant queries."""
        params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}s"}
        matrix = self._get("/api/v1/query_range", params, "matrix").result
        return parse_matrix(_decoded(msgspec.json.decode, matrix, "a range matrix"), identity)

    def _get(self, path: str, params: dict[str, str], result_type: str) -> Reply:
        # Prometheus' own evaluation deadline, a little inside ours, so that a slow query is
        # cancelled there rather than left running.
        params = {**params, "timeout": f"{max(int(self.config.timeout * 900), 1)}ms"}
        reply = self.connection.get(path, params)
        if reply.result_type != result_type:
            raise QueryError("result_type", f"expected a {result_type}, got {reply.result_type or None!r}")
        if reply.partial and self.config.partial_response == "fail":
            warned = "; ".join(reply.warnings) or "isPartial"
            raise QueryError("partial", f"{reply.url} answered with partial data ({warned}); partialResponse is fail")
        return reply


class _Point(msgspec.Struct, array_like=True, gc=False):
    """A sample's [time, "value"]."""

    stamp: float
    raw: str | float  # Prometheus sends a string; a number is taken as well


class _PodLabels(msgspec.Struct, gc=False):
    namespace: str = ""
    pod: str = ""


class _PodSample(msgspec.Struct, gc=False):
    metric: _PodLabels
    value: _Point


_POD_VECTOR = msgspec.json.Decoder(list[_PodSample])


@functools.cache
def _vector_decoder(label: str) -> msgspec.json.Decoder[list[Any]]:
    """A decoder of an instant vector that keeps, of each series' labels, the identity label
    and loadext_stat alone, into objects the garbage collector does not track: the rest of a
    reply is skipped over in C, never built."""
    labels = msgspec.defstruct(
        "Labels", [("identity", str, ""), ("stat", str, "current")], rename={"identity": label, "stat": "loadext_stat"},
        gc=False,
    )  # fmt: skip
    sample = msgspec.defstruct("Sample", [("metric", labels), ("value", _Point)], gc=False)
    return msgspec.json.Decoder(list[sample])  # type: ignore[valid-type]


def decode_vector(raw: bytes, identity: NodeIdentity) -> QueryResult:
    """An instant vector's JSON (data.result) as identity -> ratio (aggregate's rules)."""
    vector = _decoded(_vector_decoder(identity.label).decode, raw, "an instant vector")
    return aggregate(((s.metric.identity, s.metric.stat, s.value.stamp, s.value.raw) for s in vector), identity)


def decode_pod_vector(raw: bytes) -> dict[tuple[str, str], float]:
    """A per-pod usage vector's JSON as (namespace, pod) -> value, in the query's unit (cores,
    bytes). Series without both labels, negative values and NaN/Inf are dropped: a pod is then
    estimated as if it were not measured, never from garbage."""
    vector = _decoded(_POD_VECTOR.decode, raw, "an instant vector")
    pods: dict[tuple[str, str], float] = {}
    for sample in vector:
        value, key = _number(sample.value.raw), (sample.metric.namespace, sample.metric.pod)
        if not all(key) or not math.isfinite(value) or value < 0:
            continue
        pods[key] = max(value, pods.get(key, 0.0))  # two series for one pod (two scrape jobs): the higher
    return pods


def _decoded(decode: Callable[[bytes], Any], raw: bytes, what: str) -> Any:
    """A reply's data.result decoded, or the query error that says it is not `what`."""
    try:
        return decode(raw)
    except msgspec.DecodeError as exc:
        raise QueryError("result_type", f"not {what}: {exc}") from None


def _number(raw: str | float) -> float:
    try:
        return float(raw)
    except ValueError:
        raise QueryError("result_type", f"not a sample value: {raw!r:.50}") from None


def parse_vector(result: Any, identity: NodeIdentity) -> QueryResult:
    """An instant vector decoded as plain JSON (a range query's step, in replay) turned into
    identity -> ratio, by the live path's rules (aggregate)."""
    if not isinstance(result, list):
        raise QueryError("result_type", f"expected an instant vector, got {type(result).__name__}")
    label = identity.label

    def samples() -> Iterator[tuple[str, str, float, str | float]]:
        for item in result:
            try:
                metric, (stamp, raw) = item["metric"], item["value"]
                yield str(metric.get(label, "")), str(metric.get("loadext_stat", "current")), float(stamp), str(raw)
            except (KeyError, TypeError, ValueError) as exc:
                raise QueryError("result_type", f"not an instant-vector sample: {item!r:.200}") from exc

    return aggregate(samples(), identity)


def aggregate(samples: Iterable[tuple[str, str, float, str | float]], identity: NodeIdentity) -> QueryResult:
    """(identity label value, loadext_stat, time, value) of each series into identity ->
    ratio; NaN/Inf dropped, ratios clamped to 0..1.

    Two series for one node (say, two scrape jobs) keep the higher value: the safe side.
    Series labelled loadext_stat="mean"/"stddev" (riskAware queries) are kept apart.
    """
    key_of = identities_for(identity).key
    by_stat: dict[str, dict[str, float]] = {"current": {}, "mean": {}, "stddev": {}}
    invalid = unlabelled = 0
    newest = 0.0
    highest: float | None = None
    for label_value, stat_name, stamp, raw in samples:
        value = _number(raw)
        if not math.isfinite(value):
            invalid += 1
            continue
        highest = value if highest is None else max(highest, value)
        key = key_of(label_value)
        if key is None:
            unlabelled += 1
            continue
        newest = max(newest, stamp)
        stat = by_stat.get(stat_name, by_stat["current"])
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
