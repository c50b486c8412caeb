"""The rebalancer on the real control plane, with the real kube-controller-manager (its
ReplicaSet controller recreates evicted pods; its disruption controller computes PDB status; its
DaemonSet controller decides where daemon pods run): pods placed while a node was cool, then the
node runs hot. Dry run plans and evicts nothing (and `loadext rebalance --once` prints the same
plan); of two replicas exactly one acts; a PodDisruptionBudget blocks the eviction; once it
allows one, a pod is evicted with Events on it and on its node, and its replacement lands on a
cool node through loadext's scheduler; the hot taint comes and goes. A move that does not help
(its replacement Pending, or its new node over a threshold) pauses its workload; the refused
taint's cost, the daemon pods it keeps off a node, is counted.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

from harness.cluster import (
    CASE_LABEL,
    E2E_NAMESPACE,
    Cluster,
    FakeKubelet,
    LoadextProcess,
    e2e_config,
    make_node,
    set_load,
    wait_loadext_sees,
)
from harness.exporter import Exporter
from harness.kubernetes import ROOT, Process, wait_until
from harness.loadext import LOADEXT
from harness.metrics_text import metric_if_present
from harness.prometheus import free_port
from loadext.actors.lease import Lease
from loadext.commands.tables import format_explain
from loadext.core.rebalance.followup import OUTCOMES
from loadext.telemetry.rebalance import STATES

POD_CORES = 1.6  # each pod's measured usage: 20 % of an 8-core node


@pytest.fixture(scope="module")
def controllers(cluster: Cluster) -> Iterator[Process]:
    applied = cluster.plane.kubectl("apply", "-f", str(ROOT / "manifests/overlays/rebalance/rebalance-rbac.yaml"))
    assert applied.returncode == 0, applied.stderr
    process = cluster.plane.start_controller_manager("replicaset", "disruption", "daemonset")
    yield process
    process.stop()
    cluster.plane.processes.remove(process)


def rebalancing(cluster: Cluster, **rebalance: Any) -> dict[str, Any]:
    return e2e_config(
        cluster.proxy.url,
        herdGuard={"window": "5s", "podUsage": {"cpu": "loadext_e2e_pod_cpu", "memory": "loadext_e2e_pod_memory"}},
        rebalance={"enabled": True, "hotFor": 2, "coolFor": 2, "cycle": "500ms", "minPodAge": "1s", **rebalance},
    )


def replica_set(slug: str, scheduler: str, replicas: int) -> Any:
    labels = {"app": slug}
    container = client.V1Container(
        name="app",
        image="registry.k8s.io/pause:3.10",
        resources=client.V1ResourceRequirements(requests={"cpu": "1", "memory": "1Gi"}),
    )
    template = client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels=labels),
        spec=client.V1PodSpec(
            scheduler_name=scheduler,
            node_selector={CASE_LABEL: slug},
            termination_grace_period_seconds=0,
            containers=[container],
        ),
    )
    return client.V1ReplicaSet(
        metadata=client.V1ObjectMeta(name=slug, namespace=E2E_NAMESPACE),
        spec=client.V1ReplicaSetSpec(
            replicas=replicas, selector=client.V1LabelSelector(match_labels=labels), template=template
        ),
    )


def pods_of(cluster: Cluster, slug: str) -> dict[str, str]:
    """uid -> node, for the workload's pods that are not being deleted."""
    listed = cluster.core.list_namespaced_pod(E2E_NAMESPACE, label_selector=f"app={slug}").items
    return {p.metadata.uid: p.spec.node_name or "" for p in listed if not p.metadata.deletion_timestamp}


def rebalance_report(loadext: LoadextProcess) -> dict[str, Any]:
    report: dict[str, Any] = loadext.get_json("/explain")["rebalance"]
    return report


def acting(replicas: tuple[LoadextProcess, ...]) -> LoadextProcess:
    """The replica that holds the Lease, once one does."""
    wait_until(lambda: any(state(r) == "active" for r in replicas), "a replica to take the Lease")
    return next(r for r in replicas if state(r) == "active")


