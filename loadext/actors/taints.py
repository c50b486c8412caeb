"""loadext's taints on the Nodes, kept exactly as core/rebalance/taints.py wants them, and the
DaemonSet pods the refused taint holds back (read from the DaemonSets and the cycle's cluster).
The Node writes are blocking calls run in worker threads; the keeper remembers what it set, so
a cycle writes only what changed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

import msgspec
from kubernetes import client

from loadext.actors.evictions import ApiUnavailable
from loadext.actors.placement import ClusterView, constraints
from loadext.actors.wire import Meta, ScheduledPod, Spec
from loadext.core.rebalance.taints import REFUSED_TAINT, TAINT_KEYS, DaemonSet, NodeTaints, held_back
from loadext.shared.objects import Decoded
from loadext.sources.kube import API_ERRORS, API_TIMEOUT, why_failed
from loadext.sources.listwatch import list_all
from loadext.telemetry.rebalance import RebalanceMetrics

log = logging.getLogger(__name__)


class TemplateSpec(Spec):
    hostNetwork: bool = False


class Template(Decoded):
    metadata: Meta = msgspec.field(default_factory=Meta)
    spec: TemplateSpec = msgspec.field(default_factory=TemplateSpec)


class DaemonSetSpec(Decoded):
    template: Template = msgspec.field(default_factory=Template)


class WireDaemonSet(Decoded):
    metadata: Meta = msgspec.field(default_factory=Meta)
    spec: DaemonSetSpec = msgspec.field(default_factory=DaemonSetSpec)


class NodeTaintKeeper:
    def __init__(self, api: Any, metrics: RebalanceMetrics) -> None:
        self.api = api
        self.metrics = metrics
        self._tainted: dict[str, frozenset[tuple[str, str]]] | None = None  # node -> loadext's taints; None: unread
        self.held: dict[str, list[str]] = {}  # node -> DaemonSets whose pod the refused taint keeps off it

    @property
    def refusing(self) -> bool:
        """Some node carries loadext's refused taint: what it holds back is worth counting."""
        return any(REFUSED_TAINT in taints for taints in (self._tainted or {}).values())

    async def sync(self, wanted: NodeTaints, active: bool) -> None:
        """loadext's taints exactly on the nodes that should carry them now. Before the first
        sync of an active rebalancer it reads which nodes carry them already (a restart, or
        another replica's earlier term); one never active has nothing of its own to clear."""
        if self._tainted is None:
            if not active:
                return
            self._tainted = await asyncio.to_thread(_read_taints, self.api)
        current = self._tainted
        for node in sorted(set(current) | set(wanted)):
            target = wanted.get(node, frozenset())
            if current.get(node, frozenset()) == target:
                continue
            error = await asyncio.to_thread(set_taints, self.api, node, target)
            if error:
                log.warning("%s", error)
                self.metrics.taint_errors.inc()
                continue
            if target:
                current[node] = target
            else:
                current.pop(node, None)

    def count_held_back(self, cluster: ClusterView | None) -> None:
        """Blocking: count the DaemonSet pods the refused taint keeps off the nodes (`held`, the
        gauge); None, or no node refused: none. A failed read keeps the last count: it
        is a count for the SRE, never a reason to skip a cycle's moves."""
        if cluster is None or not self.refusing:
            held: dict[str, list[str]] = {}
        else:
            try:
                held = self._held_back(cluster)
            except ApiUnavailable as exc:
                log.warning("daemon pods held back by the refused taint not counted: %s", exc)
                return
        self.held = held
        self.metrics.daemon_pods_held_back.set(sum(map(len, held.values())))

    def _held_back(self, cluster: ClusterView) -> dict[str, list[str]]:
        try:
            listed = list_all(client.AppsV1Api(self.api.api_client).list_daemon_set_for_all_namespaces, WireDaemonSet)
        except API_ERRORS as exc:
            raise ApiUnavailable(f"listing daemonsets failed: {why_failed(exc)}") from None
        running = {
            (pod.workload.replace("/DaemonSet/", "/", 1), node)
            for node, pods in cluster.pods.items()
            for pod in pods
            if pod.controller_kind == "DaemonSet"
        }
        return held_back(map(_daemon_set, listed), cluster.world.nodes.values(), running)


def _daemon_set(wire: WireDaemonSet) -> DaemonSet:
    template = wire.spec.template
    pod = ScheduledPod(metadata=template.metadata, spec=template.spec)
    return DaemonSet(
        wire.metadata.namespace,
        wire.metadata.name,
        constraints(pod, []),
        template.spec.nodeName,
        template.spec.hostNetwork,
    )


def _read_taints(api: Any) -> dict[str, frozenset[tuple[str, str]]]:
    found: dict[str, frozenset[tuple[str, str]]] = {}
    for node in api.list_node(_request_timeout=API_TIMEOUT).items:
        ours = frozenset((t.key, t.effect) for t in node.spec.taints or () if t.key in TAINT_KEYS)
        if ours:
            found[node.metadata.name] = ours
    return found


def set_taints(api: Any, node: str, wanted: Iterable[tuple[str, str]]) -> str:
    """Make loadext's taints on `node` exactly `wanted` (others' taints untouched); "" when done
    or nothing changed, else why not. The node's resourceVersion guards the write, so a
    concurrent change to its taints is never lost: a 409 is retried next cycle."""
    try:
        current = api.read_node(node, _request_timeout=API_TIMEOUT)
    except API_ERRORS as exc:
        return f"reading node {node} failed: {why_failed(exc)}"
    taints = [t.to_dict() for t in current.spec.taints or ()]
    kept = [{k: v for k, v in t.items() if v is not None} for t in taints if t.get("key") not in TAINT_KEYS]
    ours = sorted((t["key"], t["effect"]) for t in taints if t.get("key") in TAINT_KEYS)
    if ours == sorted(wanted):
        return ""
    body = {
        "metadata": {"resourceVersion": current.metadata.resource_version},
        "spec": {"taints": kept + [{"key": key, "effect": effect} for key, effect in sorted(wanted)]},
    }
    try:
        api.patch_node(node, body, _request_timeout=API_TIMEOUT, _content_type="application/merge-patch+json")
    except API_ERRORS as exc:
        return f"tainting node {node} failed: {why_failed(exc)}"
    return ""
