"""Kubernetes list/watches that feed loadext: Nodes (addresses, labels, allocatable), bound
Pods (the herd guard's pods in flight), both as Ingest events (core/ingest.py), and the config
ConfigMap (reloads).

Each ListWatch runs in its own thread (the kubernetes client blocks) and decodes the objects
with msgspec (shared/objects.py); every event is handed to the event loop (Handoff), because
the state it changes and the reloader are owned by the loop thread and not thread-safe.
"""

from __future__ import annotations

import asyncio
import logging
from array import array
from collections import deque
from collections.abc import Callable
from typing import Any

import msgspec

from loadext.config.serving import ConfigMapRef
from loadext.core.ingest import Ingest
from loadext.core.requests import BoundPod
from loadext.shared.objects import ConfigMap, Node, Pod
from loadext.sources import kube
from loadext.sources.listwatch import ListWatch, whole_lists
from loadext.sources.reload import ConfigReloader

log = logging.getLogger(__name__)

Health = Callable[[bool], None]  # told True while the watch is current, False while it retries


class Handoff:
    """Calls from a watch thread, run on the event loop in the order they were made, with one
    wakeup of the loop for as many as queued up meanwhile. A wakeup (call_soon_threadsafe: a
    write to the loop's self-pipe, and the GIL handed over and back) cost the pod watch more
    than decoding the event did, once per bound pod; in a burst the loop now takes a batch."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._calls: deque[tuple[Callable[..., None], tuple[Any, ...]]] = deque()
        self._woken = False

    def __call__(self, call: Callable[..., None], *args: Any) -> None:
        """From the watch thread. The call is queued before the flag is read, and the loop
        clears the flag before it drains the queue: no call is left behind."""
        self._calls.append((call, args))
        if not self._woken:
            self._woken = True
            self._loop.call_soon_threadsafe(self._run)

    def _run(self) -> None:
        self._woken = False
        calls = self._calls
        while calls:
            call, args = calls.popleft()
            try:
                call(*args)
            except Exception:  # as the loop would log a failed callback, and go on with the rest
                log.exception("handling a watch event failed")


class Unchanged:
    """Which pods' latest state loadext already took in, so that an event changing nothing it
    keeps (a kubelet's status updates: conditions, container states, IPs; several per pod) is
    dropped in the watch thread and never handed to the loop.

    A fixed table of fingerprints (1 MiB), not a dict per pod, which at 150 000 pods would hold
    20 MB: two pods sharing a slot only cost an event handed over that need not have been."""

    SLOTS = 1 << 17

    def __init__(self) -> None:
        self._table = array("q", bytes(8 * self.SLOTS))

    def seen(self, bound: BoundPod) -> bool:
        """Whether the pod's last event said just this (drop this one); remembers it if not."""
        slot = hash(bound.uid) & (self.SLOTS - 1)
        fingerprint = hash(msgspec.json.encode(bound))  # the bytes of everything loadext keeps
        if self._table[slot] == fingerprint:
            return True
        self._table[slot] = fingerprint
        return False

    def forget(self, uid: str) -> None:
        self._table[hash(uid) & (self.SLOTS - 1)] = 0

    def clear(self) -> None:
        """A new list: it replaces what the events told, so every pod's next event counts."""
        self._table = array("q", bytes(8 * self.SLOTS))


def watch_nodes(api: Any, ingest: Ingest, health: Health) -> ListWatch[Node]:
    to_loop = Handoff(asyncio.get_running_loop())

    def on_list(nodes: list[Node]) -> None:
        to_loop(ingest.nodes_listed, [node.info() for node in nodes])

    def on_event(kind: str, node: Node) -> None:
        if kind == "DELETED":
            to_loop(ingest.node_gone, node.metadata.name)
        else:
            to_loop(ingest.node_seen, node.info())

    return ListWatch(api.list_node, Node, whole_lists(on_list), on_event, health).start()


async def supervise_pod_watch(api: Any, ingest: Ingest, health: Health, unwatched: Callable[[], None]) -> None:
    """Watch bound pods while the herd guard is enabled, so a ConfigMap edit can turn it on or
    off without a restart; stop watching (and forget) when it is off, and say so with
    `unwatched` (the health series goes: a stopped watch is neither current nor failing)."""
    watch: ListWatch[Pod] | None = None
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


def _watch_pods(api: Any, ingest: Ingest, health: Health) -> ListWatch[Pod]:
    """Bound pods feed the herd guard's in-flight accounting."""
    to_loop, unchanged = Handoff(asyncio.get_running_loop()), Unchanged()

    def on_page(pods: list[Pod], first: bool, last: bool) -> None:
        if first:
            unchanged.clear()
        bound = [b for b in (kube.bound_pod(p) for p in pods) if b is not None]
        to_loop(ingest.pods_listed, bound, first, last)
        if last:  # after the loop took the last page in
            to_loop(kube.release_freed_memory)

    def on_event(kind: str, pod: Pod) -> None:
        bound = kube.bound_pod(pod)
        if bound is None:
            return
        if kind == "DELETED":
            unchanged.forget(bound.uid)
            to_loop(ingest.pod_gone, bound.uid)
        elif not unchanged.seen(bound):
            to_loop(ingest.pod_bound, bound)

    return ListWatch(
        api.list_pod_for_all_namespaces, Pod, on_page, on_event, health, field_selector="spec.nodeName!="
    ).start()


def watch_configmap(api: Any, ref: ConfigMapRef, reloader: ConfigReloader, health: Health) -> ListWatch[ConfigMap]:
    """Reload from the ConfigMap object; a rejected version is also written as an Event on it."""
    loop = asyncio.get_running_loop()
    to_loop = Handoff(loop)
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
            to_loop(offer, items[0])
        else:
            to_loop(reloader.reject, f"{source} not found")

    def on_event(kind: str, configmap: ConfigMap) -> None:
        if kind == "DELETED":
            to_loop(reloader.reject, f"{source} was deleted")
        elif kind in ("ADDED", "MODIFIED"):
            to_loop(offer, configmap)

    reloader.on_rejected = record_event
    return ListWatch(
        api.list_namespaced_config_map,
        ConfigMap,
        whole_lists(on_list),
        on_event,
        health,
        namespace=ref.namespace,
        field_selector=f"metadata.name={ref.name}",
    ).start()