def counted(loadext: LoadextProcess, result: str) -> float:
    return metric_if_present(loadext.metrics(), "loadext_rebalance_evictions_total", result=result) or 0.0


def state(loadext: LoadextProcess) -> str:
    metrics = loadext.metrics()
    return next(s for s in STATES if metric_if_present(metrics, "loadext_rebalance_state", state=s) == 1)


def second_replica(cluster: Cluster) -> LoadextProcess:
    """Another loadext serving from the same ConfigMap with the same identity, as a second
    replica of the Deployment would."""
    port = free_port()
    argv = [a if not a.startswith("127.0.0.1:") else f"127.0.0.1:{port}" for a in cluster.loadext.argv]
    process = cluster.plane.spawn("loadext-second", argv)
    replica = LoadextProcess(f"http://127.0.0.1:{port}", process, cluster.core, cluster.plane, argv)
    wait_until(lambda: replica.get_json("/explain") is not None, "the second replica", process=process)
    return replica


def test_a_hot_node_sheds_a_pod_within_its_budget_to_a_cool_node(
    cluster: Cluster, controllers: Process, exporter: Exporter, slug: str, tmp_path: Any
) -> None:
    hot, cool = f"{slug}-hot", [f"{slug}-a", f"{slug}-b"]
    for node in (hot, *cool):
        make_node(cluster.core, node, slug)

    def running(pod: Any) -> None:  # the pods' own usage, as cAdvisor would report it
        exporter.set_gauge("loadext_e2e_pod_cpu", POD_CORES, namespace=E2E_NAMESPACE, pod=pod.metadata.name)
        exporter.set_gauge("loadext_e2e_pod_memory", 2**30, namespace=E2E_NAMESPACE, pod=pod.metadata.name)

    kubelet = FakeKubelet(cluster.core, {hot, *cool}, running)
    apps = client.AppsV1Api(cluster.plane.api())
    policy = client.PolicyV1Api(cluster.plane.api())
    second = second_replica(cluster)
    replicas = (cluster.loadext, second)
    try:
        # Placed while the node was cool (the others busy): both replicas land on it.
        placing = {hot: (0.1, 0.3), cool[0]: (0.9, 0.3), cool[1]: (0.9, 0.3)}
        set_load(exporter, placing)
        wait_loadext_sees(cluster, placing)
        apps.create_namespaced_replica_set(E2E_NAMESPACE, replica_set(slug, "loadext-scheduler-bind", 2))
        wait_until(lambda: list(pods_of(cluster, slug).values()) == [hot, hot], "both replicas on the cool node")
        placed = pods_of(cluster, slug)
        # Then its load drifts up, and the others cool down.
        drifted = {hot: (0.95, 0.3), cool[0]: (0.3, 0.3), cool[1]: (0.4, 0.3)}
        set_load(exporter, drifted)
        wait_loadext_sees(cluster, drifted)

        # Dry run: planned, counted, shown; nothing evicted.
        cluster.loadext.set_config(rebalancing(cluster, mode="dryRun"))
        leader = acting(replicas)
        wait_until(lambda: any(s["result"] == "dry_run" for s in rebalance_report(leader)["last"]), "a dry run")
        step = next(s for s in rebalance_report(leader)["last"] if s["result"] == "dry_run")
        assert step["node"] == hot and step["target"] in cool and step["reason"].startswith("node cpu 95% >= 85% for ")
        assert rebalance_report(leader)["nodes"][hot][0]["hot"] is True
        table = format_explain(leader.get_json("/explain"))
        assert (
            "rebalancer: active, mode dryRun" in table
            and f"  {hot} cpu 95% (threshold 80%, evictAt 85%): hot for " in table
        )
        assert pods_of(cluster, slug) == placed
        planned = once(cluster, tmp_path)  # the SRE's one-shot: the same plan
        mine = [(p["result"], p.get("target") in cool) for p in planned if p["node"] == hot]  # other tests' nodes too
        assert mine == [("dry_run", True)], planned

        # Evicting, but a PodDisruptionBudget allows no disruption: blocked, counted, nothing evicted.
        budget = client.V1PodDisruptionBudget(
            metadata=client.V1ObjectMeta(name=slug, namespace=E2E_NAMESPACE),
            spec=client.V1PodDisruptionBudgetSpec(
                min_available=2, selector=client.V1LabelSelector(match_labels={"app": slug})
            ),
        )
        policy.create_namespaced_pod_disruption_budget(E2E_NAMESPACE, budget)
        wait_until(
            lambda: (
                (policy.read_namespaced_pod_disruption_budget(slug, E2E_NAMESPACE).status.current_healthy or 0) == 2
            ),
            "the disruption controller to count both pods healthy",
        )
        cluster.loadext.set_config(rebalancing(cluster, mode="evict"))
        wait_until(lambda: sum(counted(r, "pdb_blocked") for r in replicas) >= 1, "the PDB to refuse the eviction")
        assert pods_of(cluster, slug) == placed
        assert sorted(state(r) for r in replicas) == ["active", "standby"]  # one replica holds the Lease

        # The budget allows one: one pod is evicted, and its replacement lands on a cool node.
        policy.patch_namespaced_pod_disruption_budget(slug, E2E_NAMESPACE, {"spec": {"minAvailable": 1}})
        wait_until(lambda: sum(counted(r, "evicted") for r in replicas) >= 1, "an eviction", timeout=60)

        def replaced() -> bool:
            now = pods_of(cluster, slug)
            return len(now) == 2 and len(set(now) & set(placed)) == 1 and all(now.values())

        wait_until(replaced, "the ReplicaSet to recreate the pod and loadext's scheduler to place it")
        nodes = sorted(pods_of(cluster, slug).values())
        assert nodes.count(hot) == 1 and len({n for n in nodes if n != hot} & set(cool)) == 1, nodes
        # One eviction in all: one replica acts, and the node then waits out the herd window.
        assert sum(counted(r, "evicted") for r in replicas) == 1
        evicted_uid = next(uid for uid in placed if uid not in pods_of(cluster, slug))
        events = cluster.core.list_namespaced_event(E2E_NAMESPACE).items
        on_pod = [e for e in events if e.involved_object.uid == evicted_uid and e.reason == "LoadextRebalance"]
        assert on_pod and on_pod[0].message.startswith("loadext: node cpu 95% >= 85% for "), on_pod
        assert on_pod[0].message.endswith("; moving it to a node with room")
        on_node = [e for e in cluster.core.list_namespaced_event("default").items if e.involved_object.name == hot]
        assert any(e.reason == "LoadextRebalance" for e in on_node)

        # The taints: hot while hot, refused while the filter refuses it; gone once it cools.
        cluster.loadext.set_config(rebalancing(cluster, mode="dryRun", taints={"hot": True, "refused": True}))
        both = [("loadext.io/hot", "PreferNoSchedule"), ("loadext.io/refused", "NoSchedule")]
        wait_until(lambda: taints(cluster, hot) == both, "the hot taint, and the refused one (95 % > 80 %)")
        assert all(taints(cluster, node) == [] for node in cool)
        set_load(exporter, {hot: (0.5, 0.3)})
        wait_until(lambda: taints(cluster, hot) == [], "the taints to go once the node cools")
    finally:
        second.process.stop()
        cluster.plane.processes.remove(second.process)
        kubelet.stop()
        cluster.loadext.set_config(e2e_config(cluster.proxy.url))
        apps.delete_namespaced_replica_set(slug, E2E_NAMESPACE)
        cluster.core.delete_collection_namespaced_pod(
            E2E_NAMESPACE, label_selector=f"app={slug}", grace_period_seconds=0
        )


