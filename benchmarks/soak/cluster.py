"""Cluster life with faults, the rebalancer evicting, and invariants checked as it goes.

    python3 benchmarks/soak/cluster.py [--seed 1] [--minutes 60] [--nodes 30] [--out DIR]

The real control plane (etcd, kube-apiserver, kube-scheduler with loadext's shipped profile,
kube-controller-manager's deployment, replicaset, job and disruption controllers), kwok playing
the kubelets of `--nodes` nodes and serving their resource metrics, a real Prometheus scraping
them behind a proxy (so that it can be stopped and restarted on its data while loadext keeps
one URL), and loadext as shipped: two replicas behind one balancer, the herd guard on, the
rebalancer evicting (`mode: evict`) with hot taints, the config in a ConfigMap both watch, one
Lease between them.

Life, on a schedule drawn from `--seed` (a failing run replays with the same seed): Deployments
with PodDisruptionBudgets whose pods' usage rises and falls in phases (kwok reads each pod's
usage annotation), rollouts, scaling, and a stream of short Jobs. Faults, on the same schedule:
the Lease holder killed (SIGKILL) and restarted; both replicas restarted together into a hot
cluster; Prometheus stopped and restarted on its data; answers slowed past the query timeout;
valid and invalid ConfigMap edits (a threshold, `mode` to dryRun and back).

Checked from the API server (each eviction is a pod with the DisruptionTarget condition the
Eviction API sets, and the Event loadext writes names the replica that made it), from both
replicas' /metrics and /readyz, and from their logs:

- one replica evicting in any cycle, and evictions per cycle and per node within the limits;
- no eviction while the metrics are stale (Prometheus down or too slow past maxDataAge), nor
  within hotFor refreshes of a replica's start;
- no eviction against a PodDisruptionBudget that allowed none, of a pod younger than the herd
  window (a replacement moved again), or of a pod loadext must leave alone;
- /readyz back within 30 s of each fault's end; no traceback in either replica's log; RSS
  after warm-up growing by less than 1 MB per 10 minutes per replica incarnation;
- after the last fault, every node within its threshold within 5 minutes.

Prints the table of invariants with their violations and the run's figures, and writes
results.json into `--out`.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, watch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "placement"))

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
    make_nodes,
    millicores,
)

from harness.balancer import RoundRobin  # noqa: E402
from harness.cluster import shipped_scheduler_config  # noqa: E402
from harness.faultproxy import FaultProxy  # noqa: E402
from harness.kubernetes import ControlPlane, Process, build_components, wait_until  # noqa: E402
from harness.loadext import LOADEXT, ready  # noqa: E402
from harness.prometheus import PrometheusServer, free_port  # noqa: E402

LOADEXT_NAMESPACE = "loadext"
CONFIGMAP = "loadext-config"
EXCLUDED = "critical"  # a namespace the config excludes from moves
REFRESH, MAX_DATA_AGE, QUERY_TIMEOUT = 1.0, 15.0, 2.0
HOT_FOR, CYCLE, MAX_PER_CYCLE, MAX_PER_NODE = 8, 5.0, 3, 1  # hotFor long enough to see a restart skip it
WINDOW = RATE_WINDOW + 5  # the herd window
MIN_POD_AGE = WINDOW  # a replacement is not moved again within the herd window
RELOADED = 5.0  # seconds within which both replicas apply a ConfigMap edit (the watch, then the reload)
WORKLOADS = ("web", "api", "cart", "search", "feed", "mail")
COOL, HOT = (0.3, 0.8), (3.5, 5.0)  # cores a pod uses in a cool and in a hot phase
REPLICAS = ("replica-a", "replica-b")
SCHEDULER = "loadext-scheduler"  # the shipped profile's name: pods opt in with spec.schedulerName


def loadext_config(prom_url: str, threshold: float = THRESHOLD, mode: str = "evict") -> dict[str, Any]:
    cpu = f"rate(node_cpu_usage_seconds_total[{RATE_WINDOW}s]) / {CORES}"
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


# --- the schedule -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    at: float  # seconds from the start of life
    kind: str
    target: str = ""
    value: float = 0.0
    length: float = 0.0  # a fault's duration


FAULTS = ("kill_holder", "restart_both", "prometheus_down", "prometheus_slow", "config_valid", "config_invalid",
          "dry_run")  # fmt: skip


def schedule(seed: int, seconds: float) -> list[Event]:
    """Life every few seconds, a fault every few minutes (every kind at least once when the run
    is long enough), the last fault ending 6 minutes before the end: the settling window."""
    rng = random.Random(seed)
    events: list[Event] = []
    t = 60.0
    while t < seconds - 30:
        workload = rng.choice(WORKLOADS)
        roll = rng.random()
        if roll < 0.45:
            events.append(Event(t, "phase", workload, rng.uniform(*(HOT if rng.random() < 0.5 else COOL))))
        elif roll < 0.6:
            events.append(Event(t, "rollout", workload))
        elif roll < 0.75:
            events.append(Event(t, "scale", workload, rng.randint(3, 7)))
        else:
            events.append(Event(t, "job", workload, rng.uniform(0.2, 1.0)))
        t += rng.uniform(4, 12)
    faults = list(FAULTS)
    rng.shuffle(faults)
    t, last = 150.0, seconds - 360
    kinds = iter(faults)
    while t < last:
        kind = next(kinds, None) or rng.choice(FAULTS)
        length = {"prometheus_down": rng.uniform(60, 180), "prometheus_slow": rng.uniform(30, 60)}.get(kind, 0.0)
        if kind in ("config_valid", "dry_run"):
            length = rng.uniform(30, 90)
        if t + length >= last:
            break
        events.append(Event(t, kind, length=length, value=rng.uniform(0.7, 0.78)))
        t += length + rng.uniform(90, 180)
    return sorted(events, key=lambda e: e.at)


# --- the workloads ----------------------------------------------------------------------------


def deployment(name: str, replicas: int, cores: float, namespace: str = NAMESPACE) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": labels, "annotations": {USAGE_CPU: millicores(cores)}},
                "spec": {
                    "schedulerName": SCHEDULER,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "app",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"cpu": "4"}},
                        }
                    ],
                },
            },
        },
    }


def budget(name: str, namespace: str = NAMESPACE) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": name}}},
    }


def job(name: str, cores: float) -> dict[str, Any]:
    """A short Job: placed like any pod (its usage `cores` counted by the herd guard until it
    ends), completed by kwok's pod-complete stage as soon as it runs."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "ttlSecondsAfterFinished": 30,
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {USAGE_CPU: millicores(cores)}},
                "spec": {
                    "schedulerName": SCHEDULER,
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "run",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}},
                        }
                    ],
                },
            },
        },
    }


