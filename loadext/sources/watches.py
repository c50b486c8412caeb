"""Kubernetes list/watches that feed loadext: Nodes (addresses, labels, allocatable), bound
Pods (the herd guard's pods in flight), both as Ingest events (core/ingest.py), and the config
ConfigMap (reloads).

Each ListWatch runs in its own thread (the kubernetes client blocks) and decodes the objects
with msgspec (sources/objects.py); every event is handed to the event loop with
call_soon_threadsafe, because the state it changes and the reloader are owned by the loop
thread and not thread-safe.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loadext.core.ingest import Ingest
from loadext.sources import kube
from loadext.sources.objects import ConfigMap, Node, Pod
from loadext.sources.reload import ConfigReloader

log = logging.getLogger(__name__)

Health = Callable[[bool], None]  # told True while the watch is current, False while it retries


@dataclass(frozen=True)
class ConfigMapRef:
    namespace: str
    name: str
    key: str = "config.yaml"


def watch_nodes(api: Any, ingest: Ingest, health: Health) -> kube.ListWatch[Node]:
    loop = asyncio.get_running_loop()

    def on_list(nodes: list[Node]) -> None:
        loop.call_soon_threadsafe(ingest.nodes_listed, [node.info() for node in nodes])

    def on_event(kind: str, node: Node) -> None:
        if kind == "DELETED":
            loop.call_soon_threadsafe(ingest.node_gone, node.metadata.name)
        else:
            loop.call_soon_threadsafe(ingest.node_seen, node.info())

    return kube.ListWatch(api.list_node, Node, kube.whole_lists(on_list), on_event, health).start()


async def supervise_pod_watch(api: Any, ingest: Ingest, health: Health, unwatched: Callable[[], None]) -> None:
    """Watch bound pods while the herd guard is enabled, so a ConfigMap edit can turn it on or
    off without a restart; stop watching (and forget) when it is off, and say so with
    `unwatched` (the health series goes: a stopped watch is neither current nor failing)."""
    watch: kube.ListWatch[Pod] | None = None
    try:
        while True:
            enabled = ingest.config.herd_guard.enabled
            if enabled and watch is None:
                watch = _watch_pods(api, ingest, health)
            elif not enabled and watch is not None:
                watch.stop.set()
                watch = None
                ingest.pods_unwatched()
                unwatched()
            await asyncio.sleep(1.0)
    finally:
        if watch is not None:
            watch.stop.set()


def _watch_pods(api: Any, ingest: Ingest, health: Health) -> kube.ListWatch[Pod]:
    """Bound pods feed the herd guard's in-flight accounting."""
    loop = asyncio.get_running_loop()

    def on_page(pods: list[Pod], first: bool, last: bool) -> None:
        bound = [b for b in (kube.bound_pod(p) for p in pods) if b is not None]
        loop.call_soon_threadsafe(ingest.pods_listed, bound, first, last)
        if last:  # after the loop took the last page in
            loop.call_soon_threadsafe(kube.release_freed_memory)

    def on_event(kind: str, pod: Pod) -> None:
        bound = kube.bound_pod(pod)
        if bound is None:
            return
        if kind == "DELETED":
            loop.call_soon_threadsafe(ingest.pod_gone, bound.uid)
        else:
            loop.call_soon_threadsafe(ingest.pod_bound, bound)

    return kube.ListWatch(
        api.list_pod_for_all_namespaces, Pod, on_page, on_event, health, field_selector="spec.nodeName!="
    ).start()


def watch_configmap(api: Any, ref: ConfigMapRef, reloader: ConfigReloader, health: Health) -> kube.ListWatch[ConfigMap]:
    """Reload from the ConfigMap object; a rejected version is also written as an Event on it."""
    loop = asyncio.get_running_loop()
    source = f"configmap {ref.namespace}/{ref.name}"
    latest: list[ConfigMap] = []

    def offer(configmap: ConfigMap) -> None:
        latest[:] = [configmap]
        text = (configmap.data or {}).get(ref.key)
        if text is None:
            reloader.reject(f"{source} has no key {ref.key!r}")
        else:
            reloader.offer(text, f"{source} key {ref.key}")

    def record_event(message: str) -> None:
        if latest:
            loop.run_in_executor(None, kube.configmap_event, api, latest[0], "InvalidConfig", message)

    def on_list(items: list[ConfigMap]) -> None:
        if items:
            loop.call_soon_threadsafe(offer, items[0])
        else:
            loop.call_soon_threadsafe(reloader.reject, f"{source} not found")

    def on_event(kind: str, configmap: ConfigMap) -> None:
        if kind == "DELETED":
            loop.call_soon_threadsafe(reloader.reject, f"{source} was deleted")
        elif kind in ("ADDED", "MODIFIED"):
            loop.call_soon_threadsafe(offer, configmap)

    reloader.on_rejected = record_event
    return kube.ListWatch(
        api.list_namespaced_config_map,
        ConfigMap,
        kube.whole_lists(on_list),
        on_event,
        health,
        namespace=ref.namespace,
        field_selector=f"metadata.name={ref.name}",
    ).start()