def test_a_move_goes_only_where_the_scheduler_would_place_the_replacement(
    cluster: Cluster, controllers: Process, exporter: Exporter, slug: str, tmp_path: Any
) -> None:
    """The cluster a new user tried: two hot nodes, two cool ones, a cooler node tainted NoSchedule
    and a cordoned one; one workload requires zone b, where only its own hot node is open. The plan
    moves the free pod to a cool node and leaves the zoned one, saying why."""
    zone = "topology.kubernetes.io/zone"
    hot_a, hot_b = f"{slug}-hot-a", f"{slug}-hot-b"
    cool, tainted, cordoned = [f"{slug}-cool-1", f"{slug}-cool-2"], f"{slug}-tainted", f"{slug}-cordoned"

    def running(pod: Any) -> None:
        exporter.set_gauge("loadext_e2e_pod_cpu", POD_CORES, namespace=E2E_NAMESPACE, pod=pod.metadata.name)
        exporter.set_gauge("loadext_e2e_pod_memory", 2**30, namespace=E2E_NAMESPACE, pod=pod.metadata.name)

    kubelet = FakeKubelet(cluster.core, {hot_a, hot_b}, running)
    apps = client.AppsV1Api(cluster.plane.api())
    free, zoned = replica_set(f"{slug}-free", "plain-scheduler", 1), replica_set(f"{slug}-zoned", "plain-scheduler", 1)
    for workload in (free, zoned):
        workload.spec.template.spec.node_selector = {CASE_LABEL: slug}
    requirement = client.V1NodeSelectorRequirement(key=zone, operator="In", values=["b"])
    only_b = client.V1NodeSelector(node_selector_terms=[client.V1NodeSelectorTerm(match_expressions=[requirement])])
    zoned.spec.template.spec.affinity = client.V1Affinity(
        node_affinity=client.V1NodeAffinity(required_during_scheduling_ignored_during_execution=only_b)
    )
    try:
        make_node(cluster.core, hot_a, slug, **{zone: "a"})  # alone at first: the free pod lands there
        apps.create_namespaced_replica_set(E2E_NAMESPACE, free)
        wait_until(lambda: list(pods_of(cluster, f"{slug}-free").values()) == [hot_a], "the free pod on hot-a")
        make_node(cluster.core, hot_b, slug, **{zone: "b"})
        apps.create_namespaced_replica_set(E2E_NAMESPACE, zoned)
        wait_until(lambda: list(pods_of(cluster, f"{slug}-zoned").values()) == [hot_b], "the zoned pod on hot-b")
        for node, node_zone in [(cool[0], "a"), (cool[1], "a"), (tainted, "b"), (cordoned, "b")]:
            make_node(cluster.core, node, slug, **{zone: node_zone})
        dedicated = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
        cluster.core.patch_node(tainted, {"spec": {"taints": [dedicated]}})
        cluster.core.patch_node(cordoned, {"spec": {"unschedulable": True}})
        loads = {hot_a: (0.95, 0.3), hot_b: (0.95, 0.3), cool[0]: (0.4, 0.3), cool[1]: (0.35, 0.3)}
        loads |= {tainted: (0.1, 0.3), cordoned: (0.05, 0.3)}  # the coolest two: loadext's filter likes them best
        set_load(exporter, loads)
        wait_loadext_sees(cluster, loads)
        wait_until(lambda: all(p.status.phase == "Running" for p in workload_pods(cluster, slug)), "both running")

        planned = {p["pod"].split("/")[1].rsplit("-", 1)[0]: p for p in once(cluster, tmp_path) if slug in p["pod"]}
        assert planned[f"{slug}-free"]["result"] == "dry_run", planned
        assert planned[f"{slug}-free"]["target"] in cool, planned
        step = planned[f"{slug}-zoned"]
        assert step["result"] == "no_target" and "target" not in step, planned
        assert step["skipped"].startswith("no target: the scheduler would refuse each node loadext passes ("), step
        assert f"the node is cordoned (unschedulable): {cordoned}" in step["skipped"], step
        assert f"untolerated taint dedicated=gpu:NoSchedule: {tainted}" in step["skipped"], step
    finally:
        kubelet.stop()
        for workload in (free, zoned):
            apps.delete_namespaced_replica_set(workload.metadata.name, E2E_NAMESPACE)
        cluster.core.delete_collection_namespaced_pod(
            E2E_NAMESPACE, label_selector=f"app in ({slug}-free,{slug}-zoned)", grace_period_seconds=0
        )


