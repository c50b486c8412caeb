"""The composition root: the one place where loadext's parts are built and wired together.

core/ decides, sources/ feed it (Prometheus refresher, Kubernetes watches, config reload),
http/ serves it, telemetry.py counts it. `App` holds one process's parts; `serve` runs it as
the extender, `explain_once` as the one-shot `loadext explain`. Tests build the same App.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import logging
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web

from loadext import __version__
from loadext.actors import requeue
from loadext.actors.lease import Lease, holder_identity
from loadext.actors.rebalancer import Done, Rebalancer
from loadext.config import Config, PrometheusConfig, parse_config
from loadext.config.serving import ConfigMapRef, ConfigSource, KubeAccess, Limits, ServeOptions
from loadext.core.cluster import Cluster
from loadext.core.explain import explain, node_states_builder
from loadext.core.extender import Extender
from loadext.core.requests import BindingArgs
from loadext.http import lifecycle, starting, tls
from loadext.http.server import create_app, create_ops_app, install_event_loop
from loadext.http.state import ServerState
from loadext.sources import kube, listwatch, watches
from loadext.sources.metrics import LiveSource, MetricsSource
from loadext.sources.prometheus import PrometheusSource
from loadext.sources.query_error import ERROR_KINDS
from loadext.sources.readiness import Readiness
from loadext.sources.refresher import Refresher
from loadext.sources.reload import ConfigFileWatcher, ConfigReloader, initial_text
from loadext.telemetry import Telemetry

log = logging.getLogger("loadext")


def metrics_source(settings: PrometheusConfig) -> MetricsSource:
    """The metrics backend every reader of metrics is given (sources/metrics.py): the one
    place that names it."""
    return PrometheusSource(settings)


class App:
    """One loadext process: the extender, what feeds it, what serves it, built from a config
    document (ConfigError if it is invalid)."""

    def __init__(
        self,
        text: str,
        where: str = "config",  # where `text` came from, for errors and log lines
        *,
        config: Config | None = None,  # `text` parsed already
        source: ConfigSource | None = None,  # where reloads come from (none: the config stays)
        kube: KubeAccess | None = None,
        kube_api: Any = None,  # kubernetes.client.CoreV1Api (the client ships no type hints)
        limits: Limits | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        config = config or parse_config(text, source=where)
        self.telemetry = Telemetry()
        self.telemetry.reload.accepted()
        self.cluster = Cluster(config, clock=clock)  # the Ingest port every source feeds
        self.extender = Extender(self.cluster.verbs)
        self.metrics = LiveSource(metrics_source, lambda: self.cluster.config.prometheus)
        self.refresher = Refresher(
            self.cluster,
            self.metrics,
            self.telemetry.refresh,
            self.telemetry.herd,
            after_round=self._render_node_metrics,
        )
        self.reloader = ConfigReloader(text, self.apply, self.telemetry.reload)
        self.readiness = Readiness(lambda: self.cluster.ready)
        self.server = ServerState(
            self.cluster.explained,
            self.extender,
            self.telemetry,
            self.bind,
            limits or Limits(),
            waiting_for=self.readiness.waiting_for,
        )
        self.rebalancer: Rebalancer | None = None  # with an API client: built in _background
        source, kube = source or ConfigSource(), kube or KubeAccess()
        watcher = ConfigFileWatcher(source.file, self.reloader, source.reload_interval) if source.file else None
        self.config_watcher = watcher
        self.configmap = source.configmap_ref
        self.kube_api = kube_api
        # The herd guard needs Node allocatable: with it on at start, watch Nodes as well.
        self.watch_nodes = kube.watch_nodes or config.herd_guard.enabled
        self.requeue_stranded = kube.requeue_stranded
        self._rendered: tuple[object, ...] = ()  # what the per-node metrics were last rendered from
        cluster = self.cluster
        self.telemetry.refresh.watch_degraded(lambda: cluster.explained.table().degraded)
        self.telemetry.herd.watch_stranded(cluster.stranded_count)
        self._config_applied()

    def apply(self, config: Config) -> None:
        """A reloaded config, already validated: in force from the next request, and a refresh
        with its queries at once."""
        self.cluster.config_applied(config)
        self._config_applied()
        self.refresher.poke()
        if self.rebalancer is not None:
            self.rebalancer.poke()

    def _config_applied(self) -> None:
        cluster = self.cluster
        self.telemetry.config_applied(cluster.config, cluster.clock(), ERROR_KINDS)

    async def _render_node_metrics(self) -> None:
        """The per-node families as of the round just published: which nodes is read on the
        loop (its state), their states are built and formatted in a worker thread."""
        explained = self.cluster.explained
        version = explained.report_version()
        if explained.config.per_node_metrics and version != self._rendered:
            states = node_states_builder(explained)
            await asyncio.to_thread(lambda: self.telemetry.nodes.render(states()))
            self._rendered = version

    async def bind(self, args: BindingArgs) -> str:
        if not self.cluster.config.bind_enabled:
            return "loadext: bind is disabled (set bind.enabled: true, or remove bindVerb)"
        if self.kube_api is None:
            return "loadext: bind is enabled but no Kubernetes API client is configured (--kubeconfig)"
        error = await asyncio.to_thread(kube.bind, self.kube_api, args)
        if error:
            log.warning("bind failed: %s", error)
        else:
            self.cluster.bound_by_loadext(args.pod_uid, args.node)
        return error

    def web_app(self, path_prefix: str = "/", background: bool = True) -> web.Application:
        """The main port's application; with `background`, it also runs the refresher, the
        config watcher and the Kubernetes watches for as long as it runs."""
        app = create_app(self.server, path_prefix)
        if background:
            app.cleanup_ctx.append(self._background)
        return app

    async def _background(self, _: web.Application) -> AsyncIterator[None]:
        tasks = [asyncio.create_task(self.refresher.run(), name="refresher")]
        tasks.append(asyncio.create_task(self.readiness.supervise(), name="readiness"))
        health = self.telemetry.watches.health_of
        if self.config_watcher is not None:
            tasks.append(asyncio.create_task(self.config_watcher.run(), name="config-watcher"))
        stops: list[threading.Event] = []  # one per watch thread
        api = self.kube_api
        if self.watch_nodes and api is None:
            log.warning("--watch-nodes needs a Kubernetes API client; node addresses come from requests only")
        elif self.watch_nodes:
            nodes = self.readiness.tracked("nodes", health("nodes"))
            stops.append(watches.watch_nodes(api, self.cluster, nodes).stop)
        if self.configmap is not None and api is not None:
            configmap = self.readiness.tracked("configmap", health("configmap"))
            stops.append(watches.watch_configmap(api, self.configmap, self.reloader, configmap).stop)
        if api is not None:
            # Readiness waits for the pod list only when the herd guard is on from the start.
            pod_health = health("pods")
            if self.cluster.config.herd_guard.enabled:
                pod_health = self.readiness.tracked("pods", pod_health)
            pods = watches.supervise_pod_watch(api, self.cluster, pod_health, self.telemetry.watches.unwatched("pods"))
            tasks.append(asyncio.create_task(pods, name="pod-watch"))
        elif self.cluster.config.herd_guard.enabled:
            log.warning("herdGuard needs a Kubernetes API client to watch pods; only loadext's own binds count")
        if self.requeue_stranded and api is None:
            log.warning("--requeue-stranded needs a Kubernetes API client; stranded pods wait for the scheduler")
        elif self.requeue_stranded:
            retry = requeue.requeue_stranded(self.cluster, api, self.telemetry.herd)
            tasks.append(asyncio.create_task(retry, name="requeue-stranded"))
        if api is not None:  # idle while rebalance.enabled is false: a reload can turn it on
            lease = Lease(api, lease_namespace(self.configmap), holder_identity())
            rebalancer = self.rebalancer = Rebalancer(
                self.cluster.rebalance, self.metrics, api, self.telemetry.rebalance, lease
            )
            self.server.rebalance_report = rebalancer.report
            tasks.append(asyncio.create_task(rebalancer.run(), name="rebalancer"))
        yield
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for stop in stops:
            stop.set()
        self.metrics.close()


def lease_namespace(configmap: ConfigMapRef | None) -> str:
    """Where the rebalancer's Lease lives: loadext's own namespace (POD_NAMESPACE, which the
    chart and manifests set), else its ConfigMap's, else default."""
    return os.environ.get("POD_NAMESPACE") or (configmap.namespace if configmap else "") or "default"


