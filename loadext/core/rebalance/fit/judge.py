"""Would kube-scheduler's default profile accept this pod on that node? The filters, in the
scheduler's order, each as its plugin decides (pkg/scheduler/framework/plugins, v1.36):

- the node is Ready and not being deleted (stricter than the scheduler, which leaves NotReady
  nodes to the not-ready taint a controller adds: loadext never moves a pod to one);
- NodeUnschedulable: a cordoned node, unless the pod tolerates node.kubernetes.io/unschedulable;
- TaintToleration: every NoSchedule and NoExecute taint tolerated;
- NodeAffinity: every nodeSelector label, and some required node affinity term;
- NodePorts: no host port (protocol, address) the pod asks for taken there; 0.0.0.0 takes all;
- NodeResourcesFit: one more pod within allocatable "pods"; every resource the pod requests
  within allocatable less the requests of the pods there (resources.py);
- PodTopologySpread, per DoNotSchedule constraint: the node has the topology key, and
  pods matching in its domain + 1 if the pod matches itself - the fewest in any domain <= maxSkew,
  counting the pods (not terminating, the pod's namespace) on the nodes that have every
  constraint's key and pass the node inclusion policies; fewer domains than minDomains make the
  fewest 0;
- InterPodAffinity: each required affinity term finds a pod matching every term in the node's
  domain (or none matches anywhere and the pod matches its own terms: the first of a group);
  no pod matching an anti-affinity term in the node's domain; no pod already placed whose
  anti-affinity term matches this pod and shares a domain with the node.

Volumes, resource claims and whatever else `unverifiable` names are not judged here: a pod
with them does not move.
"""

from __future__ import annotations

from collections import Counter

from loadext.core.rebalance.fit.labels import node_affinity_matches, selector_matches, tolerates, untolerated
from loadext.core.rebalance.fit.model import (
    UNSCHEDULABLE_TAINT_KEY,
    HostPort,
    NodeFacts,
    PlacedPod,
    PodAffinityTerm,
    PodConstraints,
    SpreadConstraint,
    Taint,
)
from loadext.core.rebalance.fit.world import World

ANY_ADDRESS = "0.0.0.0"  # a host port bound to every address
Domain = tuple[str, str]  # (topology key, value)