def replaced(cluster: Cluster, slug: str, placed: dict[str, str]) -> dict[str, str]:
    """uid -> node of the workload's pods that were not there at `placed`."""
    return {uid: node for uid, node in pods_of(cluster, slug).items() if uid not in placed}


def outcomes_since(loadext: LoadextProcess) -> Callable[[], dict[str, float]]:
    """loadext_rebalance_replacements_total by outcome, counted from now on (earlier tests'
    moves are counted by the same loadext)."""

    def now() -> dict[str, float]:
        metrics = loadext.metrics()
        return {o: metric_if_present(metrics, "loadext_rebalance_replacements_total", outcome=o) or 0 for o in OUTCOMES}

    before = now()

    def since() -> dict[str, float]:
        return {o: v - before[o] for o, v in now().items() if v > before[o]}

    return since


def told(loadext: LoadextProcess, slug: str) -> list[dict[str, Any]]:
    """/explain's settled replacements of the workload `slug`."""
    replacements = rebalance_report(loadext)["replacements"]
    return [r for r in replacements if r["workload"] == f"{E2E_NAMESPACE}/ReplicaSet/{slug}"]


def two_pods_on_a_node_gone_hot(
    cluster: Cluster, exporter: Exporter, slug: str, cpu: float = 0.95
) -> tuple[str, str, FakeKubelet]:
    """A hot node and a cool one; a two-pod ReplicaSet `slug` placed on the hot one while it was
    cool, both running; then it runs hot (`cpu`). Returns (hot, cool, the kubelet playing both)."""
    hot, cool = f"{slug}-hot", f"{slug}-cool"
    for node in (hot, cool):
        make_node(cluster.core, node, slug)

    def running(pod: Any) -> None:
        exporter.set_gauge("loadext_e2e_pod_cpu", POD_CORES, namespace=E2E_NAMESPACE, pod=pod.metadata.name)
        exporter.set_gauge("loadext_e2e_pod_memory", 2**30, namespace=E2E_NAMESPACE, pod=pod.metadata.name)

    kubelet = FakeKubelet(cluster.core, {hot, cool}, running)
    placing = {hot: (0.1, 0.3), cool: (0.9, 0.3)}
    set_load(exporter, placing)
    wait_loadext_sees(cluster, placing)
    client.AppsV1Api(cluster.plane.api()).create_namespaced_replica_set(
        E2E_NAMESPACE, replica_set(slug, "loadext-scheduler-bind", 2)
    )
    wait_until(lambda: list(pods_of(cluster, slug).values()) == [hot, hot], "both replicas on the cool node")
    wait_until(lambda: all(p.status.phase == "Running" for p in workload(cluster, slug)), "both running")
    drifted = {hot: (cpu, 0.3), cool: (0.3, 0.3)}
    set_load(exporter, drifted)
    wait_loadext_sees(cluster, drifted)
    return hot, cool, kubelet


