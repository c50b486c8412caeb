"""What the soak sees, sampled as it runs, from the API server (every eviction, budget, node and
pod), both replicas (/readyz, /explain, RSS) and a monitoring Prometheus that scrapes both
replicas' /metrics, whose answers to the shipped alert rules' expressions are recorded.

Nothing here judges: invariants.py does, after the run, from `Observed`.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, watch
from life import SCHEDULER
from run import CORES, USAGE_CPU, cores_of

from harness.loadext import ready

ROOT = Path(__file__).resolve().parents[2]
LOADEXT_NAMESPACE = "loadext"
REPLICAS = ("replica-a", "replica-b")
BYTES = {"Mi": 2**20, "Gi": 2**30}
# the nodes the series of loadext's signals name (cluster.py's config: the CPU counter and memory)
NAMED = "group by (node) (node_cpu_usage_seconds_total or node_memory_working_set_bytes)"
ALERTS = ("LoadextDown", "LoadextDegraded", "LoadextPrometheusQueryErrors", "LoadextConfigReloadFailing",
          "LoadextKubeWatchFailing")  # fmt: skip


def holder(api: Any) -> str | None:
    """The replica named in the rebalancer's Lease (its HOSTNAME is the identity's prefix)."""
    try:
        lease = client.CoordinationV1Api(api).read_namespaced_lease("loadext-rebalancer", LOADEXT_NAMESPACE)
    except client.ApiException:
        return None
    identity = lease.spec.holder_identity or ""
    return next((r for r in REPLICAS if identity.startswith(r + "_")), None)


def alert_expressions() -> dict[str, str]:
    """The shipped rules' expressions (manifests/rules/loadext-rules.yaml), by alert name."""
    groups = yaml.safe_load((ROOT / "manifests" / "rules" / "loadext-rules.yaml").read_text())["groups"]
    found = {rule["alert"]: rule["expr"] for group in groups for rule in group["rules"] if "alert" in rule}
    return {name: found[name] for name in ALERTS}


@dataclass(frozen=True)
class Eviction:
    time: float  # the DisruptionTarget condition's transition, as the API server set it
    pod: str
    namespace: str
    node: str
    workload: str
    created: float
    uid: str


@dataclass(frozen=True)
class Sample:
    """One look at the cluster: node CPU shares (from the pods' usage annotations, what kwok
    serves), nodes not Ready, and the pods Pending with whether some node had room for each."""

    time: float
    shares: dict[str, float]
    not_ready: frozenset[str]
    pending: frozenset[str]  # uids of loadext-scheduled pods without a node
    with_room: frozenset[str]  # of those, the ones some node had room for (requests and threshold)
    holder: str | None = None  # the replica holding the rebalancer's Lease


@dataclass
class Observed:
    evictions: dict[str, Eviction] = field(default_factory=dict)  # uid -> the eviction
    evicted_by: dict[str, str] = field(default_factory=dict)  # uid -> the replica its Event names
    budgets: list[tuple[float, dict[str, tuple[int, int]]]] = field(
        default_factory=list
    )  # (t, name -> healthy, desired)
    samples: list[Sample] = field(default_factory=list)
    readyz: list[tuple[float, str, bool]] = field(default_factory=list)
    alerts: list[tuple[float, dict[str, bool]]] = field(default_factory=list)  # (t, alert -> expression true)
    explained: list[tuple[float, str, dict[str, Any]]] = field(default_factory=list)  # (t, replica, digest)
    faults: list[tuple[float, float, str, str]] = field(default_factory=list)  # (start, end, kind, what)
    # a data fault's start and end: maxDataAge into one loadext has no fresh sample of what it broke;
    # from its end Prometheus answers again, and loadext's next refresh (a second) can be fresh
    stale: list[tuple[float, float]] = field(default_factory=list)
    api_down: list[tuple[float, float]] = field(default_factory=list)
    thresholds: list[tuple[float, float, float]] = field(default_factory=list)  # (start, end, the cpu threshold)
    pending_names: dict[str, str] = field(default_factory=dict)  # uid -> namespace/name
    placed: set[str] = field(default_factory=set)  # uids of pods loadext's scheduler profile bound
    life: dict[str, int] = field(default_factory=dict)  # what the schedule did, by kind
    named: dict[str, float] = field(default_factory=dict)  # node -> when loadext's signals' series last named it
    life_refused: dict[str, int] = field(default_factory=dict)  # life the API server did not take (down)
    life_held: dict[str, int] = field(default_factory=dict)  # rollouts and scalings a node held hot held back