# --- the replicas -----------------------------------------------------------------------------


@dataclass
class Incarnation:
    replica: str
    started: float
    port: int
    process: Process
    ready_at: float | None = None
    rss: list[tuple[float, float]] = field(default_factory=list)  # (time, MB)


class Replicas:
    """The two loadext replicas, each started again after a kill on a port of its own."""

    def __init__(self, plane: ControlPlane, balancer_ports: dict[str, int]) -> None:
        self.plane = plane
        self.ports = balancer_ports  # the port each replica always listens on (the balancer's backends)
        self.lives: list[Incarnation] = []
        self._count = 0

    def start(self, replica: str) -> Incarnation:
        self._count += 1
        argv = [
            "env", f"HOSTNAME={replica}", f"POD_NAMESPACE={LOADEXT_NAMESPACE}", *LOADEXT, "serve",
            "--configmap", f"{LOADEXT_NAMESPACE}/{CONFIGMAP}", "--kubeconfig", str(self.plane.admin_kubeconfig),
            "--watch-nodes", "--listen", f"127.0.0.1:{self.ports[replica]}", "--shutdown-delay", "0s",
        ]  # fmt: skip
        process = self.plane.spawn(f"{replica}-{self._count}", argv)
        life = Incarnation(replica, time.time(), self.ports[replica], process)
        self.lives.append(life)
        return life

    def current(self, replica: str) -> Incarnation:
        return next(life for life in reversed(self.lives) if life.replica == replica)

    def kill(self, replica: str) -> None:
        life = self.current(replica)
        life.process.proc.kill()
        life.process.proc.wait()

    def url(self, replica: str) -> str:
        return f"http://127.0.0.1:{self.ports[replica]}"


def holder(api: Any) -> str | None:
    """The replica named in the rebalancer's Lease (its HOSTNAME is the identity's prefix)."""
    try:
        lease = client.CoordinationV1Api(api).read_namespaced_lease("loadext-rebalancer", LOADEXT_NAMESPACE)
    except client.ApiException:
        return None
    identity = lease.spec.holder_identity or ""
    return next((r for r in REPLICAS if identity.startswith(r + "_")), None)