def workload(cluster: Cluster, slug: str) -> list[Any]:
    return list(cluster.core.list_namespaced_pod(E2E_NAMESPACE, label_selector=f"app={slug}").items)


def cleanup(cluster: Cluster, slug: str, kubelet: FakeKubelet) -> None:
    kubelet.stop()
    cluster.loadext.set_config(e2e_config(cluster.proxy.url))
    client.AppsV1Api(cluster.plane.api()).delete_namespaced_replica_set(slug, E2E_NAMESPACE)
    cluster.core.delete_collection_namespaced_pod(E2E_NAMESPACE, label_selector=f"app={slug}", grace_period_seconds=0)


def test_a_replacement_left_pending_pauses_its_workloads_moves(
    cluster: Cluster, controllers: Process, exporter: Exporter, slug: str
) -> None:
    """The replacement's scheduler is gone (its template now names one that does not run): the
    move cannot help. Past stopRule.pendingFor the rebalancer counts it, pauses the workload with
    an Event on the replacement and says so in /explain; the other pod on the still-hot node then
    stays, for that reason."""
    hot, cool, kubelet = two_pods_on_a_node_gone_hot(cluster, exporter, slug)
    apps = client.AppsV1Api(cluster.plane.api())
    try:
        placed, new_outcomes = pods_of(cluster, slug), outcomes_since(cluster.loadext)
        evicted = counted(cluster.loadext, "evicted")
        gone = {"spec": {"template": {"spec": {"schedulerName": "nobody"}}}}
        apps.patch_namespaced_replica_set(slug, E2E_NAMESPACE, gone)
        workload_key = f"{E2E_NAMESPACE}/ReplicaSet/{slug}"
        stop_rule = {"pendingFor": "3s", "pauseFor": "10m"}
        cluster.loadext.set_config(rebalancing(cluster, mode="evict", stopRule=stop_rule))
        wait_until(lambda: new_outcomes() == {"pending": 1.0}, "the stop rule to see the Pending replacement")
        [(uid, node)] = replaced(cluster, slug, placed).items()
        assert node == ""  # the cluster agrees: not bound
        assert metric_if_present(cluster.loadext.metrics(), "loadext_rebalance_paused_workloads") == 1
        why = rebalance_report(cluster.loadext)["paused"][workload_key]["why"]
        assert why.startswith(f"the replacement of {E2E_NAMESPACE}/{slug}-") and "stayed Pending for " in why, why
        [settled] = told(cluster.loadext, slug)
        assert (settled["outcome"], settled["target"], settled["node"]) == ("pending", cool, ""), settled
        events = [e for e in cluster.core.list_namespaced_event(E2E_NAMESPACE).items if e.involved_object.uid == uid]
        paused = [e for e in events if e.reason == "LoadextRebalancePaused"]
        assert paused and paused[0].type == "Warning", events
        assert paused[0].message.startswith(f"loadext: moves of {workload_key} paused for 600s: the replacement of ")

        # The node stays hot; once its herd window has passed, its other pod is kept, and why.
        def kept() -> bool:
            steps = [s for s in rebalance_report(cluster.loadext)["last"] if s["node"] == hot]
            return any(s["result"] == "no_candidate" and "are paused (stopRule)" in s["skipped"] for s in steps)

        wait_until(kept, "a cycle to keep the paused workload's pod on the hot node", timeout=30)
        assert counted(cluster.loadext, "evicted") == evicted + 1 and len(pods_of(cluster, slug)) == 2
    finally:
        cleanup(cluster, slug, kubelet)


def test_a_replacement_whose_node_goes_over_a_threshold_pauses_its_workload(
    cluster: Cluster, controllers: Process, exporter: Exporter, slug: str
) -> None:
    """The replacement lands where the plan said, and within the herd window that node goes over
    its threshold: the move made another node hot. Counted `hot`, and the workload is paused."""
    _, cool, kubelet = two_pods_on_a_node_gone_hot(cluster, exporter, slug)
    try:
        placed, new_outcomes = pods_of(cluster, slug), outcomes_since(cluster.loadext)
        herd = {"window": "60s", "podUsage": {"cpu": "loadext_e2e_pod_cpu", "memory": "loadext_e2e_pod_memory"}}
        cluster.loadext.set_config({**rebalancing(cluster, mode="evict"), "herdGuard": herd})
        wait_until(lambda: list(replaced(cluster, slug, placed).values()) == [cool], "the replacement on the cool node")
        assert new_outcomes() == {}  # bound, and its window has not passed
        set_load(exporter, {cool: (0.9, 0.3)})
        wait_until(lambda: new_outcomes() == {"hot": 1.0}, "the stop rule to see the replacement's node hot")
        [settled] = told(cluster.loadext, slug)
        assert (settled["outcome"], settled["target"], settled["node"]) == ("hot", cool, cool), settled
        assert settled["detail"].endswith(f"landed on {cool}, which is over a threshold now"), settled
        assert f"{E2E_NAMESPACE}/ReplicaSet/{slug}" in rebalance_report(cluster.loadext)["paused"]
    finally:
        cleanup(cluster, slug, kubelet)