def explain_digest(report: dict[str, Any]) -> dict[str, Any]:
    """What the checks read from a replica's /explain: the mode, the cpu threshold, whether it
    is degraded, and each node with the age of its cpu sample (None: none)."""
    rebalance = report.get("rebalance") or {}
    cpu = next((s for s in report["signals"] if s["name"] == "cpu"), {})
    return {
        "degraded": report["degraded"],
        "mode": rebalance.get("mode"),
        "threshold": cpu.get("threshold"),
        "cpu_success_age": cpu.get("lastSuccessAge"),  # seconds since the cpu query last answered
        "nodes": {row["node"]: (row["signals"].get("cpu") or {}).get("age") for row in report["nodes"]},
    }


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as reply:
        return json.loads(reply.read())


def explain_status(url: str, pod: str) -> int | None:
    """The HTTP status of /explain?pod= (200: the replica keeps a decision for the pod; 404:
    none), None when the replica does not answer."""
    try:
        with urllib.request.urlopen(f"{url}/explain?{urllib.parse.urlencode({'pod': pod})}", timeout=5) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


def resident_mb(pid: int) -> float | None:
    """VmRSS of a live process, in MB (`env` execs loadext: the spawned pid is loadext's)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _requests(pod: dict[str, Any]) -> tuple[float, float]:
    """(cpu cores, memory bytes) requested by the pod's containers (the soak's pods have no init
    containers or overhead, and write quantities in m, Mi and Gi only)."""
    cpu = memory = 0.0
    for container in pod["spec"]["containers"]:
        asked = (container.get("resources") or {}).get("requests") or {}
        text = asked.get("cpu", "0")
        cpu += int(text[:-1]) / 1000 if text.endswith("m") else float(text)
        text = asked.get("memory", "0")
        memory += float(text[:-2]) * BYTES[text[-2:]] if text[-2:] in BYTES else float(text)
    return cpu, memory


def look(pods: list[dict[str, Any]], nodes: list[dict[str, Any]], threshold: float) -> Sample:
    """One Sample from one list of pods and nodes. A node has room for a Pending pod when it is
    Ready, schedulable and untainted (NoSchedule, NoExecute), its free requests cover the pod's,
    and its CPU share with the pod's usage added stays within `threshold` (loadext's filter)."""
    now = time.time()
    used: dict[str, float] = {}
    asked: dict[str, list[float]] = {}
    pending: dict[str, dict[str, Any]] = {}
    for pod in pods:
        spec, status = pod["spec"], pod.get("status", {})
        node = spec.get("nodeName", "")
        if not node:
            if spec.get("schedulerName") == SCHEDULER and not pod["metadata"].get("deletionTimestamp"):
                pending[pod["metadata"]["uid"]] = pod
            continue
        if status.get("phase") in ("Succeeded", "Failed"):
            continue
        cpu, memory = _requests(pod)
        totals = asked.setdefault(node, [0.0, 0.0, 0.0])
        totals[0], totals[1], totals[2] = totals[0] + cpu, totals[1] + memory, totals[2] + 1
        if status.get("phase") == "Running" and USAGE_CPU in pod["metadata"].get("annotations", {}):
            used[node] = used.get(node, 0.0) + cores_of(pod)
    not_ready, open_nodes = set(), []
    for node in nodes:
        name = node["metadata"]["name"]
        conditions = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
        if conditions.get("Ready") != "True":
            not_ready.add(name)
            continue
        taints = [t for t in node["spec"].get("taints") or [] if t["effect"] in ("NoSchedule", "NoExecute")]
        if not node["spec"].get("unschedulable") and not taints:
            open_nodes.append(name)
    with_room = set()
    for uid, pod in pending.items():
        cpu, memory = _requests(pod)
        cores = cores_of(pod) if USAGE_CPU in pod["metadata"].get("annotations", {}) else 0.0
        for name in open_nodes:
            taken = asked.get(name, [0.0, 0.0, 0.0])
            fits = taken[0] + cpu <= CORES and taken[1] + memory <= 64 * 2**30 and taken[2] < 110
            if fits and (used.get(name, 0.0) + cores) / CORES <= threshold:
                with_room.add(uid)
                break
    shares = {node: cores / CORES for node, cores in used.items()}
    return Sample(now, shares, frozenset(not_ready), frozenset(pending), frozenset(with_room))


class Observer:
    """Samples the API server, both replicas and the monitoring Prometheus every second, and
    watches pods for evictions, in threads of its own. Errors while the API server is down are
    expected: the sample is skipped and the next one tries again."""

    def __init__(
        self, api: Any, replicas: Any, seen: Observed, monitoring_url: str, threshold: Any, data_url: Any
    ) -> None:
        self.api, self.replicas, self.seen, self.monitoring_url = api, replicas, seen, monitoring_url
        self.threshold = threshold  # () -> the cpu threshold in force
        self.data_url = data_url  # () -> the URL of the Prometheus loadext reads (a restart moves it)
        self.expressions = alert_expressions()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._loop, args=(self.sample, 1.0), daemon=True),
            threading.Thread(target=self._loop, args=(self.replicas_and_alerts, 2.0), daemon=True),
            threading.Thread(target=self._watch, daemon=True),
        ]
        self._last_rss = self._last_log_look = 0.0
        self._newest_placed = ""  # namespace/name of the pod last seen bound by loadext's profile

    def start(self) -> Observer:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(40)

    def _loop(self, step: Any, every: float) -> None:
        while not self._stop.wait(every):
            try:
                step()
            except Exception as exc:  # the API server down: the sample waits for it
                print(f"observer: {type(exc).__name__}: {exc}"[:200], file=sys.stderr)

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

    def sample(self) -> None:
        now = time.time()
        if now - self._last_rss >= 10:
            self._last_rss = now
            for life in self.replicas.currents():
                rss = resident_mb(life.process.proc.pid)
                if rss is not None:
                    life.rss.append((now, rss))
        with contextlib.suppress(OSError):  # Prometheus down: the last times stand
            named = get_json(f"{self.data_url()}/api/v1/query?{urllib.parse.urlencode({'query': NAMED})}")
            for row in named["data"]["result"]:
                self.seen.named[row["metric"].get("node", "")] = now
        core = client.CoreV1Api(self.api)
        pods = json.loads(core.list_pod_for_all_namespaces(_preload_content=False, _request_timeout=5).data)["items"]
        nodes = json.loads(core.list_node(_preload_content=False, _request_timeout=5).data)["items"]
        seen = replace(look(pods, nodes, self.threshold()), holder=holder(self.api))
        self.seen.samples.append(seen)
        for pod in pods:
            meta, spec = pod["metadata"], pod["spec"]
            if meta["uid"] in seen.pending:
                self.seen.pending_names.setdefault(meta["uid"], f"{meta['namespace']}/{meta['name']}")
            elif spec.get("nodeName") and spec.get("schedulerName") == SCHEDULER:
                if meta["uid"] not in self.seen.placed:
                    self._newest_placed = f"{meta['namespace']}/{meta['name']}"
                self.seen.placed.add(meta["uid"])
        pdbs = client.PolicyV1Api(self.api).list_pod_disruption_budget_for_all_namespaces(_request_timeout=5)
        health = {p.metadata.name: (p.status.current_healthy, p.status.desired_healthy) for p in pdbs.items if p.status}
        self.seen.budgets.append((now, health))
        events = core.list_event_for_all_namespaces(field_selector="reason=LoadextRebalance", _request_timeout=5)
        for event in events.items:
            involved = event.involved_object
            if involved.kind == "Pod" and involved.uid:
                self.seen.evicted_by.setdefault(involved.uid, event.reporting_instance or "")

    def decision_logs(self, now: float) -> None:
        """When each incarnation's decision log (the last 256 pods it decided, for /explain)
        is full, seen from outside: a pod it explains (its witness, the newest placed when it
        answered) stops being explained once 256 newer pods are decided. The log's memory grows
        until then (~10 KB a pod at 30 candidates: each pod keeps the rows of the refresh it
        met), so RSS is judged from there, not from a fixed warm-up."""
        if now - self._last_log_look < 30:
            return
        self._last_log_look = now
        for life in self.replicas.currents():
            pod = life.witness or self._newest_placed
            if life.log_full is not None or not pod:
                continue
            status = explain_status(self.replicas.url(life.replica), pod)
            if not life.witness and status == 200:
                life.witness = pod
            elif life.witness and status == 404:
                life.log_full = now
                print(f"{life.process.name}: decision log full after {(now - life.started) / 60:.1f} min", flush=True)

    def replicas_and_alerts(self) -> None:
        now = time.time()
        self.decision_logs(now)
        for life in self.replicas.currents():
            url = self.replicas.url(life.replica)
            self.seen.readyz.append((now, life.replica, ready(url)))
            with contextlib.suppress(OSError):  # killed: LoadextDown says so
                self.seen.explained.append((now, life.replica, explain_digest(get_json(url + "/explain"))))
        verdicts = {}
        for name, expression in self.expressions.items():
            query = urllib.parse.urlencode({"query": expression})
            answer = get_json(f"{self.monitoring_url}/api/v1/query?{query}")
            verdicts[name] = bool(answer["data"]["result"])
        self.seen.alerts.append((now, verdicts))
