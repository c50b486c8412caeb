"""Cluster life with faults, the rebalancer evicting, and invariants checked as it goes.

    python3 benchmarks/soak/cluster.py [--seed 1] [--minutes 60] [--profile long|short] [--out DIR]

The real control plane (etcd, kube-apiserver, kube-scheduler with loadext's shipped profile,
kube-controller-manager's deployment, replicaset, job, disruption, ttl-after-finished, pod
garbage collector and node lifecycle controllers), kwok playing the kubelets and serving their
resource metrics, a real Prometheus scraping them behind a proxy (so that it can be stopped and
restarted on its data while loadext keeps one URL), and loadext as shipped: two replicas behind
one balancer with the shipped flags, the herd guard on, the rebalancer evicting (`mode: evict`)
with hot taints, the config in a ConfigMap both watch, one Lease between them. A second
Prometheus scrapes both replicas' /metrics and answers the shipped alert rules' expressions.

Life and faults follow a schedule drawn from `--seed` (life.py; a failing run replays with the
same seed): Deployments with PodDisruptionBudgets whose pods' usage rises and falls in phases,
rollouts, scaling, short Jobs, nodes added and removed; the Lease holder SIGKILLed (at a time
of the schedule's, and right after it evicted a pod), both replicas restarted together,
Prometheus stopped and restarted on its data or slowed past the query timeout, the API server
stopped with etcd kept, a node's kubelet going NotReady, the hottest node deleted, valid and
invalid ConfigMap edits, `mode` flipped to dryRun and back. Faults run beside life, not
instead of it. What is checked, and how, is invariants.py; what is recorded, observe.py.

`--profile short` is the test suite's version (tests/e2e/test_cluster_soak.py): 12 nodes, each
fault kind once, about five minutes. Prints the table of invariants and the run's figures,
writes results.json and timeline.png into `--out`, and exits 1 on any violation.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes import client

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "placement"))

from invariants import REPLICAS, Fault, Limits, check, settled_after  # noqa: E402
from life import (  # noqa: E402
    COOL,
    FAULTS,
    MANAGED,
    PROFILES,
    WORKLOADS,
    Event,
    Profile,
    add_nodes,
    budget,
    deployment,
    job,
    kubelet_back,
    kubelet_gone,
    schedule,
    spare_names,
)
from observe import LOADEXT_NAMESPACE, Observed, Observer, holder  # noqa: E402
from run import (  # noqa: E402
    CORES,
    KWOK_CONFIG,
    NAMESPACE,
    RATE_WINDOW,
    THRESHOLD,
    USAGE_CPU,
    build_kwok,
    cores_of,
    kubelet_scrape_config,
    list_pods,
    millicores,
)

from harness.balancer import RoundRobin  # noqa: E402
from harness.cluster import shipped_scheduler_config  # noqa: E402
from harness.faultproxy import FaultProxy  # noqa: E402
from harness.kubernetes import ControlPlane, Process, build_components, wait_until  # noqa: E402
from harness.loadext import LOADEXT, ready  # noqa: E402
from harness.prometheus import PrometheusServer, free_port  # noqa: E402

CONFIGMAP = "loadext-config"
EXCLUDED = "critical"  # a namespace the config excludes from moves
REFRESH, MAX_DATA_AGE, QUERY_TIMEOUT = 1.0, 15.0, 2.0
HOT_FOR, CYCLE, MAX_PER_CYCLE, MAX_PER_NODE = 8, 5.0, 3, 1  # hotFor long enough to see a restart skip it
WINDOW = RATE_WINDOW + 5  # the herd window
MIN_POD_AGE = WINDOW  # a replacement is not moved again within the herd window
RELOADED = 5.0  # seconds within which both replicas apply a ConfigMap edit (the watch, then the reload)
REFUSED = (client.ApiException, urllib3.exceptions.HTTPError)  # what a call to a stopped API server raises
INTERRUPT_WITHIN = 120.0  # seconds kill_mid_eviction waits for an eviction to interrupt
CRASH_BACKOFF = (10.0, 300.0)  # the kubelet's restart delay for a container that exited: first, most
LIMITS = Limits(CYCLE, MAX_PER_CYCLE, MAX_PER_NODE, MAX_DATA_AGE, HOT_FOR * REFRESH, WINDOW, THRESHOLD, NAMESPACE,
                RELOADED, RATE_WINDOW)  # fmt: skip


NODE_SIGNAL = "node_cpu_usage_seconds_total"  # the node CPU signal's metric: node_signal_failing fails its queries


def loadext_config(prom_url: str, threshold: float = THRESHOLD, mode: str = "evict") -> dict[str, Any]:
    cpu = f"rate({NODE_SIGNAL}[{RATE_WINDOW}s]) / {CORES}"
    return {
        "prometheus": {"url": prom_url, "timeout": f"{QUERY_TIMEOUT:g}s"},
        "refreshInterval": f"{REFRESH:g}s",
        "maxDataAge": f"{MAX_DATA_AGE:g}s",
        "signals": [
            {"name": "cpu", "query": cpu, "threshold": threshold, "weight": 1},
            {"name": "memory", "query": "node_memory_working_set_bytes / (64 * 2^30)", "threshold": 0.9, "weight": 0},
        ],
        "herdGuard": {"enabled": True, "window": f"{WINDOW}s"},
        "rebalance": {
            "enabled": True,
            "mode": mode,
            "hotFor": HOT_FOR,
            "coolFor": 3,
            "cycle": f"{CYCLE:g}s",
            "minPodAge": f"{MIN_POD_AGE}s",
            "maxPerCycle": MAX_PER_CYCLE,
            "maxPerNodePerCycle": MAX_PER_NODE,
            "excludedNamespaces": ["kube-system", EXCLUDED],
            "taints": {"hot": True},
        },
    }


# --- the replicas -----------------------------------------------------------------------------


@dataclass
class Incarnation:
    replica: str
    started: float
    port: int
    process: Process
    rss: list[tuple[float, float]] = field(default_factory=list)  # (time, MB)
    witness: str = ""  # a pod (namespace/name) it explained: once it no longer does, 256 newer were decided
    log_full: float | None = None  # when it stopped explaining the witness: its decision log full
    killed: bool = False  # by a fault (which starts the next one itself), not exited on its own


class Replicas:
    """The two loadext replicas, each started again after a kill on the same port (the
    balancer's backend), with the flags the shipped Deployment passes. One that exits on its
    own (as `serve` does when it cannot read its ConfigMap at start, the API server down) is
    started again as its kubelet would (restartPolicy Always): after CrashLoopBackOff's delay,
    10 s doubling to 5 minutes, back to 10 s once an incarnation has run 10 minutes."""

    def __init__(self, plane: ControlPlane, ports: dict[str, int]) -> None:
        self.plane, self.ports = plane, ports
        self.lives: list[Incarnation] = []
        self.crashes: list[tuple[float, str]] = []  # (when it exited, which incarnation)
        self._backoff = dict.fromkeys(REPLICAS, CRASH_BACKOFF[0])
        self._stop = threading.Event()
        self._kubelet = threading.Thread(target=self._restart_exited, daemon=True)

    def supervise(self) -> None:
        self._kubelet.start()

    def close(self) -> None:
        self._stop.set()

    def _restart_exited(self) -> None:
        exited: dict[str, float] = {}
        while not self._stop.wait(0.5):
            for life in self.currents():
                if life.killed or life.process.proc.poll() is None:
                    continue
                now = time.time()
                if life.replica not in exited:
                    exited[life.replica] = now
                    self.crashes.append((now, life.process.name))
                    lived = now - life.started
                    backoff = self._backoff[life.replica]
                    self._backoff[life.replica] = (
                        CRASH_BACKOFF[0] if lived >= 600 else min(backoff * 2, CRASH_BACKOFF[1])
                    )
                if now - exited[life.replica] >= self._backoff[life.replica]:
                    del exited[life.replica]
                    self.start(life.replica)

    def start(self, replica: str) -> Incarnation:
        argv = [
            "env", f"HOSTNAME={replica}", f"POD_NAMESPACE={LOADEXT_NAMESPACE}", *LOADEXT, "serve",
            "--configmap", f"{LOADEXT_NAMESPACE}/{CONFIGMAP}", "--kubeconfig", str(self.plane.admin_kubeconfig),
            "--watch-nodes", "--requeue-stranded", "--listen", f"127.0.0.1:{self.ports[replica]}",
            "--shutdown-delay", "0s",
        ]  # fmt: skip
        process = self.plane.spawn(f"{replica}-{len(self.lives) + 1}", argv)
        life = Incarnation(replica, time.time(), self.ports[replica], process)
        self.lives.append(life)
        return life

    def currents(self) -> list[Incarnation]:
        return [next(life for life in reversed(self.lives) if life.replica == r) for r in REPLICAS]

    def kill(self, replica: str) -> None:
        life = next(life for life in reversed(self.lives) if life.replica == replica)
        life.killed = True
        life.process.proc.kill()
        life.process.proc.wait()

    def url(self, replica: str) -> str:
        return f"http://127.0.0.1:{self.ports[replica]}"


class Prometheus:
    """The real Prometheus, stopped and started again on its data; loadext reaches it through a
    proxy that keeps one URL (as a Service would)."""

    def __init__(self, workdir: Path, config: str) -> None:
        self.workdir, self.config = workdir, config
        self.server = self._start()
        self.proxy = FaultProxy(self.server.url)

    def _start(self) -> PrometheusServer:
        return PrometheusServer(str(self.workdir), self.config, data_dir=str(self.workdir / "data"))

    def restart(self) -> None:
        self.server = self._start()
        self.proxy.upstream = self.server.url

    def stop(self) -> None:
        self.server.stop()
        self.proxy.close()


def monitoring_config(ports: dict[str, int]) -> str:
    """The monitoring Prometheus: both replicas' /metrics as job `loadext`, as the chart's
    ServiceMonitor names it (the shipped rules select on it)."""
    targets = [{"targets": [f"127.0.0.1:{port}"], "labels": {"replica": r}} for r, port in ports.items()]
    return yaml.safe_dump(
        {
            "global": {"scrape_interval": "2s", "scrape_timeout": "1s", "evaluation_interval": "2s"},
            "scrape_configs": [{"job_name": "loadext", "static_configs": targets}],
        }
    )


# --- the run ----------------------------------------------------------------------------------


@dataclass
class World:
    """What a fault and life act on, shared by the two threads that carry them out."""

    plane: ControlPlane
    api: Any
    replicas: Replicas
    prom: Prometheus
    seen: Observed
    config: dict[str, Any]
    nodes: list[str]  # the nodes that exist (life adds and removes some)
    threshold: float = THRESHOLD  # the cpu threshold in force
    struck: str = ""  # the node a fault holds NotReady now: life leaves it be
    # fault kind -> the node heated for it and the cores its pods use, held hot until that fault
    # ends: on a slow machine a cool phase, or a rollout taking its pods elsewhere, could land
    # before the rebalancer acts (life's phases leave its pods be, its workloads' rollouts and
    # scalings wait, and pods that start on it are heated after each step)
    held_hot: dict[str, tuple[str, float]] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)

    def held_nodes(self) -> dict[str, float]:
        """Each node held hot now, with the cores its workload pods use."""
        return dict(self.held_hot.values())

    def write_config(self, document: dict[str, Any] | str) -> None:
        core = client.CoreV1Api(self.api)
        text = document if isinstance(document, str) else yaml.safe_dump(document)
        body = {"metadata": {"name": CONFIGMAP}, "data": {"config.yaml": text}}
        try:
            core.replace_namespaced_config_map(CONFIGMAP, LOADEXT_NAMESPACE, body)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
            core.create_namespaced_config_map(LOADEXT_NAMESPACE, body)

    def hottest(self) -> str:
        """The node using most of its cores now, of those Ready."""
        last = self.seen.samples[-1]
        ready_nodes = [n for n in self.nodes if n not in last.not_ready]
        return max(ready_nodes, key=lambda n: last.shares.get(n, 0.0))


def fault(event: Event, world: World) -> None:
    """One fault, carried out now (in a thread of its own, beside life); it ends before this
    returns. Records its window, and the windows where metrics may be stale or the API is down."""
    start, what, seen, replicas = time.time(), "", world.seen, world.replicas
    core = client.CoreV1Api(world.api)
    if event.kind in ("kill_holder", "kill_mid_eviction"):
        if event.kind == "kill_mid_eviction":  # the next eviction, then its maker at once
            known, what = set(seen.evictions), f"no eviction within {INTERRUPT_WITHIN:.0f} s"
            while time.time() < start + INTERRUPT_WITHIN:
                if new := set(seen.evictions) - known:
                    what = f"right after evicting {seen.evictions[next(iter(new))].pod}"
                    break
                time.sleep(0.02)
            start = time.time()  # the fault is the kill; the wait only chose its moment
        victim = holder(world.api) or REPLICAS[0]
        replicas.kill(victim)
        what = f"{victim} {what}".strip()
        time.sleep(event.length)
        replicas.start(victim)
    elif event.kind == "restart_both":
        for replica in REPLICAS:
            replicas.kill(replica)
        for replica in REPLICAS:
            replicas.start(replica)
    elif event.kind == "prometheus_down":
        world.prom.server.stop()
        time.sleep(event.length)
        world.prom.restart()
        seen.stale.append((start, time.time()))
    elif event.kind == "prometheus_slow":
        world.prom.proxy.set("delay", delay=QUERY_TIMEOUT + 1)
        time.sleep(event.length)
        world.prom.proxy.set("pass")
        seen.stale.append((start, time.time()))
    elif event.kind == "node_signal_failing":  # the node CPU query fails; pod usage and the rest answer
        world.prom.proxy.set("status", status=503, body=b'{"status":"error"}', matching=NODE_SIGNAL)
        time.sleep(event.length)
        world.prom.proxy.set("pass")
        seen.stale.append((start, time.time()))
    elif event.kind == "apiserver_down":
        world.plane.stop_apiserver()
        time.sleep(event.length)
        world.plane.start_apiserver()
        seen.api_down.append((start, time.time()))
    elif event.kind == "node_not_ready":
        what = world.struck = random.Random(event.at).choice(sorted(world.nodes))
        kubelet_gone(core, what)
        time.sleep(event.length)
        kubelet_back(core, what)
        world.struck = ""
    elif event.kind == "node_deleted_hot":
        what = world.hottest()
        world.nodes.remove(what)
        core.delete_node(what)
    elif event.kind == "config_valid":
        world.threshold = round(event.value, 2)
        what = f"{world.threshold:.2f}"
        world.write_config(loadext_config(world.prom.proxy.url, threshold=world.threshold))
        time.sleep(event.length)
        world.write_config(world.config)
        time.sleep(RELOADED)  # the room check keeps the lower threshold until both replicas reload
        world.threshold = THRESHOLD
    elif event.kind == "config_invalid":
        world.write_config("signals: [{name: cpu, query: q, threshold: 2}]\n")
        time.sleep(event.length)
        world.write_config(world.config)
    elif event.kind == "dry_run":
        world.write_config(loadext_config(world.prom.proxy.url, mode="dryRun"))
        time.sleep(event.length)
        world.write_config(world.config)
    world.faults.append(Fault(start, time.time(), event.kind, what))
    world.held_hot.pop(event.kind, None)


def on_held_node(world: World, workload: str) -> bool:
    """Whether the workload has pods on a node held hot: its rollouts and scalings wait, for
    its pods would leave the node (loadext places their replacements elsewhere)."""
    held = world.held_nodes()
    return bool(held) and any(
        pod["spec"].get("nodeName") in held and pod["metadata"].get("labels", {}).get("app") == workload
        for pod in list_pods(world.api)
    )


def keep_hot(world: World) -> None:
    """The workload pods on each node held hot use what its heat set (those started since too)."""
    held = world.held_nodes()
    if not held:
        return
    core = client.CoreV1Api(world.api)
    for pod in list_pods(world.api):
        meta, cores = pod["metadata"], held.get(pod["spec"].get("nodeName", ""))
        if cores is None or not meta.get("labels", {}).get("app") or meta.get("deletionTimestamp"):
            continue
        if meta.get("annotations", {}).get(USAGE_CPU) != millicores(cores):
            usage = {"metadata": {"annotations": {USAGE_CPU: millicores(cores)}}}
            gone_is_fine(core.patch_namespaced_pod, meta["name"], NAMESPACE, usage)


def live(event: Event, world: World, jobs: list[int]) -> None:
    """One step of life (while the API server is down it is refused, and counted)."""
    api = world.api
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    if event.kind == "phase":  # the workload's running pods drift (their replacements start anew)
        usage, held = {"metadata": {"annotations": {USAGE_CPU: millicores(event.value)}}}, world.held_nodes()
        for pod in list_pods(api):
            if pod["metadata"].get("labels", {}).get("app") == event.target and pod["spec"].get("nodeName") not in held:
                gone_is_fine(core.patch_namespaced_pod, pod["metadata"]["name"], NAMESPACE, usage)
    elif event.kind == "node_heat":  # the workload pods of the node they would make hottest drift hot
        pods, shares = list_pods(api), world.seen.samples[-1].shares
        on: dict[str, list[dict[str, Any]]] = {}
        for pod in pods:
            node = pod["spec"].get("nodeName", "")
            if node in world.nodes and node != world.struck and pod["metadata"].get("labels", {}).get("app"):
                on.setdefault(node, []).append(pod)

        def heated(node: str) -> float:
            return shares.get(node, 0.0) + sum(event.value - cores_of(p) for p in on[node]) / CORES

        if on:
            world.held_hot[event.target] = (max(on, key=heated), event.value)
    elif event.kind in ("rollout", "scale") and on_held_node(world, event.target):
        world.seen.life_held[event.kind] = world.seen.life_held.get(event.kind, 0) + 1
    elif event.kind == "rollout":
        restarted = {"spec": {"template": {"metadata": {"annotations": {"soak/rollout": str(time.time())}}}}}
        apps.patch_namespaced_deployment(event.target, NAMESPACE, restarted)
    elif event.kind == "scale":
        apps.patch_namespaced_deployment_scale(event.target, NAMESPACE, {"spec": {"replicas": int(event.value)}})
    elif event.kind == "job":
        jobs[0] += 1
        client.BatchV1Api(api).create_namespaced_job(NAMESPACE, job(f"job-{jobs[0]}", event.value))
    elif event.kind == "node_add":
        free = [n for n in spare_names() if n not in world.nodes and not any(f.what == n for f in world.faults)]
        if free:
            world.nodes.extend(add_nodes(core, free[0].removesuffix("-00"), 1))
    elif event.kind == "node_remove" and len(world.nodes) > 3:
        gone = random.Random(event.at).choice(sorted(set(world.nodes) - {world.struck}))
        world.nodes.remove(gone)
        core.delete_node(gone)


def gone_is_fine(call: Any, *args: Any) -> None:
    """A change to an object life may have removed meanwhile (a pod of a rollout, a scaled-down
    replica): 404 is what the cluster would answer a person too."""
    try:
        call(*args)
    except client.ApiException as exc:
        if exc.status != 404:
            raise


def run(seed: int, minutes: float, profile: Profile, workdir: Path, faults: bool = True) -> dict[str, Any]:
    events, seconds = schedule(seed, profile, None if profile.name == "short" else minutes * 60)
    events = [event for event in events if faults or (event.kind not in FAULTS and event.target not in FAULTS)]
    rng = random.Random(seed + 1)
    kwok, stages = build_kwok()
    plane = ControlPlane(workdir, build_components())
    names = [f"soak-{i:02d}" for i in range(profile.nodes)]
    kwok_address = f"127.0.0.1:{free_port()}"
    (workdir / "prometheus").mkdir()
    (workdir / "monitoring").mkdir()
    spares = spare_names() if profile.node_changes else []  # scraped ahead: they come and go
    prom = Prometheus(workdir / "prometheus", kubelet_scrape_config(kwok_address, names + spares))
    ports = {replica: free_port() for replica in REPLICAS}
    monitoring = PrometheusServer(str(workdir / "monitoring"), monitoring_config(ports))
    balancer = RoundRobin([("127.0.0.1", port) for port in ports.values()])
    seen = Observed()
    replicas = Replicas(plane, ports)
    observer: Observer | None = None
    try:
        plane.start()
        api = plane.api()
        core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
        for namespace in (NAMESPACE, LOADEXT_NAMESPACE, EXCLUDED):
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        (workdir / "kwok.yaml").write_text(stages + "\n---\n" + KWOK_CONFIG)
        plane.spawn(
            "kwok",
            [str(kwok), f"--kubeconfig={plane.admin_kubeconfig}", f"--config={workdir / 'kwok.yaml'}",
             f"--manage-nodes-with-annotation-selector={MANAGED[0]}={MANAGED[1]}",
             f"--server-address={kwok_address}", "--node-ip=127.0.0.1", "--cidr=127.8.0.0/16"],
        )  # fmt: skip
        # A NotReady node here is its kubelet saying so (life.kubelet_gone), which the node
        # lifecycle controller acts on at once. A silent kubelet is not part of the soak: the
        # controller takes no heartbeat from kwok (no node Leases), and with a grace period
        # shorter than the run it marked every pod NotReady 10 minutes after its node appeared,
        # leaving each workload's budget with no disruption to allow.
        plane.start_controller_manager(
            "deployment-controller", "replicaset-controller", "job-controller", "disruption-controller",
            "ttl-after-finished-controller", "pod-garbage-collector-controller", "node-lifecycle-controller",
            flags=["--node-monitor-grace-period=24h", "--node-startup-grace-period=24h"],
        )  # fmt: skip
        config = loadext_config(prom.proxy.url)
        world = World(plane, api, replicas, prom, seen, config, [])
        world.write_config(config)
        world.nodes.extend(add_nodes(core, "soak", profile.nodes))
        for replica in REPLICAS:
            replicas.start(replica)
        replicas.supervise()
        for replica in REPLICAS:
            wait_until(lambda r=replica: ready(replicas.url(r)), f"{replica} ready", timeout=120)  # type: ignore[misc]
        shipped = shipped_scheduler_config(plane, "base")
        shipped["extenders"][0]["urlPrefix"] = balancer.url
        plane.start_scheduler("default-scheduler", shipped, plane.admin_kubeconfig)
        for workload in WORKLOADS:
            client.PolicyV1Api(api).create_namespaced_pod_disruption_budget(NAMESPACE, budget(workload))
            apps.create_namespaced_deployment(NAMESPACE, deployment(workload, profile.replicas, rng.uniform(*COOL)))
        apps.create_namespaced_deployment(EXCLUDED, deployment("guarded", 3, 3.0, EXCLUDED))
        observer = Observer(api, replicas, seen, monitoring.url, lambda: world.threshold, lambda: prom.server.url)
        observer.start()
        wait_until(lambda: bool(seen.samples), "the observer's first sample")
        start, jobs, faulting = time.time(), [0], None
        for event in events:
            while time.time() < start + event.at:
                time.sleep(0.2)
            seen.life[event.kind] = seen.life.get(event.kind, 0) + 1
            if event.kind in FAULTS:
                # One fault at a time, each on replicas ready again: a fault that runs late (the
                # kill waiting for an eviction, an API server slow to come back) shifts the rest
                # of the schedule, life too, instead of firing what is overdue back to back.
                begun = time.time()
                if faulting is not None:
                    faulting.join()
                with contextlib.suppress(TimeoutError):
                    wait_until(lambda: all(ready(replicas.url(r)) for r in REPLICAS), "replicas ready", timeout=60)
                start += time.time() - begun
                faulting = threading.Thread(target=fault, args=(event, world), name=event.kind)
                faulting.start()
                continue
            try:
                live(event, world, jobs)
                keep_hot(world)
            except REFUSED:
                seen.life_refused[event.kind] = seen.life_refused.get(event.kind, 0) + 1
        if faulting is not None:
            faulting.join()
        # a fault that waited (for an eviction to interrupt) pushes the settling window later
        last_fault = max((f.end for f in world.faults), default=start)
        while time.time() < max(start + seconds, last_fault + profile.settle):
            time.sleep(1)
        end = time.time()
        observer.stop()
        logs = {life.process.name: life.process.log_path.read_text(errors="replace") for life in replicas.lives}
        results = summary(seed, minutes, profile, world, check(seen, world.faults, replicas.lives, logs, LIMITS, end))
        (workdir / "results.json").write_text(json.dumps(results, indent=2))
        timeline(seen, world.faults, start, workdir / "timeline.png", f"seed {seed}, {profile.name}")
        return results
    finally:
        if observer is not None:
            observer.stop()
        replicas.close()
        balancer.close()
        plane.stop()
        prom.stop()
        monitoring.stop()


def summary(seed: int, minutes: float, profile: Profile, world: World, invariants: dict[str, Any]) -> dict[str, Any]:
    seen = world.seen
    last_fault = max((f.end for f in world.faults), default=0.0)
    settled = settled_after(seen.samples, last_fault, THRESHOLD)
    kinds: dict[str, int] = {}
    for f in world.faults:
        kinds[f.kind] = kinds.get(f.kind, 0) + 1
    return {
        "seed": seed,
        "profile": profile.name,
        "minutes": round((seen.samples[-1].time - seen.samples[0].time) / 60, 1) if seen.samples else minutes,
        "nodes": profile.nodes,
        "invariants": invariants,
        "figures": {
            "pods placed by loadext's scheduler": len(seen.placed),
            "evictions": len(seen.evictions),
            "faults injected": kinds,
            "config reloads (ConfigMap edits)": 2
            * sum(kinds.get(k, 0) for k in ("config_valid", "config_invalid", "dry_run")),
            "life": seen.life,
            "life the API server refused": seen.life_refused,
            "life held back (its workload on a node held hot)": seen.life_held,
            "replica starts": len(world.replicas.lives),
            "replicas that exited on their own (restarted as a kubelet would)": [
                name for _, name in world.replicas.crashes
            ],
            "settled after the last fault (s)": None if settled is None else round(settled - last_fault),
            "node-seconds over the threshold": sum(
                sum(1 for share in s.shares.values() if share > THRESHOLD) for s in seen.samples
            ),
            "hottest node (share of its cores)": round(
                max((max(s.shares.values(), default=0) for s in seen.samples), default=0), 2
            ),
        },
        "incarnations": [incarnation(life) for life in world.replicas.lives],
        "faults": [asdict(f) for f in world.faults],
        "evictions": [asdict(e) | {"by": seen.evicted_by.get(e.uid, "")} for e in seen.evictions.values()],
    }


def incarnation(life: Incarnation) -> dict[str, Any]:
    """One replica process: how long it lived, when its decision log was full, its RSS."""
    end = life.rss[-1][0] if life.rss else life.started
    full = None if life.log_full is None else round((life.log_full - life.started) / 60, 1)
    return {
        "name": life.process.name,
        "minutes lived": round((end - life.started) / 60, 1),
        "decision log full after (min)": full,
        "RSS first, last (MB)": [round(life.rss[0][1], 1), round(life.rss[-1][1], 1)] if life.rss else None,
    }


def timeline(seen: Observed, faults: list[Fault], start: float, path: Path, title: str) -> None:
    """Node CPU (every node thin, the hottest bold), the threshold, each eviction, the faults
    shaded, and the Lease holder underneath."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (top, bottom) = plt.subplots(2, 1, figsize=(14, 6), sharex=True, height_ratios=[5, 1])
    minutes = [(s.time - start) / 60 for s in seen.samples]
    nodes = sorted({n for s in seen.samples for n in s.shares})
    for node in nodes:
        top.plot(minutes, [s.shares.get(node, float("nan")) * 100 for s in seen.samples], lw=0.4, color="0.6")
    top.plot(
        minutes,
        [max(s.shares.values(), default=0) * 100 for s in seen.samples],
        lw=1.2,
        color="C3",
        label="hottest node",
    )
    top.axhline(THRESHOLD * 100, color="k", ls="--", lw=0.8, label="threshold")
    for e in seen.evictions.values():
        top.axvline((e.time - start) / 60, color="C0", lw=0.6, alpha=0.7)
    colors = {}
    for f in faults:
        color = colors.setdefault(f.kind, f"C{len(colors) % 10}")
        for axis in (top, bottom):
            axis.axvspan((f.start - start) / 60, (max(f.end, f.start + 3) - start) / 60, color=color, alpha=0.25)
        top.text((f.start - start) / 60, 102, f.kind.replace("_", " "), rotation=90, fontsize=6, va="bottom")
    top.set_ylabel("node CPU, % of cores")
    top.set_ylim(0, 140)
    top.legend(loc="upper right", fontsize=7)
    top.set_title(f"Cluster life with faults ({title}); blue lines: evictions")
    lease = {"replica-a": 1, "replica-b": 2}
    bottom.step(minutes, [lease.get(s.holder or "", 0) for s in seen.samples], where="post", color="k", lw=1)
    bottom.set_yticks([0, 1, 2], ["none", "a", "b"])
    bottom.set_ylabel("Lease")
    bottom.set_xlabel("minutes")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def table(results: dict[str, Any]) -> str:
    lines = ["| invariant | violations | examples |", "|---|---:|---|"]
    for name, found in results["invariants"].items():
        count = str(found["violations"])
        if found["not judged"]:
            count = (
                f"not judged: {found['not judged']}" if not found["violations"] else f"{count} ({found['not judged']})"
            )
        lines.append(f"| {name} | {count} | {'; '.join(found['examples'] or found.get('measured', []))} |")
    lines += ["", "| figure | value |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in results["figures"].items()]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--minutes", type=float, default=60.0, help="the long profile's length")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="long")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--no-faults",
        action="store_true",
        help="life alone: the replicas live the whole run (RSS past the decision log's warm-up)",
    )
    args = parser.parse_args()
    workdir = args.out or Path(tempfile.mkdtemp(prefix="loadext-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    results = run(args.seed, args.minutes, PROFILES[args.profile], workdir, faults=not args.no_faults)
    print(table(results))
    print(f"\nresults, timeline.png and logs in {workdir}", file=sys.stderr)
    return 1 if any(found["violations"] for found in results["invariants"].values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