def test_a_node_left_just_over_its_threshold_is_relieved_after_over_for(
    cluster: Cluster, controllers: Process, exporter: Exporter, slug: str, tmp_path: Any
) -> None:
    """The drift leaves the node at 83 %: over its threshold (80 %), so the filter refuses it,
    but under evictAt (85 %). The SRE's one-shot plan, which cannot tell how long it has been
    there, leaves it; the serving rebalancer plans a move once it has been over for overFor."""
    lingering, cool, kubelet = two_pods_on_a_node_gone_hot(cluster, exporter, slug, cpu=0.83)
    try:
        assert [step for step in once(cluster, tmp_path) if step["node"] == lingering] == []
        cluster.loadext.set_config(rebalancing(cluster, mode="dryRun", overFor=3))

        def planned() -> list[dict[str, Any]]:
            last = rebalance_report(cluster.loadext)["last"]
            return [s for s in last if s["node"] == lingering and s["result"] == "dry_run"]

        wait_until(planned, "a planned move off the node left over its threshold")
        [step] = planned()[:1]
        assert step["target"] == cool and step["reason"].startswith("node cpu 83% > 80% (overFor) for "), step
        [signal] = rebalance_report(cluster.loadext)["nodes"][lingering]
        assert (signal["hot"], signal["lingered"]) == (True, True), signal
        table = format_explain(cluster.loadext.get_json("/explain"))
        assert f"  {lingering} cpu 83% (threshold 80%, evictAt 85%): hot for " in table
        assert "s (over its threshold for overFor)" in table
    finally:
        cleanup(cluster, slug, kubelet)


def test_no_pod_moves_off_a_hot_node_whose_kubelet_says_not_ready(
    cluster: Cluster, controllers: Process, exporter: Exporter, slug: str, tmp_path: Any
) -> None:
    """Found by the cluster soak: a hot node whose kubelet reports NotReady is the node lifecycle
    controller's to empty (its taints and tolerationSeconds), and its metrics may be the last
    it sent. The plan keeps its pods and says why."""
    hot, _, kubelet = two_pods_on_a_node_gone_hot(cluster, exporter, slug)
    try:
        moved = [s for s in once(cluster, tmp_path) if s["node"] == hot]
        assert [s["result"] for s in moved] == ["dry_run"], moved  # Ready: a pod would move
        not_ready = {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "e2e: runtime down"}
        cluster.core.patch_node_status(hot, {"status": {"conditions": [not_ready]}})
        [kept] = [s for s in once(cluster, tmp_path) if s["node"] == hot]
        assert (kept["result"], kept["pod"]) == ("no_candidate", ""), kept
        assert "the node is not Ready: the node lifecycle controller decides what leaves it" in kept["skipped"]
    finally:
        cleanup(cluster, slug, kubelet)


