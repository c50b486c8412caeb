"""How a Prometheus query failed, as a bounded kind (a metric label) and a line that says why."""

from __future__ import annotations

from typing import Literal, get_args

ErrorKind = Literal[
    "timeout",  # no answer within prometheus.timeout
    "connection",  # refused, reset, DNS, TLS
    "auth",  # HTTP 401 or 403: credentials missing, wrong or not allowed
    "credentials",  # a credential file loadext could not read, or no AWS credentials for sigv4
    "bad_query",  # HTTP 400 from Prometheus: it could not parse or plan the query
    "execution",  # HTTP 422: it failed while evaluating (too many samples, ...)
    "unavailable",  # HTTP 503: overloaded or shutting down
    "http_4xx",
    "http_5xx",
    "http_other",  # any other status, or a 400 that is not Prometheus' (a proxy's)
    "parse",  # a reply that is not Prometheus' API JSON
    "result_type",  # a matrix where a vector was due, or malformed samples
    "partial",  # a reply with warnings (a store down) under partialResponse: fail
    "request",  # anything else requests raised
]
ERROR_KINDS: tuple[str, ...] = get_args(ErrorKind)  # the label values of loadext_prometheus_query_errors_total


class QueryError(Exception):
    """A failed query; `kind` is a bounded label value for metrics, `detail` says why."""

    def __init__(self, kind: ErrorKind, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail
