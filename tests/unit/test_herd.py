"""The herd guard: estimates, the in-flight window, the incoming pod, restarts and deletions."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.config import stored_config
from harness.inprocess import client_for, post, stored_app
from harness.wire import fixture_bytes
from loadext.app import App
from loadext.config import HerdGuard, parse_config
from loadext.core.extender import likely_node, top_pick
from loadext.core.herd.correction import Candidate, corrected
from loadext.core.herd.inflight import NO_PLACEMENTS, InFlight, Placement, next_change, unseen_share
from loadext.core.herd.usage import EstimateRule, Usage, container_estimate, pod_estimate
from loadext.core.requests import ExtenderArgs, NodeInfo, PodRef
from loadext.shared.objects import Pod
from loadext.sources.kube import bound_pod
from tests.unit.inside import parts

GiB = 1024**3
RULE = EstimateRule.of(HerdGuard())  # the schema's defaults


@pytest.mark.parametrize(
    ("requests", "limits", "expected"),
    [
        ({"cpu": "500m", "memory": "1Gi"}, {"cpu": "2", "memory": "2Gi"}, Usage(1.7, 0.7 * 2 * GiB)),  # limit x factor
        ({"cpu": "1900m", "memory": "2Gi"}, {"cpu": "2", "memory": "2Gi"}, Usage(1.9, 2 * GiB)),  # request wins
        ({"cpu": "1"}, {}, Usage(1.0, 200 * 1024 * 1024)),  # no limit: the request; no memory at all: default
        ({}, {}, Usage(0.25, 200 * 1024 * 1024)),  # BestEffort
    ],
)
def test_container_estimate(requests: dict[str, str], limits: dict[str, str], expected: Usage) -> None:
    got = container_estimate(requests, limits, RULE)
    assert got.cpu == pytest.approx(expected.cpu) and got.memory == pytest.approx(expected.memory)


def test_pod_estimate_uses_the_effective_request_rule() -> None:
    containers = [({"cpu": "1"}, {}), ({"cpu": "500m"}, {})]
    init = [({"cpu": "3"}, {})]  # an init container larger than the app containers together
    usage = pod_estimate(containers, init, {"cpu": "100m"}, RULE)
    assert usage.cpu == pytest.approx(3.1)


def test_in_flight_window_and_removal() -> None:
    inflight, now = InFlight(window=60), 1000.0
    inflight.place("a", Placement("n1", now - 10, Usage(1, 0)), now)
    inflight.place("b", Placement("n1", now - 20, Usage(2, 0)), now)
    inflight.place("old", Placement("n1", now - 61, Usage(8, 0)), now)  # metrics show it by now
    kept = inflight.per_node(now)
    assert dict(kept) == {"n1": (Usage(3, 0), 2)}
    inflight.remove("a")
    inflight.place("c", Placement("n2", now, Usage(4, 0)), now)
    assert dict(inflight.per_node(now)) == {"n1": (Usage(2, 0), 1), "n2": (Usage(4, 0), 1)}
    assert dict(kept) == {"n1": (Usage(3, 0), 2)}  # a decision keeps the sums it was made with
    inflight.expire(now + 61)
    assert dict(inflight.per_node(now + 61)) == {}


def guarded_app(enabled: bool, burst_cap: int = 0) -> App:
    return stored_app(
        stored_config(herdGuard={"enabled": enabled, "window": "5m", "burstCap": burst_cap}),
        {"ceph1": 0.78, "ceph2": 0.50, "ceph3": 0.50},
        {"ceph1": 0.30, "ceph2": 0.30, "ceph3": 0.30},
    )


@pytest.mark.parametrize("enabled", [False, True])
async def test_incoming_pod_pushes_a_node_just_under_threshold_over(aiohttp_client: Any, enabled: bool) -> None:
    # ceph1 is at 78 % of 31.5 cores; the pod (cpu request 500m, limit 2) is estimated at 1.7 cores: +5.4 %.
    client_ = await client_for(aiohttp_client, guarded_app(enabled))
    status, reply = await post(client_, "/filter", fixture_bytes("filter-nodes.json"))
    assert status == 200
    refused = reply["FailedAndUnresolvableNodes"]
    assert refused == ({"ceph1": "loadext: cpu above 80%"} if enabled else {})


def v1_pod(uid: str, node: str, scheduled: datetime, cpu_limit: str = "4", phase: str = "Running") -> Pod:
    """A bound Pod as the API server's JSON has it, decoded the way the pod watch decodes it."""

    def rfc3339(moment: datetime) -> str:
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")

    pod = {
        "metadata": {"name": uid, "namespace": "ns", "uid": uid, "creationTimestamp": rfc3339(datetime.now(UTC))},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": cpu_limit}}}],
        },
        "status": {
            "phase": phase,
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": rfc3339(scheduled)}],
        },
    }
    return msgspec.json.decode(orjson.dumps(pod), type=Pod)


