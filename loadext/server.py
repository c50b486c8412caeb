"""aiohttp glue: the four extender verbs under a path prefix, plus health, metrics and explain.

Every verb answers 200 with a protocol body, or a JSON error body: 400 naming what is wrong with
the request, 413 too large, 408 too slow, 503 over the concurrency caps (limits.py). Nothing on
this path waits on Prometheus; bind alone waits on the API server, in a worker thread, so
concurrent binds never stall filter calls. Each call can be logged as one line (logger
loadext.requests, at debug).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client.aiohttp import make_aiohttp_handler

from loadext import kube, logs
from loadext.extender import Answer, Extender
from loadext.herd import allocatable
from loadext.limits import Admission, Limits, track_handling
from loadext.logs import request_id
from loadext.protocol import (
    BindingArgs,
    ExtenderArgs,
    PodRef,
    ProtocolError,
    decode_binding_args,
    decode_extender_args,
    decode_preemption_args,
    encode_binding_result,
)
from loadext.refresher import Refresher
from loadext.reload import ConfigFileWatcher, ConfigReloader
from loadext.telemetry import OUTCOMES

log = logging.getLogger(__name__)
request_log = logging.getLogger("loadext.requests")

JSON = "application/json"


@dataclass(frozen=True)
class ConfigMapRef:
    namespace: str
    name: str
    key: str = "config.yaml"


@dataclass
class Runtime:
    """Everything the app runs: the extender and the background jobs around it."""

    extender: Extender
    refresher: Refresher | None = None
    config_watcher: ConfigFileWatcher | None = None
    configmap: ConfigMapRef | None = None
    reloader: ConfigReloader | None = None
    kube_api: Any = None
    watch_nodes: bool = False
    limits: Limits = field(default_factory=Limits)
    draining: bool = False  # set on SIGTERM: readiness false, connections closed after each reply
    admission: Admission = field(init=False)

    def __post_init__(self) -> None:
        self.admission = Admission(self.limits)
        self.extender.telemetry.in_flight.set_function(lambda: self.admission.requests)


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
    runtime: Runtime, verb: str, answer: Callable[[bytes], Awaitable[Answer]]
) -> Callable[[web.Request], Awaitable[web.Response]]:
    telemetry = runtime.extender.telemetry
    limits = runtime.limits
    admission = runtime.admission
    duration = telemetry.request_duration.labels(verb)
    outcomes = {o: telemetry.requests.labels(verb, o) for o in OUTCOMES}
    process_tag, serial = f"{verb[:2]}{os.urandom(4).hex()}", itertools.count(1)  # unique, and cheap

    too_large = f"request body too large: over --max-body-size ({limits.max_body_size} bytes)"

    def refuse(status: int, outcome: str, message: str, started: float, **headers: str) -> web.Response:
        """Refused before the body was read: counted and logged with the reason like the rest."""
        outcomes[outcome].inc()
        level = logging.DEBUG if outcome == "overloaded" else logging.WARNING
        if request_log.isEnabledFor(level):
            _log_request(level, verb, outcome, time.perf_counter() - started, {}, message)
        return _json_error(status, verb, message, **headers)

    async def handle(request: web.Request) -> web.Response:
        started = time.perf_counter()
        rid = request.headers.get("X-Request-Id") or f"{process_tag}-{next(serial):x}"
        request_id.set(rid)
        outcome = "ok"
        error = ""
        summary: dict[str, Any] = {}
        length = request.content_length
        if length is not None and length > limits.max_body_size:
            return refuse(413, "bad_request", f"{too_large}: {length} bytes declared", started, **{"X-Request-Id": rid})
        reserved = admission.admit(length)
        if reserved is None:
            message = f"{admission.requests} requests in flight; retry later (see --max-concurrent-requests)"
            return refuse(503, "overloaded", message, started, **{"Retry-After": "1", "X-Request-Id": rid})
        try:
            async with asyncio.timeout(limits.body_timeout):  # a timer, not a task as wait_for makes
                body = await request.read()
            reply = await answer(body)
            summary = reply.summary
            return web.Response(body=reply.body, content_type=JSON, headers={"X-Request-Id": rid})
        except ProtocolError as exc:
            outcome, error = "bad_request", str(exc)
            return _json_error(400, verb, error, **{"X-Request-Id": rid})
        except web.HTTPRequestEntityTooLarge:
            outcome, error = "bad_request", f"{too_large}: the body ran past it"
            return _json_error(413, verb, error, **{"X-Request-Id": rid})
        except ConnectionResetError:  # the client went away mid-body: nobody to answer
            outcome, error = "aborted", "client closed the connection"
            return _json_error(400, verb, error)
        except TimeoutError:
            outcome, error = "timeout", f"request body not received within {limits.body_timeout:g}s (--body-timeout)"
            telemetry.slow_clients.labels("body").inc()
            return _json_error(408, verb, error, **{"X-Request-Id": rid})
        except Exception as exc:  # a bug: say so in JSON, keep serving
            outcome, error = "error", f"internal error: {type(exc).__name__}: {exc}"
            log.exception("%s failed", verb)
            return _json_error(500, verb, error, **{"X-Request-Id": rid})
        finally:
            admission.release(reserved)
            outcomes[outcome].inc()
            took = time.perf_counter() - started
            duration.observe(took)
            level = logging.DEBUG if outcome in ("ok", "overloaded", "aborted") else logging.WARNING
            if request_log.isEnabledFor(level):
                _log_request(level, verb, outcome, took, summary, error)

    return handle


def _log_request(level: int, verb: str, outcome: str, took: float, summary: dict[str, Any], error: str = "") -> None:
    """One line per extender call: what was asked, what loadext decided (or why it refused the
    call), how long it took. At debug for answered calls (switch on with PUT /debug/loglevel):
    measured at 500 nodes, a line per call costs about a third of the throughput; at warning
    for refused ones, always with the reason."""
    fields = {"verb": verb, "outcome": outcome, "duration_ms": round(took * 1000, 3), **summary}
    if error:
        fields["error"] = error
        request_log.log(level, "%s %s %s: %s", verb, summary.get("pod", "-"), outcome, error, extra={"fields": fields})
    else:
        request_log.log(level, "%s %s %s", verb, summary.get("pod", "-"), outcome, extra={"fields": fields})


@web.middleware
async def _edges(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Per request, for every route: the header deadline learns its headers are in, unknown
    paths and wrong methods get a JSON error naming what exists, and while draining each reply
    closes its connection so the client reconnects elsewhere."""
    try:
        response: web.StreamResponse = await track_handling(request, handler)
    except (web.HTTPNotFound, web.HTTPMethodNotAllowed) as exc:
        response = _routing_error(request, exc)
    if request.app[RUNTIME].draining:
        response.force_close()
    return response