# --- what is observed -------------------------------------------------------------------------


@dataclass(frozen=True)
class Eviction:
    time: float  # the DisruptionTarget condition's transition, as the API server set it
    pod: str
    namespace: str
    node: str
    workload: str
    created: float
    uid: str


@dataclass
class Observed:
    evictions: dict[str, Eviction] = field(default_factory=dict)  # uid -> the eviction
    evicted_by: dict[str, str] = field(default_factory=dict)  # uid -> the replica its Event names
    budgets: list[tuple[float, dict[str, tuple[int, int]]]] = field(
        default_factory=list
    )  # (time, name -> healthy, desired)
    nodes: list[tuple[float, dict[str, float]]] = field(default_factory=list)  # (time, node -> CPU share)
    readyz: list[tuple[float, str, bool]] = field(default_factory=list)
    faults: list[tuple[float, float, str]] = field(default_factory=list)  # (start, end, kind)
    stale: list[tuple[float, float]] = field(default_factory=list)  # windows where the metrics may be stale
    life: dict[str, int] = field(default_factory=dict)  # what the schedule did, by kind


def gone_is_fine(call: Any, *args: Any) -> None:
    """A change to an object life may have removed meanwhile (a pod of a rollout, a scaled-down
    replica): 404 is what the cluster would answer a person too."""
    try:
        call(*args)
    except client.ApiException as exc:
        if exc.status != 404:
            raise