async def test_restart_keeps_placement_times_and_deletion_forgets(aiohttp_client: Any) -> None:
    scheduled = datetime.fromtimestamp(int(time.time()) - 30, UTC)  # RFC 3339 in whole seconds, as the API has it
    long_ago = datetime.fromtimestamp(time.time() - 3600, UTC)
    pods = [bound_pod(v1_pod(f"p{i}", "ceph2", scheduled)) for i in range(3)]
    pods.append(bound_pod(v1_pod("ancient", "ceph2", long_ago)))
    for incarnation in range(2):  # the same pod list after a restart: same accounting, nothing re-dated
        app = guarded_app(True)
        cluster = app.cluster
        cluster.pods_listed([p for p in pods if p is not None])
        per_node = parts(cluster).ledger.inflight.per_node(time.time())
        assert per_node["ceph2"][1] == 3, incarnation  # the hour-old pod is visible in the metrics already
        assert per_node["ceph2"][0].cpu == pytest.approx(3 * 3.4)  # max(1, 4 x 0.85) each
        placed = {p.placed_at for p in parts(cluster).ledger.inflight._pods.values()}
        assert placed == {scheduled.timestamp()}
    # 10.2 of 31.5 cores in flight: ceph2 at 50 % + 32 % + the incoming 5.4 % is over 80 %.
    client_ = await client_for(aiohttp_client, app)
    _, reply = await post(client_, "/filter", fixture_bytes("filter-nodes.json"))
    assert "ceph2" in reply["FailedAndUnresolvableNodes"]
    report = orjson.loads(await (await client_.get("/explain")).read())
    assert {r["node"]: r["inFlight"] for r in report["nodes"]}["ceph2"]["pods"] == 3
    for i in range(3):  # the pods are deleted: their estimates go with them
        cluster.pod_bound(bound_pod(v1_pod(f"p{i}", "ceph2", scheduled, phase="Succeeded")))  # type: ignore[arg-type]
    _, reply = await post(client_, "/filter", fixture_bytes("filter-nodes.json"))
    assert "ceph2" not in reply["FailedAndUnresolvableNodes"]


async def test_burst_cap(aiohttp_client: Any) -> None:
    app = guarded_app(True, burst_cap=2)
    cluster = app.cluster
    now = time.time()
    for i in range(2):
        parts(cluster).ledger.place(f"b{i}", "ceph3", now, Usage(0.001, 0))
    client_ = await client_for(aiohttp_client, app)
    _, reply = await post(client_, "/filter", fixture_bytes("filter-names.json"))
    assert reply["FailedAndUnresolvableNodes"] == {"ceph3": "loadext: 2 pods placed here in the last 300s"}
    metrics = await (await client_.get("/metrics")).text()
    assert 'loadext_node_rejections_total{cause="burst",signal="placements"} 1.0' in metrics


async def test_loadexts_own_favourite_counts_until_the_watch_says_otherwise(aiohttp_client: Any) -> None:
    """A burst scheduled faster than any pod watch: each pod is counted on the node loadext
    scored best for it, so the next pods of the burst see it there; a retry of the same pod does
    not count against itself, and the watch's real binding replaces the guess."""
    app = guarded_app(True, burst_cap=1)  # one pod per node per window makes the counting visible
    cluster = app.cluster
    client_ = await client_for(aiohttp_client, app)
    body = orjson.loads(fixture_bytes("prioritize-nodes.json"))

    async def prioritize(uid: str) -> list[dict[str, Any]]:
        body["Pod"]["metadata"]["uid"] = uid
        _, scores = await post(client_, "/prioritize", orjson.dumps(body))
        return list(scores)

    def favourite(scores: list[dict[str, Any]], uid: str) -> str:
        """The node loadext counts the pod on: one of the top scores (ties at random)."""
        guess = parts(cluster).ledger.inflight.get(uid)
        assert guess is not None
        assert {s["Host"]: s["Score"] for s in scores}[guess.node] == max(s["Score"] for s in scores)
        return guess.node

    # ceph1 is too hot for the pod; ceph2 and ceph3 are equal, so without the guess both pods
    # could go to the same one.
    first = favourite(await prioritize("burst-0"), "burst-0")
    second = favourite(await prioritize("burst-1"), "burst-1")
    assert sorted([first, second]) == ["ceph2", "ceph3"]
    retry = await prioritize("burst-0")  # a retry of burst-0: its own guess does not count against it
    assert {s["Host"]: s["Score"] for s in retry}[first] > 0
    assert all(s["Score"] == 0 for s in await prioritize("burst-2"))  # both taken for this window
    cluster.pod_bound(bound_pod(v1_pod("burst-0", "ceph1", datetime.now(UTC))))  # type: ignore[arg-type]
    placed = parts(cluster).ledger.inflight.get("burst-0")
    assert placed is not None and placed.node == "ceph1"