# A worker thread (the refresh, the watches) holding the GIL makes the event loop wait up to
# the switch interval each time it wants it back: 5 ms by default, which is what a request
# waited behind a 5000-node refresh. Measured loop lag during refreshes: p99 5.7 -> 2.3 ms.
SWITCH_INTERVAL = 0.0005


def tune_interpreter() -> None:
    """Keep the interpreter's own pauses off the scheduling path. gc.freeze() moves what is
    alive at startup (imported modules, the kubernetes client, config) out of the collector's
    sight, so a full collection, which a refresh's tens of thousands of new objects trigger,
    walks the live state only: the longest loop stall during 5000-node refreshes fell from
    57 to 15 ms (benchmarks/refresh_lag.py)."""
    gc.collect()
    gc.freeze()
    sys.setswitchinterval(SWITCH_INTERVAL)


def serve(options: ServeOptions) -> int:
    """Run the extender until SIGTERM (lifecycle.py drains and stops it)."""
    source, kube_access, ports = options.source, options.kube, options.ports
    # the config (the ports answering meanwhile if the API server keeps it waiting: starting.py),
    # then the sources it needs, then the state and actors (App), then the server
    api = kube.api_client(kube_access.kubeconfig) if kube_access.wanted or source.configmap_ref else None
    context, reload_files = tls.serving(options.tls, source.reload_interval) or (None, None)
    addresses: list[starting.Address] = [(*ports.listen, context)]
    if ports.metrics_listen:
        addresses.append((*ports.metrics_listen, None))
    install_event_loop()
    text, where = asyncio.run(
        starting.read_when_answered(
            lambda: initial_text(source, api), kube.worth_waiting, addresses, options.limits.header_timeout
        )
    )
    config = parse_config(text, source=where)
    if api is None and (config.bind_enabled or config.herd_guard.enabled):
        api = kube.api_client(None)  # in-cluster: bind and the pod watch need it
    app = App(
        text,
        where,
        config=config,
        source=source,
        kube=kube_access,
        kube_api=api,
        limits=options.limits,
    )
    web_app = app.web_app(ports.path_prefix)
    host, port = ports.listen
    log.info(
        "loadext %s serving on %s:%d%s (config from %s, hash %s)",
        __version__,
        host,
        port,
        ports.path_prefix,
        where,
        config.hash,
    )
    if reload_files is not None:
        web_app.cleanup_ctx.append(reload_files)
    listeners = [lifecycle.Listener(web_app, host, port, context)]
    if ports.metrics_listen:
        listeners.append(lifecycle.Listener(create_ops_app(app.server), *ports.metrics_listen))
        log.info("metrics and probes also on plain http://%s:%d", *ports.metrics_listen)

    def drain() -> None:
        app.server.draining = True

    tune_interpreter()
    asyncio.run(
        lifecycle.serve(
            listeners,
            options.limits.header_timeout,
            options.shutdown,
            on_drain=drain,
            on_header_timeout=lambda: app.telemetry.verbs.slow_client("header"),
        )
    )
    return 0


