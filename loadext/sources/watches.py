"""Kubernetes list/watches that feed the extender: Nodes (the directory: addresses, labels,
allocatable), bound Pods (the herd guard's in-flight set) and the config ConfigMap (reloads).

Each ListWatch runs in its own thread (the kubernetes client blocks) and decodes the objects
with msgspec (sources/objects.py); every change is handed to the event loop with
call_soon_threadsafe, because the directory, the in-flight set and the reloader are owned by
the loop thread and not thread-safe.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loadext.core.extender import Extender
from loadext.core.herd import allocatable
from loadext.core.nodes import NodeDirectory
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


def ingest_node_list(directory: NodeDirectory, nodes: list[Node]) -> None:
    """A full Node list replaces what the directory knew from the API."""
    directory.replace_all(
        {node.metadata.name: node.ips() for node in nodes},
        {node.metadata.name: node.metadata.labels or {} for node in nodes},
    )
    for node in nodes:
        directory.set_allocatable(node.metadata.name, allocatable(node.allocatable()))


def ingest_node(directory: NodeDirectory, node: Node) -> None:
    directory.upsert(node.metadata.name, node.ips(), node.metadata.labels or {})
    directory.set_allocatable(node.metadata.name, allocatable(node.allocatable()))


def watch_nodes(api: Any, directory: NodeDirectory, health: Health) -> kube.ListWatch[Node]:
    loop = asyncio.get_running_loop()

    def on_list(nodes: list[Node]) -> None:
        loop.call_soon_threadsafe(ingest_node_list, directory, nodes)

    def on_event(kind: str, node: Node) -> None:
        if kind == "DELETED":
            loop.call_soon_threadsafe(directory.delete, node.metadata.name)
        else:
            loop.call_soon_threadsafe(ingest_node, directory, node)

    return kube.ListWatch(api.list_node, Node, on_list, on_event, health).start()


async def supervise_pod_watch(api: Any, extender: Extender, health: Health, unwatched: Callable[[], None]) -> None:
    """Watch bound pods while the herd guard is enabled, so a ConfigMap edit can turn it on or
    off without a restart; stop watching (and forget) when it is off, and say so with
    `unwatched` (the health series goes: a stopped watch is neither current nor failing)."""
    watch: kube.ListWatch[Pod] | None = None
    try:
        while True:
            enabled = extender.config.herd_guard.enabled
            if enabled and watch is None:
                watch = _watch_pods(api, extender, health)
            elif not enabled and watch is not None:
                watch.stop.set()
                watch = None
                extender.inflight.replace_all({}, extender.clock())
                unwatched()
            await asyncio.sleep(1.0)
    finally:
        if watch is not None:
            watch.stop.set()


def _watch_pods(api: Any, extender: Extender, health: Health) -> kube.ListWatch[Pod]:
    """Bound pods feed the herd guard's in-flight accounting."""
    loop = asyncio.get_running_loop()

    def on_list(pods: list[Pod]) -> None:
        bound = [b for b in (kube.bound_pod(p) for p in pods) if b is not None]
        loop.call_soon_threadsafe(extender.replace_bound_pods, bound)

    def on_event(kind: str, pod: Pod) -> None:
        bound = kube.bound_pod(pod)
        if bound is None:
            return
        if kind == "DELETED":
            loop.call_soon_threadsafe(extender.inflight.remove, bound.uid)
        else:
            loop.call_soon_threadsafe(extender.record_bound_pod, bound)

    return kube.ListWatch(
        api.list_pod_for_all_namespaces, Pod, on_list, on_event, health, field_selector="spec.nodeName!="
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
        on_list,
        on_event,
        health,
        namespace=ref.namespace,
        field_selector=f"metadata.name={ref.name}",
    ).start()