def test_the_estimate_rule_follows_a_reload() -> None:
    """The rule is built once per config (not per estimate): a reload must replace it."""
    cluster = guarded_app(True).cluster
    pod = PodRef("ns", "p", "uid-1", ("ReplicaSet",), containers=(({"cpu": "1"}, {"cpu": "2"}),))
    before, _ = cluster.verbs.guard().incoming(pod)
    assert before.cpu == pytest.approx(1.7)  # max(1, 2 x 0.85): the default cpuLimitFactor
    cluster.config_applied(parse_config(stored_config(herdGuard={"enabled": True, "cpuLimitFactor": 1.0})))
    after, _ = cluster.verbs.guard().incoming(pod)
    assert after.cpu == 2.0


def test_the_guess_is_spread_over_tied_top_scores() -> None:
    """kube-scheduler picks at random among tied nodes; loadext's guess must not always fall
    on the first of them, or that node looks busier at every moment of a burst."""
    scores = [3, 7, 0, 7, 7, 2, 7]
    picks = [top_pick(scores, start) for start in range(len(scores))]
    assert set(picks) == {1, 3, 4, 6}  # every tied top, never a lower score
    assert all(scores[p] == 7 for p in picks)
    assert top_pick([5], 0) == 0


def herd_config(kind: str) -> str:
    identity = {"label": "node" if kind == "name" else "instance", "kind": kind}
    return stored_config(herdGuard={"enabled": True, "window": "5m", "burstCap": 3}, nodeIdentity=identity)


@pytest.mark.parametrize("kind", ["name", "address"])
@settings(max_examples=100)
@given(
    loads=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=1, max_size=12),
    placements=st.lists(st.tuples(st.integers(0, 11), st.integers(0, 4000)), max_size=10),
    # few sizes, so that calls reuse a size's memo after placements changed it (its stale nodes)
    requests=st.lists(
        st.tuples(st.integers(0, 11), st.sampled_from((0, 500, 1500, 4000)), st.booleans()), min_size=1, max_size=6
    ),
)
def test_fast_herd_correction_equals_the_reference(
    kind: str,
    loads: list[tuple[float, float]],
    placements: list[tuple[int, int]],
    requests: list[tuple[int, int, bool]],
) -> None:
    """Extender.verdicts (memoized per pod size, re-judging only nodes with placements in flight)
    decides exactly as correction.corrected over every candidate one by one, call after call,
    with nodes named by name or by address (where every third node has no IP: no data)."""
    names = [f"n{i}" for i in range(len(loads))]
    keys = names if kind == "name" else [f"10.0.0.{i}" for i in range(len(loads))]
    cpu, memory = (dict(zip(keys, column, strict=True)) for column in zip(*loads, strict=True))
    app = stored_app(herd_config(kind), cpu, memory)
    cluster = app.cluster
    if kind == "address":
        for i, name in enumerate(names):
            cluster.node_seen(NodeInfo(name, () if i % 3 == 2 else (keys[i],), {}, {}))
    for name in names[::2]:  # some nodes with allocatable, some without (nothing to add it to)
        parts(cluster).directory.set_allocatable(name, {"cpu": 8.0, "memory": 32.0 * GiB})
    for i, (node, millicores) in enumerate(placements):
        if node < len(names):
            parts(cluster).ledger.place(f"placed-{i}", names[node], time.time(), Usage(millicores / 1000, 0))
    for i, (count, millicores, repeat_uid) in enumerate(requests):
        asked = names[: max(1, count)]
        uid = "again" if repeat_uid else f"pod-{i}"
        pod = PodRef("default", uid, uid, (), (({"cpu": f"{millicores}m"}, {}),))
        args = ExtenderArgs(pod, list(asked))
        fast = app.extender.verdicts(args)
        table, now, samples = cluster.verbs.table(), cluster.clock(), cluster.verbs.snapshot().by_identity
        identities = cluster.verbs.identities_of(asked, {}, table)
        candidates = [
            Candidate(n, table.verdict(i), samples.get(i), table.pools.get(i))
            for n, i in zip(asked, identities, strict=True)
        ]
        in_flight, incoming = parts(cluster).ledger.inflight.per_node(now), parts(cluster).ledger.estimate(pod).usage
        own, capacity = parts(cluster).ledger.inflight.get(uid), parts(cluster).directory.allocatable
        reference = [
            corrected(c, in_flight.get(c.name, NO_PLACEMENTS), incoming, capacity, cluster.config, now, own)
            for c in candidates
        ]
        assert fast == reference
        cluster.verbs.guard().count_now(uid, asked[-1])  # the next call sees one more placement in flight


