"""The herd guard under the real kube-scheduler: a burst spread by the estimates, a burst beyond
them never stranded, and a stranded pod retried as soon as a node cools.
"""

from __future__ import annotations

import time

from harness.cluster import (
    E2E_NAMESPACE,
    Cluster,
    burst,
    e2e_config,
    level_shares,
    make_node,
    make_pod,
    pod_watch_healthy,
    scheduled_node,
    set_load,
    ten_nodes_one_idle,
    unschedulable_message,
    wait_loadext_sees,
)
from harness.exporter import Exporter
from harness.kubernetes import wait_until
from harness.metrics_text import metric_value


def test_herd_guard_spreads_a_burst(cluster: Cluster, exporter: Exporter, slug: str) -> None:
    nodes = [f"{slug}-{i}" for i in range(5)]
    idle = nodes[0]
    for node in nodes:
        make_node(cluster.core, node, slug, cpu="256", memory="1Ti")
    # The idle-looking node at 35 %, the others at 60 %. Each pod is estimated at 8 x 0.85 = 6.8
    # cores (2.7 % of a node), which metrics cannot show for minutes.
    loads = {node: (0.35 if node == idle else 0.6, 0.3) for node in nodes}
    set_load(exporter, loads)
    wait_loadext_sees(cluster, loads)
    without = burst(cluster, slug, "off", 30)
    assert without.get(idle, 0) >= 25, without  # the herd: nearly all of them on the idle-looking node

    guarded = e2e_config(cluster.proxy.url, herdGuard={"enabled": True, "window": "10m"})
    guarded["signals"][1]["weight"] = 0  # score on CPU alone: a score step is then ~4 pods, not ~8
    try:
        cluster.loadext.set_config(guarded)  # the guard starts watching pods: the first burst counts

        def in_flight_on_idle() -> int:
            rows = {r["node"]: r for r in cluster.loadext.get_json("/explain")["nodes"]}
            return int((rows.get(idle, {}).get("inFlight") or {}).get("pods", 0))

        deadline = time.monotonic() + 30
        while in_flight_on_idle() != without[idle]:
            assert time.monotonic() < deadline, "the pod watch never counted the first burst"
            time.sleep(0.2)
        cluster.core.delete_collection_namespaced_pod(E2E_NAMESPACE, label_selector="run=off", grace_period_seconds=0)
        deadline = time.monotonic() + 30
        while in_flight_on_idle():
            assert time.monotonic() < deadline, "the deleted pods are still counted"  # deletion forgets them
            time.sleep(0.2)
        # Scores are whole steps of 10 % CPU here (~3.8 pods), and kube-scheduler picks at random
        # among nodes tied on a step, so a burst that stops inside a step can leave a node a step
        # short by chance: with 30 pods, one run in 18 when simulated (CI met one). 35 pods end
        # where the step from 65 to 75 % ends on every node: 15 pods take the idle node to 74.8 %,
        # 5 take each other to 73.3 %, so only the pod watch's lag is left to move a pod or two.
        with_guard = burst(cluster, slug, "on", 35)
        # The fair share is the one that evens out load: 35 pods of 2.66 % on top of 35 % and 4 x 60 %
        # level all five at about 74 %, i.e. about 14.5 pods on the idle node and 5 on each other.
        fair = level_shares(loads, 35, 8 * 0.85 / 256)
        assert all(abs(with_guard.get(node, 0) - fair[node]) <= 3 for node in nodes), (with_guard, fair)
        deadline = time.monotonic() + 30
        while True:  # every pod of the burst is counted, on the node it went to
            rows = {r["node"]: r["inFlight"] or {} for r in cluster.loadext.get_json("/explain")["nodes"]}
            if {n: rows.get(n, {}).get("pods", 0) for n in nodes if n in with_guard} == with_guard:
                break
            assert time.monotonic() < deadline, (rows, with_guard)
            time.sleep(0.2)
    finally:
        cluster.loadext.set_config(e2e_config(cluster.proxy.url))


def test_a_burst_beyond_the_herd_estimates_is_spread_and_never_stranded(
    cluster: Cluster, exporter: Exporter, slug: str
) -> None:
    """The case of issue #15: 50 pods (500m request, 2-core limit, so estimated at 1.7 cores)
    onto 10 nodes of 16 cores, one idle and nine at 35-50 %, herd window 60 s. The estimates
    fill the room under 80 % after about 34 pods; the rest must still be placed (soft mode),
    spread, and at once, not after the window or the scheduler's 5-minute retry."""
    loads = ten_nodes_one_idle(cluster, exporter, slug)
    nodes = list(loads)
    cluster.loadext.set_config(e2e_config(cluster.proxy.url, herdGuard={"enabled": True, "window": "60s"}))
    try:
        # As in production, where the guard is on from the start: its pod watch is current
        # (it replaces loadext's guess of each pod's node with the scheduler's choice).
        wait_until(lambda: pod_watch_healthy(cluster.loadext.metrics()), "the pod watch", timeout=30)
        placed = burst(cluster, slug, "burst", 50, cpu=("500m", "2"), timeout=30)
        assert sum(placed.values()) == 50, placed
        # Spread as the estimates level the nodes: 50 x 1.7 cores on top of the measured load
        # brings all ten to the same level (about 92 %), the idle node's share being about 8.4.
        fair = level_shares(loads, 50, 1.7 / 16)
        assert all(abs(placed.get(node, 0) - fair[node]) <= 2.5 for node in nodes), (placed, fair)
        waited = []
        for i in range(50):
            pod = cluster.core.read_namespaced_pod(f"{slug}-burst-{i}", E2E_NAMESPACE)
            bound = next(c for c in pod.status.conditions if c.type == "PodScheduled" and c.status == "True")
            waited.append((bound.last_transition_time - pod.metadata.creation_timestamp).total_seconds())
        assert max(waited) <= 30, waited
    finally:
        cluster.loadext.set_config(e2e_config(cluster.proxy.url))


def test_a_stranded_pod_is_retried_as_soon_as_a_node_cools(cluster: Cluster, exporter: Exporter, slug: str) -> None:
    """Every node hot: loadext refuses them all and the scheduler parks the pod. Load falling
    is no cluster event, so without --requeue-stranded it would wait for the scheduler's
    5-minute flush; with it, loadext annotates the node that cooled and the pod goes there."""
    nodes = [f"{slug}-{i}" for i in range(2)]
    for node in nodes:
        make_node(cluster.core, node, slug)
    hot = {node: (0.95, 0.3) for node in nodes}
    set_load(exporter, hot)
    wait_loadext_sees(cluster, hot)
    make_pod(cluster.core, f"{slug}-pod", slug, "loadext-scheduler")
    assert "loadext: cpu above 80%" in unschedulable_message(cluster.core, f"{slug}-pod")
    assert metric_value(cluster.loadext.metrics(), "loadext_stranded_pods") >= 1
    cooled = {nodes[1]: (0.4, 0.3)}
    set_load(exporter, cooled)
    cooled_at = time.monotonic()
    assert scheduled_node(cluster.core, f"{slug}-pod", timeout=30) == nodes[1]
    assert time.monotonic() - cooled_at < 20  # seconds, not the scheduler's minutes
    annotations = cluster.core.read_node(nodes[1]).metadata.annotations or {}
    assert "loadext.io/reopened" in annotations
    assert "loadext.io/reopened" not in (cluster.core.read_node(nodes[0]).metadata.annotations or {})
    assert metric_value(cluster.loadext.metrics(), "loadext_requeue_nudges_total", outcome="ok") >= 1
