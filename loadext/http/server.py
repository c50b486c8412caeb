"""aiohttp glue: the four extender verbs under a path prefix, plus health, metrics and explain.

Every verb answers 200 with a protocol body, or a JSON error body: 400 naming what is wrong with
the request, 413 too large, 408 too slow, 503 over the concurrency caps (limits.py). Nothing on
this path waits on Prometheus; bind alone waits on the API server, in a worker thread, so
concurrent binds never stall filter calls. Each call can be logged as one line (logger
loadext.requests, at debug).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler

from loadext import logs
from loadext.config.serving import Limits
from loadext.core.explain import ExplainState, explain, explain_pod
from loadext.core.extender import Extender
from loadext.core.requests import BindingArgs, PodRef
from loadext.http.limits import LARGE_BODY, Admission, BodyBudget, handling
from loadext.http.protocol import (
    Codec,
    ExtenderRequest,
    ProtocolError,
    decode_binding_args,
    encode_binding_result,
    encode_filter_result,
    encode_preemption_result,
)
from loadext.logs import request_id
from loadext.telemetry import Telemetry

log = logging.getLogger(__name__)
request_log = logging.getLogger("loadext.requests")

JSON = "application/json"


Binder = Callable[[BindingArgs], Awaitable[str]]  # "" when bound, else the error for the scheduler


@dataclass(frozen=True, slots=True)
class Answer:
    """A verb's reply body, and how to say what it decided in the request log line: built only
    when that line is written (debug for answered calls), not on every call."""

    body: bytes
    summary: Callable[[], dict[str, Any]]


@dataclass
class ServerState:
    """What the HTTP layer serves from; app.py builds it and runs the background jobs."""

    explained: ExplainState  # what explain reads
    extender: Extender  # the verbs
    telemetry: Telemetry
    bind: Binder
    limits: Limits = field(default_factory=Limits)
    rebalance_report: Callable[[], dict[str, Any]] | None = None  # /explain's "rebalance" (the rebalancer runs)
    draining: bool = False  # set on SIGTERM: readiness false, connections closed after each reply
    waiting_for: Callable[[], list[str]] = list  # what readiness waits for (sources/readiness.py)
    codec: Codec = field(default_factory=Codec)  # its caches are this server's, not the process's
    admission: Admission = field(init=False)
    body_budget: BodyBudget = field(init=False)

    def __post_init__(self) -> None:
        self.admission = Admission(self.limits)
        self.body_budget = BodyBudget(self.limits.body_memory)
        self.telemetry.verbs.watch_in_flight(lambda: self.admission.requests)


def install_event_loop() -> None:
    """Use uvloop when it is installed: a faster event loop for the same code."""
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def normalise_prefix(prefix: str) -> str:
    """'/', '' -> ''; 'scheduler/' -> '/scheduler': the scheduler strips trailing slashes too."""
    stripped = prefix.strip().strip("/")
    return f"/{stripped}" if stripped else ""


def _json_error(status: int, verb: str, message: str, **headers: str) -> web.Response:
    response = web.Response(
        status=status, body=orjson.dumps({"error": message, "verb": verb}), content_type=JSON, headers=headers
    )
    if status in (408, 413, 503):  # the body may be unread or half-read: this connection is done
        response.force_close()
    return response


def _verb_handler(
    state: ServerState, verb: str, answer: Callable[[bytes], Awaitable[Answer]]
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    metrics = state.telemetry.verbs
    limits = state.limits
    admission, budget = state.admission, state.body_budget
    duration, count_outcome = metrics.handler_counters(verb)
    process_tag, serial = f"{verb[:2]}{os.urandom(4).hex()}", itertools.count(1)  # unique, and cheap

    too_large = f"request body too large: over --max-body-size ({limits.max_body_size} bytes)"

    def refuse(status: int, outcome: str, message: str, started: float, **headers: str) -> web.Response:
        """Refused before the body was read: counted and logged with the reason like the rest."""
        count_outcome(outcome)
        level = logging.DEBUG if outcome == "overloaded" else logging.WARNING
        if request_log.isEnabledFor(level):
            _log_request(level, verb, outcome, time.perf_counter() - started, dict, message)
        return _json_error(status, verb, message, **headers)

    async def handle(request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        rid = request.headers.get("X-Request-Id") or f"{process_tag}-{next(serial):x}"
        request_id.set(rid)
        outcome = "ok"
        error = ""
        summary: Callable[[], dict[str, Any]] = dict
        length = request.content_length
        if length is not None and length > limits.max_body_size:
            return refuse(413, "bad_request", f"{too_large}: {length} bytes declared", started, **{"X-Request-Id": rid})
        reserved = admission.admit(length)
        if reserved is None:
            message = f"{admission.requests} requests in flight; retry later (see --max-concurrent-requests)"
            return refuse(503, "overloaded", message, started, **{"Retry-After": "1", "X-Request-Id": rid})
        large, granted = reserved >= LARGE_BODY, False
        try:
            if large and not (granted := await budget.wait_turn(reserved, limits.body_timeout)):
                outcome = "overloaded"
                error = f"large bodies waited over --body-timeout for --body-memory ({limits.body_memory} bytes)"
                return _json_error(503, verb, error, **{"Retry-After": "1", "X-Request-Id": rid})
            # A large body is read into nothing that outlives this call (read() keeps a copy).
            reading = request.content.readexactly(length) if large and length is not None else request.read()
            if request.content.is_eof():  # the whole body came with the headers: no timer needed
                body = await reading
            else:
                async with asyncio.timeout(limits.body_timeout):  # a timer, not a task as wait_for makes
                    body = await reading
            reply = await answer(body)
            summary = reply.summary
            if not large:
                return web.Response(body=reply.body, content_type=JSON, headers={"X-Request-Id": rid})
            # Sent before the budget is given back, and held by nothing once sent: the body and
            # the reply each weigh tens of megabytes at 5000 nodes.
            outgoing = [reply.body]
            del body, reply
            return await _send(request, outgoing, rid)
        except ProtocolError as exc:
            outcome, error = "bad_request", str(exc)
            return _json_error(400, verb, error, **{"X-Request-Id": rid})
        except web.HTTPRequestEntityTooLarge:
            outcome, error = "bad_request", f"{too_large}: the body ran past it"
            return _json_error(413, verb, error, **{"X-Request-Id": rid})
        except (ConnectionResetError, asyncio.IncompleteReadError):  # the client went away mid-body
            outcome, error = "aborted", "client closed the connection"
            return _json_error(400, verb, error)
        except TimeoutError:
            outcome, error = "timeout", f"request body not received within {limits.body_timeout:g}s (--body-timeout)"
            metrics.slow_client("body")
            return _json_error(408, verb, error, **{"X-Request-Id": rid})
        except Exception as exc:  # a bug: say so in JSON, keep serving
            outcome, error = "error", f"internal error: {type(exc).__name__}: {exc}"
            log.exception("%s failed", verb)
            return _json_error(500, verb, error, **{"X-Request-Id": rid})
        finally:
            admission.release(reserved)
            if granted:
                budget.release(reserved)
            count_outcome(outcome)
            took = time.perf_counter() - started
            duration.observe(took)
            level = logging.DEBUG if outcome in ("ok", "overloaded", "aborted") else logging.WARNING
            if request_log.isEnabledFor(level):
                _log_request(level, verb, outcome, took, summary, error)

    return handle


async def _send(request: web.Request, outgoing: list[bytes], rid: str) -> web.StreamResponse:
    """Write a large reply now; `outgoing` is emptied, so no reference keeps it once written."""
    body = outgoing.pop()
    response = web.StreamResponse(headers={"X-Request-Id": rid})
    response.content_type, response.content_length = JSON, len(body)
    await response.prepare(request)
    await response.write(body)
    del body
    await response.write_eof()
    return response


def _log_request(
    level: int, verb: str, outcome: str, took: float, summarise: Callable[[], dict[str, Any]], error: str = ""
) -> None:
    """One line per extender call: what was asked, what loadext decided (or why it refused the
    call), how long it took. At debug for answered calls (switch on with PUT /debug/loglevel):
    measured at 500 nodes, a line per call costs about a third of the throughput; at warning
    for refused ones, always with the reason."""
    summary = summarise()
    fields = {"verb": verb, "outcome": outcome, "duration_ms": round(took * 1000, 3), **summary}
    if error:
        fields["error"] = error
        request_log.log(level, "%s %s %s: %s", verb, summary.get("pod", "-"), outcome, error, extra={"fields": fields})
    else:
        request_log.log(level, "%s %s %s", verb, summary.get("pod", "-"), outcome, extra={"fields": fields})


def _edged(state: ServerState, handler: Handler) -> Handler:
    """A route's handler with what every route needs: the connection's header deadline learns
    that its headers are in (limits.py), and while draining each reply closes its connection so
    the client reconnects elsewhere. Wrapped once per route when the app is built, not an aiohttp
    middleware: with one, every call also walks aiohttp's middleware chain."""

    async def edged(request: web.Request) -> web.StreamResponse:
        deadline = handling(request)
        try:
            response = await handler(request)
        finally:
            if deadline is not None:
                deadline.finished()
        if state.draining:
            response.force_close()
        return response

    return edged