def test_a_measured_pod_fades_out_in_steps_until_the_window_ends() -> None:
    """Placed at 0 with a 100 s window, measured at 20: its node's metrics take it in over the
    80 s left, so it counts 1, 3/4, 1/2, 1/4 of its usage, a step every 20 s, then nothing."""
    unmeasured = Placement("n1", 0.0, Usage(2.0, 100.0))
    assert unseen_share(unmeasured, 100, 99) == 1.0
    assert next_change(unmeasured, 100, 5) == 100
    measured = replace(unmeasured, measured_at=20.0)
    shares = {t: unseen_share(measured, 100, t) for t in (20, 39.9, 40, 59, 60, 80, 99.9)}
    assert shares == {20: 1.0, 39.9: 1.0, 40: 0.75, 59: 0.75, 60: 0.5, 80: 0.25, 99.9: 0.25}
    assert [next_change(measured, 100, t) for t in (20, 39.9, 40, 85)] == [40, 40, 60, 100]
    inflight = InFlight(window=100)
    inflight.place("p", measured, 20.0)
    assert inflight.per_node(30.0)["n1"][0] == Usage(2.0, 100.0)
    version = inflight.version
    assert inflight.per_node(41.0)["n1"][0] == Usage(1.5, 75.0)
    assert inflight.changed_since(version) == ["n1"]  # the step re-judges that node, and only it
    assert inflight.per_node(99.0)["n1"][0] == Usage(0.5, 25.0)
    assert "n1" not in inflight.per_node(100.0)


@settings(max_examples=200)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["place", "remove", "expire"]),
            st.integers(0, 5),
            st.integers(0, 3),
            st.integers(0, 90),
            st.integers(0, 90),
        ),
        max_size=40,
    )
)
def test_in_flight_sums_and_changes_match_a_recount(steps: list[tuple[str, int, int, int, int]]) -> None:
    """The incremental per-node sums equal a recount of the pods in the window, each at its
    unseen share, as time passes; and every node whose sum changed is reported by changed_since."""
    inflight, now = InFlight(window=60), 1000.0
    expected: dict[str, Placement] = {}
    for action, pod, node, age, measured in steps:
        before, version = inflight.per_node(now), inflight.version
        uid = f"pod-{pod}"
        if action == "place":
            measured_at = now - age + measured if 0 < measured <= age else 0.0
            placement = Placement(f"n{node}", now - age, Usage(pod + 1, node), measured_at=measured_at)
            inflight.place(uid, placement, now)
            expected.pop(uid, None)
            if age < 60:
                expected[uid] = placement
        elif action == "remove":
            inflight.remove(uid)
            expected.pop(uid, None)
        else:
            now += age
            expected = {u: p for u, p in expected.items() if now - p.placed_at < 60}
        recount: dict[str, tuple[Usage, int]] = {}
        for placement in expected.values():
            usage, count = recount.get(placement.node, (Usage(), 0))
            recount[placement.node] = (usage + placement.usage.scaled(unseen_share(placement, 60, now)), count + 1)
        after = inflight.per_node(now)
        assert {n: (pytest.approx((u.cpu, u.memory)), c) for n, (u, c) in after.items()} == {
            n: ((u.cpu, u.memory), c) for n, (u, c) in recount.items()
        }
        changed = inflight.changed_since(version)
        assert changed is not None
        assert {n for n in {*before, *after} if before.get(n) != after.get(n)} <= set(changed)


def test_the_likely_node_among_tied_tops_has_the_fewest_pods_in_flight() -> None:
    """kube-scheduler breaks equal extender scores with LeastAllocated first: among tied top
    scores loadext guesses a node with the fewest pods in flight, at random among those."""
    names, scores = ["a", "b", "c", "d"], [7, 7, 5, 7]
    in_flight = {"a": (Usage(3.4, 0), 2), "d": (Usage(1.7, 0), 1)}  # b has none
    assert {likely_node(names, scores, start, in_flight) for start in range(4)} == {1}
    in_flight["b"] = (Usage(1.7, 0), 1)
    assert {likely_node(names, scores, start, in_flight) for start in range(4)} == {1, 3}  # b and d, 1 each
    assert likely_node(names, [2, 9, 9], 0, None) in (1, 2) and likely_node(names, [1, 9, 3], 2, {}) == 1