def _routing_error(request: web.Request, exc: web.HTTPException) -> web.Response:
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(exc.allowed_methods - {"HEAD"}))
        message = f"{request.method} {request.path}: method not allowed, use {allowed}"
        headers = {"Allow": ", ".join(sorted(exc.allowed_methods))}
    else:
        routes = {f"{r.method} {r.resource.canonical}" for r in request.app.router.routes() if r.resource}
        endpoints = ", ".join(sorted(route for route in routes if not route.startswith("HEAD ")))
        message, headers = f"{request.method} {request.path}: no such endpoint (endpoints: {endpoints})", {}
    log.warning("%d %s", exc.status, message)
    return web.Response(status=exc.status, body=orjson.dumps({"error": message}), content_type=JSON, headers=headers)


RUNTIME = web.AppKey("runtime", Runtime)


def _ops_routes(app: web.Application, runtime: Runtime) -> None:
    """Health and metrics: on the main port, and alone on the plain --metrics-listen port."""
    extender = runtime.extender

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        if runtime.draining:
            return web.Response(status=503, text="shutting down\n")
        if extender.ready:
            return web.Response(text="ready\n")
        return web.Response(status=503, text="waiting for the first refresh\n")

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", make_aiohttp_handler(extender.telemetry.registry))


def create_ops_app(runtime: Runtime) -> web.Application:
    """The plain-HTTP port beside an mTLS main port: kubelet probes and Prometheus scrapes
    carry no client certificate. Only read-only health and metrics; no verbs, no explain."""
    app = web.Application(middlewares=[_edges])
    app[RUNTIME] = runtime
    _ops_routes(app, runtime)
    return app


