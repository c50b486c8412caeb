"""loadext's node taints: which nodes carry them, and what the refused taint costs.

- `loadext.io/hot:PreferNoSchedule` (`taints.hot`) on each hot node: the default scheduler's
  pods prefer other nodes.
- `loadext.io/refused:NoSchedule` (`taints.refused`) on each node loadext's filter refuses, so
  that cluster-autoscaler's simulation (which skips extenders) sees those nodes as full.

The refused taint has a cost: it keeps out every pod that does not tolerate it, DaemonSet pods
included. The DaemonSet controller does not even create a daemon pod for a node with an
untolerated NoSchedule taint (pkg/controller/daemon NodeShouldRunDaemonPod), so an agent rolled
out while a node is refused is missing there until the node cools; one already running stays.
`held_back` counts those pods, for /explain and loadext_rebalance_daemon_pods_held_back.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from loadext.config.schema import Rebalance
from loadext.core.rebalance.fit.labels import node_affinity_matches, untolerated
from loadext.core.rebalance.fit.model import NodeFacts, PodConstraints, Taint, Toleration

HOT_TAINT = ("loadext.io/hot", "PreferNoSchedule")  # hot nodes: the default scheduler's pods avoid them
REFUSED_TAINT = ("loadext.io/refused", "NoSchedule")  # refused nodes: cluster-autoscaler sees them full
TAINT_KEYS = frozenset(key for key, _ in (HOT_TAINT, REFUSED_TAINT))
NodeTaints = Mapping[str, frozenset[tuple[str, str]]]  # node -> loadext's taints on it, (key, effect)

# What the DaemonSet controller adds to every daemon pod (AddOrUpdateDaemonPodTolerations), and
# with hostNetwork the network-unavailable one too.
_DAEMON_TOLERATIONS = tuple(
    Toleration(f"node.kubernetes.io/{key}", "Exists", "", effect)
    for key, effect in (
        ("not-ready", "NoExecute"),
        ("unreachable", "NoExecute"),
        ("disk-pressure", "NoSchedule"),
        ("memory-pressure", "NoSchedule"),
        ("pid-pressure", "NoSchedule"),
        ("unschedulable", "NoSchedule"),
    )
)
_HOST_NETWORK_TOLERATION = Toleration("node.kubernetes.io/network-unavailable", "Exists", "", "NoSchedule")


def wanted(hot: Collection[str], refused: Collection[str], policy: Rebalance) -> dict[str, frozenset[tuple[str, str]]]:
    """node -> the taints of loadext's it should carry now (none while the rebalancer is off)."""
    found: dict[str, frozenset[tuple[str, str]]] = {}
    for node in hot if policy.enabled and policy.taint_hot else ():
        found[node] = found.get(node, frozenset()) | {HOT_TAINT}
    for node in refused if policy.enabled and policy.taint_refused else ():
        found[node] = found.get(node, frozenset()) | {REFUSED_TAINT}
    return found


@dataclass(frozen=True)
class DaemonSet:
    namespace: str
    name: str
    template: PodConstraints  # its pod template: node selector, node affinity, tolerations
    node_name: str = ""  # the template's spec.nodeName, rarely set
    host_network: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def held_back(
    daemon_sets: Iterable[DaemonSet], nodes: Iterable[NodeFacts], running: Collection[tuple[str, str]]
) -> dict[str, list[str]]:
    """node -> the DaemonSets (namespace/name) whose pod it lacks only because of loadext's refused
    taint: the DaemonSet would run there (node name, selector, affinity, every other taint
    tolerated as the controller judges them), does not tolerate the refused taint, and has no
    pod bound there (`running`: (DaemonSet key, node) pairs)."""
    found: dict[str, list[str]] = {}
    tainted: list[tuple[NodeFacts, Taint]] = []
    for node in nodes:
        ours = next((t for t in node.taints if (t.key, t.effect) == REFUSED_TAINT), None)
        if ours is not None:
            tainted.append((node, ours))
    for daemon in daemon_sets:
        pod = daemon.template
        tolerations = (*pod.tolerations, *_DAEMON_TOLERATIONS, *((_HOST_NETWORK_TOLERATION,) * daemon.host_network))
        for node, ours in tainted:
            if daemon.node_name and daemon.node_name != node.name:
                continue
            if not node_affinity_matches(pod.node_selector, pod.node_terms, node.name, node.labels):
                continue
            others = [t for t in node.taints if t is not ours]
            if untolerated(others, tolerations) is not None or untolerated([ours], tolerations) is None:
                continue
            if (daemon.key, node.name) not in running:
                found.setdefault(node.name, []).append(daemon.key)
    return found