def rebalance_once(config: Config, kubeconfig: str | None, dry_run: bool) -> tuple[str, list[Done]]:
    """`loadext rebalance --once`: one refresh, then one cycle on what it shows. With one round
    there is no streak to wait for: a node at or above evictAt now is hot (hotFor 1), and one only
    over its threshold is not (overFor 0: one round cannot say how long it has been there)."""
    api = kube.api_client(kubeconfig)
    if api is None:
        raise kube.KubeError("rebalance needs the Kubernetes API: give --kubeconfig, or run it in a pod")
    now_hot = dataclasses.replace(config.rebalance, enabled=True, hot_for=1, over_for=0)
    cluster = Cluster(dataclasses.replace(config, rebalance=now_hot))
    cluster.nodes_listed([node.info() for node in listwatch.list_nodes(api)])
    telemetry, source = Telemetry(), metrics_source(config.prometheus)
    refresher = Refresher(cluster, source, telemetry.refresh, telemetry.herd)
    rebalancer = Rebalancer(cluster.rebalance, source, api, telemetry.rebalance)
    try:
        asyncio.run(refresher.refresh_once())
        done = asyncio.run(rebalancer.cycle(dry_run=dry_run))
    finally:
        source.close()
    return rebalancer.status, done


def explain_once(config: Config, kubeconfig: str | None, nodes: list[str]) -> dict[str, Any]:
    """`loadext explain` without a running loadext: one refresh, then the same report."""
    cluster = Cluster(config)
    api = kube.api_client(kubeconfig) if kubeconfig else None
    if api is not None:
        cluster.nodes_listed([node.info() for node in listwatch.list_nodes(api)])
    cluster.nodes_named(nodes)
    telemetry, source = Telemetry(), metrics_source(config.prometheus)
    refresher = Refresher(cluster, source, telemetry.refresh, telemetry.herd)
    try:
        asyncio.run(refresher.refresh_once())
    finally:
        source.close()
    return explain(cluster.explained)