def create_app(runtime: Runtime, path_prefix: str = "/") -> web.Application:
    extender = runtime.extender
    app = web.Application(client_max_size=runtime.limits.max_body_size, middlewares=[_edges])
    app[RUNTIME] = runtime
    prefix = normalise_prefix(path_prefix)

    def extender_args(body: bytes) -> ExtenderArgs:
        config = extender.config
        details = config.node_identity.kind == "address" or bool(config.pools) or config.herd_guard.enabled
        return decode_extender_args(body, node_details=details)

    async def do_filter(body: bytes) -> Answer:
        args = extender_args(body)
        return _with_pod(extender.filter(args), args.pod)

    async def do_prioritize(body: bytes) -> Answer:
        args = extender_args(body)
        return _with_pod(extender.prioritize(args), args.pod)

    async def do_preempt(body: bytes) -> Answer:
        args = decode_preemption_args(body)
        return _with_pod(extender.preempt(args), args.pod)

    async def do_bind(body: bytes) -> Answer:
        args = decode_binding_args(body)
        error = await _bind(runtime, args)
        summary = {"pod": f"{args.pod_namespace}/{args.pod_name}", "node": args.node, "error": error or None}
        return Answer(encode_binding_result(error), summary)

    for verb, answer in (
        ("filter", do_filter),
        ("prioritize", do_prioritize),
        ("preempt", do_preempt),
        ("bind", do_bind),
    ):
        app.router.add_post(f"{prefix}/{verb}", _verb_handler(runtime, verb, answer))

    async def explain(request: web.Request) -> web.Response:
        pod = request.query.get("pod")
        if pod is not None:
            decision = extender.explain_pod(pod)
            if decision is None:
                message = f"no recent decision for pod {pod!r} (NAMESPACE/NAME; the last 256 pods are kept)"
                return web.Response(status=404, body=orjson.dumps({"error": message}), content_type=JSON)
            return web.Response(body=orjson.dumps(decision, option=orjson.OPT_INDENT_2), content_type=JSON)
        report = extender.explain()
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

    _ops_routes(app, runtime)
    app.router.add_get("/explain", explain)
    app.router.add_get("/debug/loglevel", get_log_level)
    app.router.add_put("/debug/loglevel", put_log_level)
    app.cleanup_ctx.append(_background(runtime))
    return app


def _with_pod(answer: Answer, pod: PodRef | None) -> Answer:
    if pod is not None:
        answer.summary["pod"] = pod.key
    return answer


async def _bind(runtime: Runtime, args: BindingArgs) -> str:
    if not runtime.extender.config.bind_enabled:
        return "loadext: bind is disabled (set bind.enabled: true, or remove bindVerb)"
    if runtime.kube_api is None:
        return "loadext: bind is enabled but no Kubernetes API client is configured (--kubeconfig)"
    error = await asyncio.to_thread(kube.bind, runtime.kube_api, args)
    if error:
        log.warning("bind failed: %s", error)
    else:
        runtime.extender.record_binding(args.pod_uid, args.node)
    return error


def _background(runtime: Runtime) -> Callable[[web.Application], AsyncIterator[None]]:
    async def jobs(_: web.Application) -> AsyncIterator[None]:
        tasks = []
        if runtime.refresher is not None:
            tasks.append(asyncio.create_task(runtime.refresher.run(), name="refresher"))
        if runtime.config_watcher is not None:
            tasks.append(asyncio.create_task(runtime.config_watcher.run(), name="config-watcher"))
        watches = [w for w in (_watch_nodes(runtime), _watch_configmap(runtime)) if w is not None]
        if runtime.kube_api is not None:
            tasks.append(asyncio.create_task(_supervise_pod_watch(runtime), name="pod-watch"))
        elif runtime.extender.config.herd_guard.enabled:
            log.warning("herdGuard needs a Kubernetes API client to watch pods; only loadext's own binds count")
        yield
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for watch in watches:
            watch.stop.set()
        if runtime.refresher is not None:
            runtime.refresher.close()

    return jobs


def _health(runtime: Runtime, resource: str) -> Callable[[bool], None]:
    gauge = runtime.extender.telemetry.watch_healthy.labels(resource)
    return lambda healthy: gauge.set(1 if healthy else 0)


