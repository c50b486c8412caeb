"""Per-pod explanations: the last filter and prioritize for a pod, node by node."""

from __future__ import annotations

import gc
import json
import time
import weakref
from typing import Any

import orjson

from harness.inprocess import (
    HERD_GUARDED_CONFIG,
    STORED_CONFIG,
    STORED_CPU,
    STORED_MEMORY,
    client_for,
    post,
    publish,
    stored_app,
)
from harness.wire import fixture_bytes
from loadext.commands.tables import format_pod_decisions
from loadext.config import parse_config
from loadext.core.decisions import Decision
from loadext.core.herd.usage import Usage
from loadext.core.policy import Verdict
from loadext.core.snapshot import Sample, Snapshot
from tests.unit.inside import parts


async def test_explain_pod_lists_every_candidate_with_values_age_and_verdict(aiohttp_client: Any) -> None:
    app = stored_app()
    client = await client_for(aiohttp_client, app)
    await post(client, "/filter", fixture_bytes("filter-names.json"))
    await post(client, "/prioritize", fixture_bytes("prioritize-names.json"))
    reply = await client.get("/explain", params={"pod": "analytics/ingest-0"})
    assert reply.status == 200
    report = await reply.json()
    assert report["pod"] == "analytics/ingest-0"
    rows = {row["node"]: row for row in report["filter"]["nodes"]}
    assert list(rows) == ["ceph2", "ceph3", "ceph1"]  # the request's candidates, in its order
    assert rows["ceph2"]["verdict"] == "reject" and rows["ceph2"]["reason"] == "loadext: cpu above 80%"
    assert rows["ceph2"]["signals"]["cpu"]["value"] == 0.95
    assert rows["ceph2"]["signals"]["cpu"]["threshold"] == 0.8
    assert rows["ceph2"]["signals"]["cpu"]["age"] >= 0
    assert rows["ceph3"]["verdict"] == "pass" and rows["ceph3"]["pool"] is None
    assert {r["node"]: r["score"] for r in report["prioritize"]["nodes"]} == {"ceph1": 6, "ceph2": 0, "ceph3": 7}
    assert report["filter"]["configHash"] == app.cluster.config.hash


async def test_an_older_decision_keeps_its_values_but_not_the_snapshot(aiohttp_client: Any) -> None:
    """In a quiet cluster each pod meets a new refresh. The log keeps only the last few
    snapshots alive (each ~2.6 MB at 5000 nodes; 256 of them were once kept), and a decision
    made on an older one still explains itself with the values it was decided on."""
    app = stored_app()
    client = await client_for(aiohttp_client, app)
    await post(client, "/filter", fixture_bytes("filter-names.json"))
    await post(client, "/prioritize", fixture_bytes("prioritize-names.json"))
    before = await (await client.get("/explain", params={"pod": "analytics/ingest-0"})).json()
    decided_on = weakref.ref(app.cluster.verbs.snapshot())
    body = json.loads(fixture_bytes("filter-names.json"))
    for i in range(6):  # a pod per refresh, each refresh with other values
        publish(app, {node: 0.2 + 0.1 * i for node in STORED_CPU}, STORED_MEMORY)
        body["Pod"]["metadata"]["name"] = f"later-{i}"
        await post(client, "/filter", orjson.dumps(body))
    gc.collect()
    assert decided_on() is None
    assert await (await client.get("/explain", params={"pod": "analytics/ingest-0"})).json() == before
    latest = await (await client.get("/explain", params={"pod": "analytics/later-5"})).json()
    assert {row["node"]: row["signals"]["cpu"]["value"] for row in latest["filter"]["nodes"]} == dict.fromkeys(
        STORED_CPU, 0.7
    )


async def test_unknown_pod_is_a_404_naming_it(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client, stored_app())
    reply = await client.get("/explain", params={"pod": "default/nobody"})
    assert reply.status == 404
    assert "default/nobody" in (await reply.json())["error"]


async def test_explain_pod_shows_the_pods_estimate_and_what_was_in_flight_per_node(aiohttp_client: Any) -> None:
    app = stored_app(HERD_GUARDED_CONFIG)
    parts(app.cluster).ledger.place("earlier", "ceph3", time.time(), Usage(2.0, 2**30))
    client = await client_for(aiohttp_client, app)
    await post(client, "/filter", fixture_bytes("filter-nodes.json"))  # cpu request 500m, limit 2
    parts(app.cluster).ledger.place("later", "ceph1", time.time(), Usage(1.0, 0))  # after the decision
    report = await (await client.get("/explain", params={"pod": "analytics/ingest-0"})).json()
    memory = round(0.7 * 2 * 2**30)  # herdGuard's factor x the 2Gi memory limit
    factor = {"cpu": "factor", "memory": "factor"}  # no measured usage, no owner history
    assert report["filter"]["estimate"] == {"cpuCores": 1.7, "memoryBytes": memory, "source": factor}
    in_flight = {row["node"]: row["inFlight"] for row in report["filter"]["nodes"]}
    assert in_flight == {"ceph2": None, "ceph3": {"pods": 1, "cpuCores": 2.0, "memoryBytes": 2**30}, "ceph1": None}
    table = format_pod_decisions(report)
    assert "IN FLIGHT" in table and "1 pod, 2 cores" in table
    assert f"the pod counts as 1.7 cores (from factor), {memory / 2**20:.0f} MiB (from factor)" in table


async def test_explain_pod_without_the_herd_guard_has_no_estimate(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client, stored_app())
    await post(client, "/filter", fixture_bytes("filter-names.json"))
    report = await (await client.get("/explain", params={"pod": "analytics/ingest-0"})).json()
    assert "estimate" not in report["filter"]
    assert all("inFlight" not in row for row in report["filter"]["nodes"])
    assert "IN FLIGHT" not in format_pod_decisions(report)


def test_a_cut_down_decision_keeps_each_candidates_row() -> None:
    """Nodes identified by address: a candidate whose identity is unknown ("") has no
    samples and the table's no-data verdict, before and after the snapshot is let go."""
    hot, cool, no_data = Verdict(False, 0, "loadext: cpu above 80%"), Verdict(True, 7, ""), Verdict(True, 5, "")
    snapshot = Snapshot({"10.0.0.1": {"cpu": Sample(0.9, 1.0)}, "10.0.0.2": {"cpu": Sample(0.2, 1.0)}}, {}, 1)
    table = {"10.0.0.1": hot, "10.0.0.2": cool, "": no_data}
    decision = Decision(
        "filter", 2.0, ["a", "b", "c"], ["10.0.0.1", "", "10.0.0.2"], table, snapshot, parse_config(STORED_CONFIG)
    )
    cut = decision.cut_down()
    assert cut.snapshot is None and isinstance(cut.verdicts, list)
    assert cut.node_verdicts() == decision.node_verdicts() == [hot, no_data, cool]
    assert cut.node_samples() == decision.node_samples() == [{"cpu": Sample(0.9, 1.0)}, None, {"cpu": Sample(0.2, 1.0)}]