class Judge:
    """One pod's verdicts on any node of one World. Built per pod: the spread and affinity
    counts are the pod's own and are counted once, over every pod of the World, as the
    scheduler's PreFilter does. `leaving`: the node the pod is on now; the pod itself is left out
    there (its replacement is judged in the cluster it leaves behind)."""

    def __init__(self, pod: PodConstraints, world: World, leaving: str = "") -> None:
        self.pod, self.world, self.leaving = pod, world, leaving
        self._spread = [self._spread_counts(c) for c in pod.spread]
        self._affinity: Counter[Domain] = Counter()
        self._anti_affinity: Counter[Domain] = Counter()
        self._existing_anti: Counter[Domain] = Counter()
        self._count_affinity()

    def refusal(self, name: str) -> str | None:
        """Why the scheduler would refuse the pod on node `name`, or None when it would accept it."""
        node = self.world.nodes.get(name)
        if node is None:
            return "the node is gone"
        for check in (self._node_state, self._taints, self._affinity_to_node, self._ports, self._resources):
            why = check(node)
            if why is not None:
                return why
        return self._topology_spread(node) or self._pod_affinity(node)

    # --- the node alone --------------------------------------------------------------------

    def _node_state(self, node: NodeFacts) -> str | None:
        if node.deleting:
            return "the node is being deleted"
        if not node.ready:
            return "the node is not Ready"
        cordon = Taint(UNSCHEDULABLE_TAINT_KEY, "", "NoSchedule")
        if node.unschedulable and not any(tolerates(t, cordon) for t in self.pod.tolerations):
            return "the node is cordoned (unschedulable)"
        return None

    def _taints(self, node: NodeFacts) -> str | None:
        taint = untolerated(node.taints, self.pod.tolerations)
        if taint is None:
            return None
        value = f"={taint.value}" if taint.value else ""
        return f"untolerated taint {taint.key}{value}:{taint.effect}"

    def _affinity_to_node(self, node: NodeFacts) -> str | None:
        if node_affinity_matches(self.pod.node_selector, self.pod.node_terms, node.name, node.labels):
            return None
        return "the node does not match the pod's nodeSelector or required node affinity"

    def _ports(self, node: NodeFacts) -> str | None:
        used = [port for placed in self.world.pods_on(node.name) for port in placed.pod.host_ports]
        for wanted in self.pod.host_ports:
            if any(_conflict(wanted, taken) for taken in used):
                return f"host port {wanted.protocol}/{wanted.port} is taken"
        return None

    def _resources(self, node: NodeFacts) -> str | None:
        allocatable, requested = node.allocatable, self.world.requested(node.name)
        if len(self.world.pods_on(node.name)) + 1 > allocatable.get("pods", 0):
            return "too many pods"
        for resource, amount in sorted(self.pod.requests.items()):
            free = allocatable.get(resource, 0) - requested.get(resource, 0)
            if amount > 0 and amount > free:
                return f"insufficient {resource}"
        return None

    # --- the node among the others ---------------------------------------------------------

    def _spread_counts(self, constraint: SpreadConstraint) -> Counter[str]:
        """Topology value -> pods matching the constraint, over the eligible nodes (each domain
        present, with 0, once one eligible node has it)."""
        counts: Counter[str] = Counter()
        keys = [c.topology_key for c in self.pod.spread]
        for node in self.world.nodes.values():
            if not all(key in node.labels for key in keys) or not self._included(constraint, node):
                continue
            value = node.labels[constraint.topology_key]
            counts[value] += 0
            if constraint.selector is None or constraint.selector.empty:
                continue  # a nil selector matches nothing; the scheduler counts none for an empty one
            for placed in self._pods_on(node.name):
                pod = placed.pod
                if not placed.terminating and pod.namespace == self.pod.namespace:
                    counts[value] += selector_matches(constraint.selector, pod.labels)
        return counts

    def _included(self, constraint: SpreadConstraint, node: NodeFacts) -> bool:
        pod = self.pod
        if constraint.honor_node_affinity and not node_affinity_matches(
            pod.node_selector, pod.node_terms, node.name, node.labels
        ):
            return False
        return not (constraint.honor_node_taints and untolerated(node.taints, pod.tolerations) is not None)

    def _topology_spread(self, node: NodeFacts) -> str | None:
        for constraint, counts in zip(self.pod.spread, self._spread, strict=True):
            value = node.labels.get(constraint.topology_key)
            if value is None:
                return f"the node has no {constraint.topology_key} label (topology spread)"
            fewest = min(counts.values()) if len(counts) >= constraint.min_domains else 0
            own = int(selector_matches(constraint.selector, self.pod.labels))
            if counts.get(value, 0) + own - fewest > constraint.max_skew:
                return f"topology spread on {constraint.topology_key} would exceed maxSkew {constraint.max_skew}"
        return None

    def _count_affinity(self) -> None:
        pod = self.pod
        for name, node in self.world.nodes.items():
            for placed in self._pods_on(name):
                other = placed.pod
                if pod.affinity and all(self._term_matches(t, other) for t in pod.affinity):
                    self._affinity.update(_domains(pod.affinity, node))
                self._anti_affinity.update(
                    _domains([t for t in pod.anti_affinity if self._term_matches(t, other)], node)
                )
                self._existing_anti.update(
                    _domains([t for t in other.anti_affinity if self._term_matches(t, pod)], node)
                )

    def _pod_affinity(self, node: NodeFacts) -> str | None:
        pod, labels = self.pod, node.labels
        if any(term.topology_key not in labels for term in pod.affinity):
            return "the node lacks a topology key of the pod's required affinity"
        missing = [t for t in pod.affinity if self._affinity[(t.topology_key, labels[t.topology_key])] <= 0]
        first_of_group = not self._affinity and all(self._term_matches(t, pod) for t in pod.affinity)
        if missing and not first_of_group:
            return f"required pod affinity: no matching pod in the node's {missing[0].topology_key}"
        for term in pod.anti_affinity:
            value = labels.get(term.topology_key)
            if value is not None and self._anti_affinity[(term.topology_key, value)] > 0:
                return f"required pod anti-affinity: a matching pod runs in the node's {term.topology_key}"
        for key, value in labels.items():
            if self._existing_anti[(key, value)] > 0:
                return f"a pod in the node's {key}={value} has anti-affinity to this pod"
        return None

    def _term_matches(self, term: PodAffinityTerm, other: PodConstraints) -> bool:
        """AffinityTerm.Matches: `other`'s namespace is among the term's (or its namespace
        labels match the term's namespace selector; an empty selector matches every
        namespace), and its labels match the term's selector."""
        if other.namespace not in term.namespaces:
            selector = term.namespace_selector
            if selector is None:
                return False
            if not selector.empty and not selector_matches(
                selector, self.world.namespace_labels.get(other.namespace, {})
            ):
                return False
        return selector_matches(term.selector, other.labels)

    def _pods_on(self, name: str) -> list[PlacedPod]:
        pods = self.world.pods_on(name)
        if name != self.leaving:
            return pods
        return [p for p in pods if p.pod.uid != self.pod.uid]


def _domains(terms: list[PodAffinityTerm] | tuple[PodAffinityTerm, ...], node: NodeFacts) -> list[Domain]:
    return [(t.topology_key, node.labels[t.topology_key]) for t in terms if t.topology_key in node.labels]


def _conflict(wanted: HostPort, taken: HostPort) -> bool:
    if wanted.port <= 0 or wanted.port != taken.port or wanted.protocol != taken.protocol:
        return False
    return ANY_ADDRESS in (wanted.ip, taken.ip) or wanted.ip == taken.ip