def _watch_nodes(runtime: Runtime) -> kube.ListWatch | None:
    """Nodes from the API feed the directory on the loop thread (it is not thread-safe)."""
    if not runtime.watch_nodes:
        return None
    if runtime.kube_api is None:
        log.warning("--watch-nodes needs a Kubernetes API client; node addresses come from requests only")
        return None
    loop = asyncio.get_running_loop()
    directory = runtime.extender.directory

    def on_list(nodes: list[Any]) -> None:
        addresses = {node.metadata.name: kube.node_addresses(node) for node in nodes}
        labels = {node.metadata.name: node.metadata.labels or {} for node in nodes}
        loop.call_soon_threadsafe(directory.replace_all, addresses, labels)
        for node in nodes:
            loop.call_soon_threadsafe(
                directory.set_allocatable, node.metadata.name, allocatable(kube.node_allocatable(node))
            )

    def on_event(kind: str, node: Any) -> None:
        if kind == "DELETED":
            loop.call_soon_threadsafe(directory.delete, node.metadata.name)
        else:
            loop.call_soon_threadsafe(
                directory.upsert, node.metadata.name, kube.node_addresses(node), node.metadata.labels or {}
            )
            loop.call_soon_threadsafe(
                directory.set_allocatable, node.metadata.name, allocatable(kube.node_allocatable(node))
            )

    return kube.ListWatch(runtime.kube_api.list_node, on_list, on_event, _health(runtime, "nodes")).start()


async def _supervise_pod_watch(runtime: Runtime) -> None:
    """Watch bound pods while the herd guard is enabled, so a ConfigMap edit can turn it on or
    off without a restart; stop watching (and forget) when it is off."""
    watch: kube.ListWatch | None = None
    try:
        while True:
            enabled = runtime.extender.config.herd_guard.enabled
            if enabled and watch is None:
                watch = _watch_pods(runtime)
            elif not enabled and watch is not None:
                watch.stop.set()
                watch = None
                runtime.extender.inflight.replace_all({}, runtime.extender.clock())
            await asyncio.sleep(1.0)
    finally:
        if watch is not None:
            watch.stop.set()


def _watch_pods(runtime: Runtime) -> kube.ListWatch:
    """Bound pods feed the herd guard's in-flight accounting."""
    extender = runtime.extender
    loop = asyncio.get_running_loop()

    def on_list(pods: list[Any]) -> None:
        bound = [b for b in (kube.bound_pod(p) for p in pods) if b is not None]
        loop.call_soon_threadsafe(extender.replace_bound_pods, bound)

    def on_event(kind: str, pod: Any) -> None:
        bound = kube.bound_pod(pod)
        if bound is None:
            return
        if kind == "DELETED":
            loop.call_soon_threadsafe(extender.inflight.remove, bound.uid)
        else:
            loop.call_soon_threadsafe(extender.record_bound_pod, bound)

    return kube.ListWatch(
        runtime.kube_api.list_pod_for_all_namespaces,
        on_list,
        on_event,
        _health(runtime, "pods"),
        field_selector="spec.nodeName!=",
    ).start()


def _watch_configmap(runtime: Runtime) -> kube.ListWatch | None:
    """Reload from the ConfigMap object; a rejected version is also written as an Event on it."""
    ref, reloader, api = runtime.configmap, runtime.reloader, runtime.kube_api
    if ref is None or reloader is None or api is None:
        return None
    loop = asyncio.get_running_loop()
    source = f"configmap {ref.namespace}/{ref.name}"
    latest: list[Any] = []

    def offer(configmap: Any) -> None:
        latest[:] = [configmap]
        text = (configmap.data or {}).get(ref.key)
        if text is None:
            reloader.reject(f"{source} has no key {ref.key!r}")
        else:
            reloader.offer(text, f"{source} key {ref.key}")

    def record_event(message: str) -> None:
        if latest:
            loop.run_in_executor(None, kube.configmap_event, api, latest[0], "InvalidConfig", message)

    def on_list(items: list[Any]) -> None:
        if items:
            loop.call_soon_threadsafe(offer, items[0])
        else:
            loop.call_soon_threadsafe(reloader.reject, f"{source} not found")

    def on_event(kind: str, configmap: Any) -> None:
        if kind == "DELETED":
            loop.call_soon_threadsafe(reloader.reject, f"{source} was deleted")
        elif kind in ("ADDED", "MODIFIED"):
            loop.call_soon_threadsafe(offer, configmap)

    reloader.on_rejected = record_event
    return kube.ListWatch(
        api.list_namespaced_config_map,
        on_list,
        on_event,
        _health(runtime, "configmap"),
        namespace=ref.namespace,
        field_selector=f"metadata.name={ref.name}",
    ).start()