def resident_mb(pid: int) -> float | None:
    """VmRSS of a live process, in MB (`env` execs loadext: the spawned pid is loadext's)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


class Observer:
    """Samples the API server and both replicas every second, in a thread of its own."""

    def __init__(self, api: Any, replicas: Replicas, seen: Observed) -> None:
        self.api, self.replicas, self.seen = api, replicas, seen
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, daemon=True),
            threading.Thread(target=self._watch, daemon=True),
        ]
        self._last_rss = 0.0

    def start(self) -> Observer:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(40)

    def _watch(self) -> None:
        """Every pod the Eviction API evicts: it sets the DisruptionTarget condition before the
        pod goes, and a watch sees that change (a pod deleted within a second would slip
        between two lists)."""
        core = client.CoreV1Api(self.api)
        while not self._stop.is_set():
            try:
                for event in watch.Watch().stream(core.list_pod_for_all_namespaces, timeout_seconds=20):
                    self._note(event["object"])
                    if self._stop.is_set():
                        return
            except Exception:  # the API server down: watch again once it is back
                self._stop.wait(1.0)

    def _note(self, pod: Any) -> None:
        meta, status = pod.metadata, pod.status
        for condition in (status.conditions if status else None) or ():
            evicted = condition.type == "DisruptionTarget" and condition.reason == "EvictionByEvictionAPI"
            if evicted and meta.uid not in self.seen.evictions:
                self.seen.evictions[meta.uid] = Eviction(
                    condition.last_transition_time.timestamp(), meta.name, meta.namespace,
                    pod.spec.node_name or "", (meta.labels or {}).get("app", ""),
                    meta.creation_timestamp.timestamp(), meta.uid,
                )  # fmt: skip

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self.sample()
            except Exception as exc:  # the API server down: the sample waits for it
                print(f"observer: {type(exc).__name__}: {exc}"[:200], file=sys.stderr)

    def sample(self) -> None:
        now = time.time()
        for replica in REPLICAS:
            self.seen.readyz.append((now, replica, ready(self.replicas.url(replica))))
        if now - self._last_rss >= 10:
            self._last_rss = now
            for replica in REPLICAS:
                life = self.replicas.current(replica)
                rss = resident_mb(life.process.proc.pid)
                if rss is not None:
                    life.rss.append((now, rss))
        reply = client.CoreV1Api(self.api).list_pod_for_all_namespaces(_preload_content=False)
        used: dict[str, float] = {}
        for pod in json.loads(reply.data)["items"]:
            node = pod["spec"].get("nodeName", "")
            if (
                node
                and pod.get("status", {}).get("phase") == "Running"
                and USAGE_CPU in pod["metadata"].get("annotations", {})
            ):
                used[node] = used.get(node, 0.0) + cores_of(pod)
        self.seen.nodes.append((now, {node: cores / CORES for node, cores in used.items()}))
        pdbs = client.PolicyV1Api(self.api).list_namespaced_pod_disruption_budget(NAMESPACE)
        health = {p.metadata.name: (p.status.current_healthy, p.status.desired_healthy) for p in pdbs.items if p.status}
        self.seen.budgets.append((now, health))
        events = client.CoreV1Api(self.api).list_event_for_all_namespaces(field_selector="reason=LoadextRebalance")
        for event in events.items:
            involved = event.involved_object
            if involved.kind == "Pod" and involved.uid:
                self.seen.evicted_by.setdefault(involved.uid, event.reporting_instance or "")


# --- the invariants ---------------------------------------------------------------------------


def check(seen: Observed, replicas: Replicas, logs: dict[str, str], settled: float | None) -> dict[str, Any]:
    """Each invariant with its violations (examples kept, at most five each)."""
    out: dict[str, list[str]] = {}

    def violation(name: str, what: str) -> None:
        out.setdefault(name, []).append(what)

    evictions = sorted(seen.evictions.values(), key=lambda e: e.time)
    for e in evictions:  # one replica in any cycle; the limits per cycle and per node
        window = [o for o in evictions if e.time <= o.time < e.time + CYCLE]
        makers = {seen.evicted_by.get(o.uid, "?") for o in window}
        if len(makers - {"?"}) > 1:
            violation("one replica evicting per cycle", f"{e.time:.0f}: {sorted(makers)}")
        if len(window) > MAX_PER_CYCLE:
            violation("evictions per cycle within maxPerCycle", f"{e.time:.0f}: {len(window)}")
        on_node = [o for o in window if o.node == e.node]
        if len(on_node) > MAX_PER_NODE:
            violation("evictions per node per cycle within the limit", f"{e.time:.0f} {e.node}: {len(on_node)}")
        for start, stop in seen.stale:
            if start + MAX_DATA_AGE <= e.time <= stop:
                violation("no eviction on stale metrics", f"{e.pod} at {e.time:.0f} (stale {start:.0f}-{stop:.0f})")
        for start, stop, kind in seen.faults:
            if kind == "dry_run" and start + RELOADED <= e.time <= stop:
                violation("no eviction in dryRun mode", f"{e.pod} at {e.time:.0f}")
        maker = seen.evicted_by.get(e.uid)
        lives = [life for life in replicas.lives if life.replica == maker and life.started <= e.time]
        if lives and e.time - lives[-1].started < HOT_FOR * REFRESH:
            violation("no eviction within hotFor refreshes of a start", f"{e.pod} by {maker}")
        after = next((health for t, health in seen.budgets if t >= e.time), {})
        healthy, desired = after.get(e.workload, (0, 0))
        if healthy < desired:  # the eviction took the workload below its budget
            violation("no eviction past a disruption budget", f"{e.pod} at {e.time:.0f}: {healthy} < {desired}")
        if e.time - e.created < WINDOW:
            violation("no replacement evicted within the herd window", f"{e.pod} {e.time - e.created:.0f}s old")
        if e.namespace != NAMESPACE or not e.workload:
            violation("no eviction of a pod loadext must leave", f"{e.namespace}/{e.pod}")
    for _, stop, kind in seen.faults:  # readiness comes back
        for replica in REPLICAS:
            back = [t for t, r, ok in seen.readyz if r == replica and ok and t >= stop]
            if not back or back[0] - stop > 30:
                violation("/readyz back within 30 s of a fault's end", f"{replica} after {kind} at {stop:.0f}")
    for replica, text in logs.items():
        if "Traceback" in text:
            violation("no traceback in a replica's log", replica)
    for life in replicas.lives:  # RSS after warm-up: under 1 MB per 10 minutes
        points = [(t, mb) for t, mb in life.rss if t - life.started > 300]
        if len(points) >= 10 and points[-1][0] - points[0][0] >= 600:
            slope = statistics.linear_regression([t for t, _ in points], [mb for _, mb in points]).slope * 600
            if slope >= 1.0:
                violation("RSS flat after warm-up", f"{life.process.name}: {slope:+.2f} MB per 10 min")
    if settled is None:
        violation("every node within its threshold within 5 minutes of the last fault", "not by the end")
    names = [
        "one replica evicting per cycle", "evictions per cycle within maxPerCycle",
        "evictions per node per cycle within the limit", "no eviction on stale metrics",
        "no eviction in dryRun mode", "no eviction within hotFor refreshes of a start",
        "no eviction past a disruption budget",
        "no replacement evicted within the herd window", "no eviction of a pod loadext must leave",
        "/readyz back within 30 s of a fault's end", "no traceback in a replica's log", "RSS flat after warm-up",
        "every node within its threshold within 5 minutes of the last fault",
    ]  # fmt: skip
    return {name: {"violations": len(out.get(name, [])), "examples": out.get(name, [])[:5]} for name in names}


# --- the run ----------------------------------------------------------------------------------


def run(seed: int, minutes: float, nodes: int, workdir: Path) -> dict[str, Any]:
    seconds = minutes * 60
    events = schedule(seed, seconds)
    rng = random.Random(seed + 1)
    kwok, stages = build_kwok()
    plane = ControlPlane(workdir, build_components())
    names = [f"soak-{i:02d}" for i in range(nodes)]
    kwok_address = f"127.0.0.1:{free_port()}"
    prom_dir = workdir / "prometheus"
    prom_dir.mkdir()
    prom = Prometheus(prom_dir, kubelet_scrape_config(kwok_address, names))
    ports = {replica: free_port() for replica in REPLICAS}
    balancer = RoundRobin([("127.0.0.1", port) for port in ports.values()])
    seen = Observed()
    replicas = Replicas(plane, ports)
    observer: Observer | None = None
    try:
        plane.start()
        api = plane.api()
        core, apps, batch = client.CoreV1Api(api), client.AppsV1Api(api), client.BatchV1Api(api)
        for namespace in (NAMESPACE, LOADEXT_NAMESPACE, EXCLUDED):
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        (workdir / "kwok.yaml").write_text(stages + "\n---\n" + KWOK_CONFIG)
        plane.spawn(
            "kwok",
            [str(kwok), f"--kubeconfig={plane.admin_kubeconfig}", f"--config={workdir / 'kwok.yaml'}",
             "--manage-all-nodes=true", f"--server-address={kwok_address}", "--node-ip=127.0.0.1",
             "--cidr=127.8.0.0/16"],
        )  # fmt: skip
        plane.start_controller_manager("deployment", "replicaset", "job", "disruption", "ttl-after-finished")
        config = loadext_config(prom.proxy.url)

        def write_config(document: dict[str, Any] | str) -> None:
            text = document if isinstance(document, str) else yaml.safe_dump(document)
            body = {"metadata": {"name": CONFIGMAP}, "data": {"config.yaml": text}}
            try:
                core.replace_namespaced_config_map(CONFIGMAP, LOADEXT_NAMESPACE, body)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
                core.create_namespaced_config_map(LOADEXT_NAMESPACE, body)

        write_config(config)
        make_nodes(core, "soak", nodes)
        for replica in REPLICAS:
            replicas.start(replica)
        for replica in REPLICAS:
            wait_until(lambda r=replica: ready(replicas.url(r)), f"{replica} ready", timeout=120)  # type: ignore[misc]
        shipped = shipped_scheduler_config(plane, "base")
        shipped["extenders"][0]["urlPrefix"] = balancer.url
        plane.start_scheduler("default-scheduler", shipped, plane.admin_kubeconfig)
        for workload in WORKLOADS:
            client.PolicyV1Api(api).create_namespaced_pod_disruption_budget(NAMESPACE, budget(workload))
            apps.create_namespaced_deployment(NAMESPACE, deployment(workload, 5, rng.uniform(*COOL)))
        apps.create_namespaced_deployment(EXCLUDED, deployment("guarded", 3, 3.0, EXCLUDED))
        observer = Observer(api, replicas, seen).start()
        start = time.time()
        jobs = 0
        for event in events:
            while time.time() < start + event.at:
                time.sleep(0.2)
            seen.life[event.kind] = seen.life.get(event.kind, 0) + 1
            now = time.time()
            if event.kind == "phase":  # the workload's running pods drift (their replacements start anew)
                usage = {"metadata": {"annotations": {USAGE_CPU: millicores(event.value)}}}
                for pod in list_pods(api):
                    if pod["metadata"].get("labels", {}).get("app") == event.target:
                        gone_is_fine(core.patch_namespaced_pod, pod["metadata"]["name"], NAMESPACE, usage)
            elif event.kind == "rollout":
                restarted = {"spec": {"template": {"metadata": {"annotations": {"soak/rollout": str(now)}}}}}
                apps.patch_namespaced_deployment(event.target, NAMESPACE, restarted)
            elif event.kind == "scale":
                apps.patch_namespaced_deployment_scale(
                    event.target, NAMESPACE, {"spec": {"replicas": int(event.value)}}
                )
            elif event.kind == "job":
                jobs += 1
                batch.create_namespaced_job(NAMESPACE, job(f"job-{jobs}", event.value))
            else:
                fault(event, replicas, prom, write_config, config, api, seen)
        while time.time() < start + seconds:
            time.sleep(1)
        observer.stop()
        last_fault = max((stop for _, stop, _ in seen.faults), default=start)
        settled = next(
            (t for t, shares in seen.nodes if t > last_fault and max(shares.values(), default=0.0) <= THRESHOLD), None
        )
        if settled is not None and settled - last_fault > 300:
            settled = None
        logs = {life.process.name: life.process.log_path.read_text(errors="replace") for life in replicas.lives}
        results = {
            "seed": seed,
            "minutes": minutes,
            "nodes": nodes,
            "invariants": check(seen, replicas, logs, settled),
            "figures": {
                "evictions": len(seen.evictions),
                "faults": len(seen.faults),
                "life": seen.life,
                "replica starts": len(replicas.lives),
                "settled after the last fault (s)": None if settled is None else round(settled - last_fault),
                "node-seconds over the threshold": sum(
                    sum(1 for share in shares.values() if share > THRESHOLD) for _, shares in seen.nodes
                ),
                "hottest node (share of its cores)": round(
                    max((max(sh.values()) for _, sh in seen.nodes), default=0), 2
                ),
            },
            "faults": seen.faults,
            "evictions": [asdict(e) | {"by": seen.evicted_by.get(e.uid, "")} for e in seen.evictions.values()],
        }
        (workdir / "results.json").write_text(json.dumps(results, indent=2))
        return results
    finally:
        if observer is not None:
            observer.stop()
        balancer.close()
        plane.stop()
        prom.stop()


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


def fault(
    event: Event,
    replicas: Replicas,
    prom: Prometheus,
    write_config: Any,
    config: dict[str, Any],
    api: Any,
    seen: Observed,
) -> None:
    """One fault, carried out now; it ends before this returns."""
    start = time.time()
    if event.kind == "kill_holder":
        victim = holder(api) or REPLICAS[0]
        replicas.kill(victim)
        time.sleep(5 + event.value * 10)
        replicas.start(victim)
    elif event.kind == "restart_both":
        for replica in REPLICAS:
            replicas.kill(replica)
        for replica in REPLICAS:
            replicas.start(replica)
    elif event.kind == "prometheus_down":
        prom.server.stop()
        time.sleep(event.length)
        prom.restart()
        seen.stale.append((start, time.time() + REFRESH * 2))
    elif event.kind == "prometheus_slow":
        prom.proxy.set("delay", delay=QUERY_TIMEOUT + 1)
        time.sleep(event.length)
        prom.proxy.set("pass")
        seen.stale.append((start, time.time() + REFRESH * 2))
    elif event.kind == "config_valid":
        write_config(loadext_config(prom.proxy.url, threshold=round(event.value, 2)))
        time.sleep(event.length)
        write_config(config)
    elif event.kind == "config_invalid":
        write_config("signals: [{name: cpu, query: q, threshold: 2}]\n")
        time.sleep(10)
        write_config(config)
    elif event.kind == "dry_run":
        write_config(loadext_config(prom.proxy.url, mode="dryRun"))
        time.sleep(event.length)
        write_config(config)
    seen.faults.append((start, time.time(), event.kind))


def table(results: dict[str, Any]) -> str:
    lines = ["| invariant | violations | examples |", "|---|---:|---|"]
    for name, found in results["invariants"].items():
        lines.append(f"| {name} | {found['violations']} | {'; '.join(found['examples'])} |")
    lines.append("")
    lines.append("| figure | value |")
    lines.append("|---|---|")
    for name, value in results["figures"].items():
        lines.append(f"| {name} | {value} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--nodes", type=int, default=30)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    workdir = args.out or Path(tempfile.mkdtemp(prefix="loadext-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    results = run(args.seed, args.minutes, args.nodes, workdir)
    print(table(results))
    print(f"\nresults and logs in {workdir}", file=sys.stderr)
    return 1 if any(found["violations"] for found in results["invariants"].values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
