"""aiohttp glue: the routes. The four extender verbs under a path prefix (each call handled
by verbs.py), plus health, metrics, explain and the log level; anything else is a JSON 404 or
405 naming what exists.

Nothing on the verbs' path waits on Prometheus; bind alone waits on the API server, in a
worker thread, so concurrent binds never stall filter calls.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler

from loadext import logs
from loadext.core.explain import explain, explain_pod
from loadext.core.requests import PodRef
from loadext.http.limits import handling
from loadext.http.protocol import (
    ExtenderRequest,
    decode_binding_args,
    encode_binding_result,
    encode_filter_result,
    encode_preemption_result,
)
from loadext.http.state import ServerState
from loadext.http.verbs import JSON, Answer, verb_handler

log = logging.getLogger(__name__)


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
        _route(app, state, "POST", f"{prefix}/{verb}", verb_handler(state, verb, answer))

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