async def _no_route(request: web.Request) -> web.Response:
    """The last route, matching any method and path the others did not: a JSON error naming
    what exists (aiohttp's own 404 and 405 pages are plain text)."""
    routes = [(r.method, r.resource.canonical) for r in request.app.router.routes() if r.resource and r.method != "*"]
    allowed = {method for method, path in routes if path == request.path}
    if allowed:
        status, headers = 405, {"Allow": ", ".join(sorted(allowed))}
        message = f"{request.method} {request.path}: method not allowed, use {', '.join(sorted(allowed - {'HEAD'}))}"
    else:
        endpoints = ", ".join(sorted({f"{method} {path}" for method, path in routes if method != "HEAD"}))
        status, headers = 404, {}
        message = f"{request.method} {request.path}: no such endpoint (endpoints: {endpoints})"
    log.warning("%d %s", status, message)
    return web.Response(status=status, body=orjson.dumps({"error": message}), content_type=JSON, headers=headers)


def _route(app: web.Application, state: ServerState, method: str, path: str, handler: Handler) -> None:
    edged = _edged(state, handler)
    if method == "GET":
        app.router.add_get(path, edged)  # and HEAD, as aiohttp's add_get gives every GET route
    else:
        app.router.add_route(method, path, edged)


def _finish_routes(app: web.Application, state: ServerState) -> None:
    """After every other route: the JSON error for whatever they do not match."""
    _route(app, state, "*", "/{path:.*}", _no_route)


