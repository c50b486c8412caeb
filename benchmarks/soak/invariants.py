"""The soak's invariants, judged after the run from what observe.py recorded: each with its
count of violations and a few examples. The limits are the config's (cluster.py sets both)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from observe import REPLICAS, Observed, Sample

SHOWN_WITHIN, CLEARED_WITHIN = 30.0, 60.0
# LoadextPrometheusQueryErrors is a rate over 5m: it clears 5 minutes after the last error
CLEARED_WITHIN_BY_KIND = {"node_signal_failing": 300.0 + CLEARED_WITHIN}
FAILING_FOR = 5.0  # seconds since a query last answered that /explain shows as failing (refreshes are 1 s)
PENDING_TOO_LONG = 60.0
AFTER_API_DOWN = 60.0  # the scheduler and the controllers catch up after an API server outage
SETTLE = 300.0
READY_WITHIN = 30.0  # /readyz back within this of a fault's end
NEAR = 3.0  # seconds from an eviction within which a sample (one a second) tells its node's state
# RSS is judged from the later of WARM_UP after a start and the incarnation's decision log full
# (observe.Observer.decision_logs), over RSS_OVER seconds at least
WARM_UP, RSS_OVER = 300.0, 600.0


@dataclass(frozen=True)
class Limits:
    cycle: float
    max_per_cycle: int
    max_per_node: int
    max_data_age: float
    hot_for_seconds: float
    herd_window: float
    threshold: float
    namespace: str  # the only namespace whose pods may move
    reloaded: float  # seconds within which both replicas apply a ConfigMap edit
    rate_window: float  # seconds the node CPU signal's rate() looks back: a node's series outlive its scrapes so long


@dataclass(frozen=True)
class Fault:
    start: float
    end: float
    kind: str
    what: str = ""  # the node it hit, or the threshold it set


Digest = dict[str, Any]
# How each fault kind shows: the alert rule whose expression must turn true within 30 s of its
# start and false within 60 s of its end, and what every live replica's /explain must say
# meanwhile (and stop saying). Two have neither: restart_both is what a rollout does, and a node
# whose kubelet says NotReady is kube-state-metrics' to alert on (KubeNodeNotReady); loadext's
# part there is to move nothing off it, checked with the evictions.
SHOWN: dict[str, tuple[str | None, Callable[[Digest, Fault], bool] | None]] = {
    "prometheus_down": ("LoadextDegraded", lambda d, f: bool(d["degraded"])),
    "prometheus_slow": ("LoadextDegraded", lambda d, f: bool(d["degraded"])),
    "node_signal_failing": (
        "LoadextPrometheusQueryErrors",
        lambda d, f: d["cpu_success_age"] is None or d["cpu_success_age"] > FAILING_FOR,
    ),
    "apiserver_down": ("LoadextKubeWatchFailing", None),
    "config_invalid": ("LoadextConfigReloadFailing", None),
    "kill_holder": ("LoadextDown", None),
    "kill_mid_eviction": ("LoadextDown", None),
    "node_not_ready": (None, None),
    "node_deleted_hot": (None, lambda d, f: f.what not in d["nodes"]),
    "dry_run": (None, lambda d, f: d["mode"] == "dryRun"),
    "config_valid": (None, lambda d, f: d["threshold"] is not None and abs(d["threshold"] - float(f.what)) < 1e-9),
    "restart_both": (None, None),
}
CLEARS = {"node_deleted_hot": False}  # a deleted node does not come back
# Alerts a fault sets besides its own: Prometheus down or slow fails every query too. A later
# fault that sets a fault's alert again before that one could clear masks its clearing.
ALSO_SETS = {"prometheus_down": {"LoadextPrometheusQueryErrors"}, "prometheus_slow": {"LoadextPrometheusQueryErrors"}}


def sets(kind: str) -> set[str]:
    """Every alert a fault of `kind` turns true."""
    alert = SHOWN[kind][0]
    return ({alert} if alert else set()) | ALSO_SETS.get(kind, set())


def check(
    seen: Observed, faults: list[Fault], lives: list[Any], logs: dict[str, str], limits: Limits, run_end: float
) -> dict[str, dict[str, Any]]:
    """Each invariant with its violations (examples kept, at most five each); an invariant the
    run cannot judge says why instead of passing."""
    out: dict[str, list[str]] = {}
    not_judged: dict[str, str] = {}

    def violation(name: str, what: str) -> None:
        out.setdefault(name, []).append(what)

    _evictions(seen, faults, lives, limits, violation)
    _pending(seen, limits, violation)
    for name, unjudged in _shown(seen, faults, limits, run_end, violation).items():
        not_judged[name] = f"{', '.join(unjudged)}; the others were judged"
    for fault in faults:  # readiness comes back
        for replica in REPLICAS:
            back = next((t for t, r, ok in seen.readyz if r == replica and ok and t >= fault.end), None)
            if back is None or back > deadline(fault.end, READY_WITHIN, seen.api_down):
                violation(
                    "/readyz back within 30 s of a fault's end", f"{replica} after {fault.kind} at {fault.end:.0f}"
                )
    for name, text in logs.items():
        if "Traceback" in text:
            violation("no traceback in a replica's log", name)
    slopes = []  # each judged incarnation's, as measured
    for life in lives:  # RSS after warm-up: under 1 MB per 10 minutes
        if life.witness and life.log_full is None:
            continue  # its decision log still filling: growth there is the log's, bounded
        warm = max(life.started + WARM_UP, life.log_full or 0.0)
        points = [(t, mb) for t, mb in life.rss if t >= warm]
        if len(points) >= 10 and points[-1][0] - points[0][0] >= RSS_OVER:
            slope = statistics.linear_regression([t for t, _ in points], [mb for _, mb in points]).slope * 600
            minutes = f"minutes {(points[0][0] - life.started) / 60:.0f}-{(points[-1][0] - life.started) / 60:.0f}"
            slopes.append(f"{life.process.name}: {slope:+.2f} MB per 10 min over its {minutes}")
            if slope >= 1.0:
                violation("RSS flat after warm-up", slopes[-1])
    if not slopes:
        not_judged["RSS flat after warm-up"] = (
            f"no incarnation lived {RSS_OVER / 60:.0f} minutes past its warm-up "
            f"({WARM_UP / 60:.0f} minutes, and its decision log full)"
        )
    last_fault = max((f.end for f in faults), default=0.0)
    settle = "every node within its threshold within 5 minutes of the last fault"
    if not faults:
        not_judged[settle] = "no fault in the run (--no-faults)"
    elif run_end - last_fault < SETTLE:
        not_judged[settle] = f"the run ends {run_end - last_fault:.0f} s after the last fault"
    elif settled_after(seen.samples, last_fault, limits.threshold) is None:
        violation(settle, "not by the end")
    names = [
        "one replica evicting per cycle", "every eviction by the Lease holder",
        "evictions per cycle within maxPerCycle", "evictions per node per cycle within the limit",
        "no eviction on stale metrics",
        "no eviction in dryRun mode", "no eviction within hotFor refreshes of a start",
        "no eviction past a disruption budget", "no replacement evicted within the herd window",
        "no eviction of a pod loadext must leave", "no eviction from a node not Ready",
        "no pod Pending over 60 s while a node has room", "a fault shows in /explain and its alert within 30 s",
        "a fault clears from /explain and its alert within 60 s of its end",
        "/readyz back within 30 s of a fault's end", "no traceback in a replica's log", "RSS flat after warm-up",
        settle,
    ]  # fmt: skip
    return {
        name: {
            "violations": len(out.get(name, [])),
            "examples": out.get(name, [])[:5],
            "not judged": not_judged.get(name),
            **({"measured": slopes} if name == "RSS flat after warm-up" else {}),
        }
        for name in names
    }


def shows_from(fault: Fault, seen: Observed, limits: Limits) -> float:
    """When loadext can first show the fault. A deleted node leaves /explain once the signals'
    series name it no more (loadext reports every node a series names): kwok, like a kubelet,
    serves its metrics until it sees the deletion (after an API server outage, its watch's
    backoff later: up to three minutes, seen), and the CPU signal's rate() still finds samples
    a window on."""
    if fault.kind == "node_deleted_hot":
        return max(fault.start, seen.named.get(fault.what, 0.0) + limits.rate_window)
    return fault.start


def deadline(start: float, seconds: float, outages: list[tuple[float, float]]) -> float:
    """`seconds` after `start` on a clock stopped while the API server is down: a replica just
    started reads its ConfigMap and lists pods and nodes before it is ready or explains anything,
    and a deleted node leaves loadext's view through the API server's watch."""
    end = start + seconds
    while (later := start + seconds + sum(max(0.0, min(end, b) - max(start, a)) for a, b in outages)) > end:
        end = later
    return end


def settled_after(samples: list[Sample], after: float, threshold: float) -> float | None:
    """When every node was first within `threshold` after `after`, if within SETTLE."""
    for sample in samples:
        if sample.time > after and max(sample.shares.values(), default=0.0) <= threshold:
            return sample.time if sample.time - after <= SETTLE else None
    return None


def _evictions(seen: Observed, faults: list[Fault], lives: list[Any], limits: Limits, violation: Any) -> None:
    evictions = sorted(seen.evictions.values(), key=lambda e: e.time)
    for e in evictions:  # one replica in any cycle; the limits per cycle and per node
        window = [o for o in evictions if e.time <= o.time < e.time + limits.cycle]
        makers = {seen.evicted_by.get(o.uid, "?") for o in window}
        if len(makers - {"?"}) > 1:
            violation("one replica evicting per cycle", f"{e.time:.0f}: {sorted(makers)}")
        if len(window) > limits.max_per_cycle:
            violation("evictions per cycle within maxPerCycle", f"{e.time:.0f}: {len(window)}")
        on_node = [o for o in window if o.node == e.node]
        if len(on_node) > limits.max_per_node:
            violation("evictions per node per cycle within the limit", f"{e.time:.0f} {e.node}: {len(on_node)}")
        for start, stop in seen.stale:
            if start + limits.max_data_age <= e.time <= stop:
                violation("no eviction on stale metrics", f"{e.pod} at {e.time:.0f} (stale {start:.0f}-{stop:.0f})")
        for fault in faults:
            if fault.kind == "dry_run" and fault.start + limits.reloaded <= e.time <= fault.end:
                violation("no eviction in dryRun mode", f"{e.pod} at {e.time:.0f}")
        maker = seen.evicted_by.get(e.uid)
        around = [s.holder for s in seen.samples if e.time - 2 <= s.time <= e.time + 2]
        if maker and around and maker not in around:  # the holder as read a second either side
            violation(
                "every eviction by the Lease holder",
                f"{e.pod} by {maker}, the Lease naming {sorted(set(map(str, around)))}",
            )
        started = [life.started for life in lives if life.replica == maker and life.started <= e.time]
        if started and e.time - started[-1] < limits.hot_for_seconds:
            violation("no eviction within hotFor refreshes of a start", f"{e.pod} by {maker}")
        after = next((health for t, health in seen.budgets if t >= e.time), {})
        healthy, desired = after.get(e.workload, (0, 0))
        if healthy < desired:  # the eviction took the workload below its budget
            violation("no eviction past a disruption budget", f"{e.pod} at {e.time:.0f}: {healthy} < {desired}")
        if e.time - e.created < limits.herd_window:
            violation("no replacement evicted within the herd window", f"{e.pod} {e.time - e.created:.0f}s old")
        if e.namespace != limits.namespace or not e.workload:
            violation("no eviction of a pod loadext must leave", f"{e.namespace}/{e.pod}")
        # the node as the API server had it nearest the eviction (no sample while it was down)
        near = [s for s in seen.samples if abs(s.time - e.time) <= NEAR]
        if near and e.node in min(near, key=lambda s: abs(s.time - e.time)).not_ready:
            violation("no eviction from a node not Ready", f"{e.pod} on {e.node} at {e.time:.0f}")


def _pending(seen: Observed, limits: Limits, violation: Any) -> None:
    """A pod Pending, with some node having room for it, in every sample for over 60 s (a gap
    in the samples, as while the API server is down, starts the count again), outside the
    minute after an API server outage."""
    since: dict[str, float] = {}
    last_time = 0.0
    reported: set[str] = set()
    for sample in seen.samples:
        if sample.time - last_time > 5:
            since.clear()
        last_time = sample.time
        since = {uid: since.get(uid, sample.time) for uid in sample.with_room}
        recovering = any(start <= sample.time <= stop + AFTER_API_DOWN for start, stop in seen.api_down)
        for uid, first in since.items():
            if sample.time - first > PENDING_TOO_LONG and not recovering and uid not in reported:
                reported.add(uid)
                name = seen.pending_names.get(uid, uid)
                violation("no pod Pending over 60 s while a node has room", f"{name} from {first:.0f}")


def _shown(seen: Observed, faults: list[Fault], limits: Limits, run_end: float, violation: Any) -> dict[str, list[str]]:
    """Returns, per invariant, the faults it cannot judge, each with why. A fault whose window to
    show in runs past the run's end, unseen, is not judged. A clearing seen passes however soon
    the run ends; one not seen is a violation only once its whole window was watched (not if the
    run ended first) and no later fault set the same alert again in it. Each window's clock
    stops while the API server is down, but for that outage's own fault."""
    shown, cleared = (
        "a fault shows in /explain and its alert within 30 s",
        "a fault clears from /explain and its alert within 60 s of its end",
    )
    unjudged: dict[str, list[str]] = {}
    for fault in faults:
        alert, says = SHOWN[fault.kind]
        label = f"{fault.kind} at {fault.start:.0f}"
        outages = [] if fault.kind == "apiserver_down" else seen.api_down  # its own outage is what shows
        shown_by = deadline(shows_from(fault, seen, limits), SHOWN_WITHIN, outages)
        clear_by = deadline(fault.end, CLEARED_WITHIN_BY_KIND.get(fault.kind, CLEARED_WITHIN), outages)
        explain_clear_by = deadline(fault.end, CLEARED_WITHIN, outages)
        still: list[tuple[str, float, bool]] = []  # never seen to clear: what, by when, whether the alert
        unseen = []  # what never showed within its window
        if alert is not None:
            if not any(v[alert] for t, v in seen.alerts if fault.start <= t <= shown_by):
                unseen.append(f"{label}: {alert} never true")
            if all(v[alert] for t, v in seen.alerts if fault.end <= t <= clear_by):
                still.append((f"{alert} still true", clear_by, True))
        said_by = (
            {} if says is None else {r: [(t, says(d, fault)) for t, x, d in seen.explained if x == r] for r in REPLICAS}
        )
        for replica, said in said_by.items():
            if not any(yes for t, yes in said if fault.start <= t <= shown_by):
                unseen.append(f"{label}: {replica}'s /explain never said so")
            if all(yes for t, yes in said if fault.end <= t <= explain_clear_by):
                still.append((f"{replica}'s /explain still says so", explain_clear_by, False))
        if unseen and run_end < shown_by:
            unjudged.setdefault(shown, []).append(f"{fault.kind} (the run ended first)")
        else:
            for what in unseen:
                violation(shown, what)
        if not CLEARS.get(fault.kind, True):
            continue
        masked = [g for g in faults if g is not fault and fault.end < g.start <= clear_by and alert in sets(g.kind)]
        why = ""
        for what, by, is_alert in still:
            if run_end < by:
                why = why or "the run ended first"
            elif masked and is_alert:
                why = why or f"its alert set again by {masked[0].kind} before it could clear"
            else:
                violation(cleared, f"{label}: {what}")
        if why:
            unjudged.setdefault(cleared, []).append(f"{fault.kind} ({why})")
    return unjudged