def test_the_refused_taint_keeps_daemon_pods_off_a_node_and_says_how_many(
    cluster: Cluster, controllers: Process, exporter: Exporter, slug: str
) -> None:
    """With taints.refused, the DaemonSet controller creates no daemon pod for a refused node (it
    does not tolerate loadext.io/refused): counted and named while it lasts; the pod comes once
    the node cools and the taint goes."""
    hot, cool = f"{slug}-hot", f"{slug}-cool"
    for node in (hot, cool):
        make_node(cluster.core, node, slug)
    apps = client.AppsV1Api(cluster.plane.api())
    labels = {"app": slug}
    agent = client.V1DaemonSet(
        metadata=client.V1ObjectMeta(name=slug, namespace=E2E_NAMESPACE),
        spec=client.V1DaemonSetSpec(
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(
                    scheduler_name="plain-scheduler",
                    node_selector={CASE_LABEL: slug},
                    termination_grace_period_seconds=0,
                    containers=[client.V1Container(name="agent", image="registry.k8s.io/pause:3.10")],
                ),
            ),
        ),
    )

    def desired() -> int | None:
        """The controller's count of nodes that should run the daemon pod, once it has written one
        for this generation (it writes the status after creating the pods, so a count read as soon
        as the pod shows can still be the empty status of a DaemonSet never synced)."""
        daemons = apps.read_namespaced_daemon_set(slug, E2E_NAMESPACE)
        if (daemons.status.observed_generation or 0) < daemons.metadata.generation:
            return None
        return int(daemons.status.desired_number_scheduled or 0)

    def held() -> float | None:
        return metric_if_present(cluster.loadext.metrics(), "loadext_rebalance_daemon_pods_held_back")

    try:
        loads = {hot: (0.95, 0.3), cool: (0.3, 0.3)}
        set_load(exporter, loads)
        wait_loadext_sees(cluster, loads)
        cluster.loadext.set_config(rebalancing(cluster, mode="dryRun", taints={"refused": True}))
        wait_until(lambda: taints(cluster, hot) == [("loadext.io/refused", "NoSchedule")], "the refused taint")
        apps.create_namespaced_daemon_set(E2E_NAMESPACE, agent)
        wait_until(lambda: len(workload(cluster, slug)) == 1, "the DaemonSet controller to create the cool node's pod")
        wait_until(lambda: desired() is not None, "the DaemonSet controller to write its status")
        assert desired() == 1  # the controller's own verdict: not on the refused node
        wait_until(lambda: held() == 1, "loadext to count the daemon pod its taint holds back")
        assert rebalance_report(cluster.loadext)["daemonPodsHeldBack"] == {hot: [f"{E2E_NAMESPACE}/{slug}"]}

        set_load(exporter, {hot: (0.3, 0.3)})
        wait_until(lambda: taints(cluster, hot) == [], "the taint to go once the node cools")
        wait_until(lambda: desired() == 2 and len(workload(cluster, slug)) == 2, "the daemon pod for the node")
        wait_until(lambda: held() == 0, "nothing held back")
        assert rebalance_report(cluster.loadext)["daemonPodsHeldBack"] == {}
    finally:
        cluster.loadext.set_config(e2e_config(cluster.proxy.url))
        apps.delete_namespaced_daemon_set(slug, E2E_NAMESPACE)
        cluster.core.delete_collection_namespaced_pod(
            E2E_NAMESPACE, label_selector=f"app={slug}", grace_period_seconds=0
        )


def workload_pods(cluster: Cluster, slug: str) -> list[Any]:
    selector = f"app in ({slug}-free,{slug}-zoned)"
    return list(cluster.core.list_namespaced_pod(E2E_NAMESPACE, label_selector=selector).items)


def taints(cluster: Cluster, node: str) -> list[tuple[str, str]]:
    found = cluster.core.read_node(node).spec.taints or []
    return [(t.key, t.effect) for t in found if t.key.startswith("loadext.io/")]


def once(cluster: Cluster, tmp_path: Any) -> list[dict[str, Any]]:
    """`loadext rebalance --once --dry-run --output json` with the running loadext's config."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(rebalancing(cluster, mode="evict")))
    result = subprocess.run(
        [*LOADEXT, "rebalance", "--once", "--config", str(path), "--kubeconfig", str(cluster.plane.admin_kubeconfig),
         "--dry-run", "--output", "json"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_one_replica_holds_the_lease_and_one_that_lost_it_knows_at_once(cluster: Cluster, slug: str) -> None:
    """The Lease on the real API server: the holder renews, another replica stands by until it
    expires, and a holder whose Lease was taken away mid-cycle (deleted here, as an SRE might)
    sees it before its next eviction."""
    api = client.CoreV1Api(cluster.plane.api())
    first, second = (Lease(api, "loadext", f"replica-{n}", duration=2.0, name=slug) for n in ("a", "b"))
    assert first.hold() and first.hold()  # taken, then renewed
    assert not second.hold() and first.still_held() and not second.still_held()
    coordination = client.CoordinationV1Api(cluster.plane.api())
    coordination.delete_namespaced_lease(slug, "loadext")
    assert not first.still_held()  # what the rebalancer asks before each eviction
    assert second.hold() and not first.hold()
    wait_until(first.hold, "the Lease to expire and pass to the replica still renewing", timeout=10)
    lease = coordination.read_namespaced_lease(slug, "loadext").spec
    assert lease.holder_identity == first.identity and lease.lease_transitions == 1