def _ops_routes(app: web.Application, state: ServerState) -> None:
    """Health and metrics: on the main port, and alone on the plain --metrics-listen port."""

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        if state.draining:
            return web.Response(status=503, text="shutting down\n")
        waiting = state.waiting_for()
        if not waiting:
            return web.Response(text="ready\n")
        return web.Response(status=503, text=f"waiting for {', '.join(waiting)}\n")

    _route(app, state, "GET", "/healthz", healthz)
    _route(app, state, "GET", "/readyz", readyz)
    telemetry = state.telemetry

    async def metrics(request: web.Request) -> web.Response:
        body, content_type = telemetry.exposition(",".join(request.headers.getall("Accept", [])))
        return web.Response(body=body, headers={"Content-Type": content_type})

    _route(app, state, "GET", "/metrics", metrics)


def create_ops_app(state: ServerState) -> web.Application:
    """The plain-HTTP port beside an mTLS main port: kubelet probes and Prometheus scrapes
    carry no client certificate. Only read-only health and metrics; no verbs, no explain."""
    app = web.Application()
    _ops_routes(app, state)
    _finish_routes(app, state)
    return app


def create_app(state: ServerState, path_prefix: str = "/") -> web.Application:
    explained, extender, metrics, codec = state.explained, state.extender, state.telemetry.verbs, state.codec
    app = web.Application(client_max_size=state.limits.max_body_size)
    prefix = normalise_prefix(path_prefix)

    def extender_request(body: bytes) -> ExtenderRequest:
        return codec.decode_extender_args(body, node_details=extender.needs_node_details)

    async def do_filter(body: bytes) -> Answer:
        request = extender_request(body)
        result = extender.filter(request.args)
        metrics.count_filter(result)
        return Answer(encode_filter_result(result, request.full_nodes), _with_pod(result.summary, request.args.pod))

    async def do_prioritize(body: bytes) -> Answer:
        args = extender_request(body).args
        result = extender.prioritize(args)
        metrics.count_prioritize(result, explained.config.per_node_metrics)
        return Answer(codec.encode_host_priority_list(result), _with_pod(result.summary, args.pod))

    async def do_preempt(body: bytes) -> Answer:
        args = codec.decode_preemption_args(body)
        result = extender.preempt(args)
        metrics.count_preempt(result)
        return Answer(encode_preemption_result(result), _with_pod(result.summary, args.pod))

    async def do_bind(body: bytes) -> Answer:
        args = decode_binding_args(body)
        error = await state.bind(args)
        summary = {"pod": f"{args.pod_namespace}/{args.pod_name}", "node": args.node, "error": error or None}
        return Answer(encode_binding_result(error), lambda: summary)

    for verb, answer in (
        ("filter", do_filter),
        ("prioritize", do_prioritize),
        ("preempt", do_preempt),
        ("bind", do_bind),
    ):
        _route(app, state, "POST", f"{prefix}/{verb}", _verb_handler(state, verb, answer))

    async def explain_view(request: web.Request) -> web.Response:
        pod = request.query.get("pod")
        if pod is not None:
            decision = explain_pod(extender.decisions, explained, pod)
            if decision is None:
                message = f"no recent decision for pod {pod!r} (NAMESPACE/NAME; the last 256 pods are kept)"
                return web.Response(status=404, body=orjson.dumps({"error": message}), content_type=JSON)
            return web.Response(body=orjson.dumps(decision, option=orjson.OPT_INDENT_2), content_type=JSON)
        report = explain(explained)
        if state.rebalance_report is not None:
            report["rebalance"] = state.rebalance_report()
        node = request.query.get("node")
        if node:
            report["nodes"] = [row for row in report["nodes"] if row["node"] == node]
        return web.Response(body=orjson.dumps(report, option=orjson.OPT_INDENT_2), content_type=JSON)

    async def get_log_level(_: web.Request) -> web.Response:
        return web.Response(text=logs.level() + "\n")

    async def put_log_level(request: web.Request) -> web.Response:
        wanted = (await request.text()).strip().lower()
        try:
            logs.set_level(wanted)
        except ValueError as exc:
            return web.Response(status=400, body=orjson.dumps({"error": str(exc)}), content_type=JSON)
        log.warning("log level set to %s through /debug/loglevel", wanted)
        return web.Response(text=wanted + "\n")

    _ops_routes(app, state)
    _route(app, state, "GET", "/explain", explain_view)
    _route(app, state, "GET", "/debug/loglevel", get_log_level)
    _route(app, state, "PUT", "/debug/loglevel", put_log_level)
    _finish_routes(app, state)
    return app


def _with_pod(summarise: Callable[[], dict[str, Any]], pod: PodRef | None) -> Callable[[], dict[str, Any]]:
    if pod is None:
        return summarise
    return lambda: {**summarise(), "pod": pod.key}
