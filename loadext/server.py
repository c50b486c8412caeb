"""aiohttp glue: the four extender verbs under a path prefix, plus health, metrics and explain.

Every verb answers 200 with a protocol body, or 400 with a JSON body naming what is wrong with
the request. Nothing on this path waits on Prometheus; bind alone waits on the API server, in a
worker thread, so concurrent binds never stall filter calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

from loadext import kube
from loadext.extender import Extender
from loadext.herd import allocatable
from loadext.protocol import (
    BindingArgs,
    ExtenderArgs,
    ProtocolError,
    decode_binding_args,
    decode_extender_args,
    decode_preemption_args,
    encode_binding_result,
)
from loadext.refresher import Refresher
from loadext.reload import ConfigFileWatcher, ConfigReloader

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY = 256 * 1024 * 1024  # a 5000-node non-cache request is ~37 MB
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


def _json_error(status: int, verb: str, message: str) -> web.Response:
    return web.Response(status=status, body=orjson.dumps({"error": message, "verb": verb}), content_type=JSON)


def _verb_handler(
    runtime: Runtime, verb: str, answer: Callable[[bytes], Awaitable[bytes]]
) -> Callable[[web.Request], Awaitable[web.Response]]:
    telemetry = runtime.extender.telemetry
    duration = telemetry.request_duration.labels(verb)
    outcomes = {o: telemetry.requests.labels(verb, o) for o in ("ok", "bad_request", "error")}

    async def handle(request: web.Request) -> web.Response:
        started = time.perf_counter()
        outcome = "ok"
        try:
            body = await request.read()
            return web.Response(body=await answer(body), content_type=JSON)
        except ProtocolError as exc:
            outcome = "bad_request"
            return _json_error(400, verb, str(exc))
        except web.HTTPRequestEntityTooLarge as exc:
            outcome = "bad_request"
            return _json_error(413, verb, f"request body too large ({exc.text}); raise --max-body-size")
        except Exception as exc:  # a bug: say so in JSON, keep serving
            outcome = "error"
            log.exception("%s failed", verb)
            return _json_error(500, verb, f"internal error: {type(exc).__name__}: {exc}")
        finally:
            outcomes[outcome].inc()
            duration.observe(time.perf_counter() - started)

    return handle


def create_app(runtime: Runtime, path_prefix: str = "/", max_body_size: int = DEFAULT_MAX_BODY) -> web.Application:
    extender = runtime.extender
    app = web.Application(client_max_size=max_body_size)
    prefix = normalise_prefix(path_prefix)

    def extender_args(body: bytes) -> ExtenderArgs:
        config = extender.config
        details = config.node_identity.kind == "address" or bool(config.pools) or config.herd_guard.enabled
        return decode_extender_args(body, node_details=details)

    async def do_filter(body: bytes) -> bytes:
        return extender.filter(extender_args(body))

    async def do_prioritize(body: bytes) -> bytes:
        return extender.prioritize(extender_args(body))

    async def do_preempt(body: bytes) -> bytes:
        return extender.preempt(decode_preemption_args(body))

    async def do_bind(body: bytes) -> bytes:
        return encode_binding_result(await _bind(runtime, decode_binding_args(body)))

    for verb, answer in (
        ("filter", do_filter),
        ("prioritize", do_prioritize),
        ("preempt", do_preempt),
        ("bind", do_bind),
    ):
        app.router.add_post(f"{prefix}/{verb}", _verb_handler(runtime, verb, answer))

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        if extender.ready:
            return web.Response(text="ready\n")
        return web.Response(status=503, text="waiting for the first refresh\n")

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

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/explain", explain)
    app.router.add_get("/metrics", make_aiohttp_handler(extender.telemetry.registry))
    app.cleanup_ctx.append(_background(runtime))
    return app


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

    return kube.ListWatch(runtime.kube_api.list_node, on_list, on_event).start()


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
        runtime.kube_api.list_pod_for_all_namespaces, on_list, on_event, field_selector="spec.nodeName!="
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
        namespace=ref.namespace,
        field_selector=f"metadata.name={ref.name}",
    ).start()
