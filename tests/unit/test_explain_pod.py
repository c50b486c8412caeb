"""Per-pod explanations: the last filter and prioritize for a pod, node by node."""

from __future__ import annotations

from typing import Any

from harness.inprocess import client_for, post, stored_app
from harness.wire import fixture_bytes


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
    assert report["filter"]["configHash"] == app.extender.config.hash


async def test_unknown_pod_is_a_404_naming_it(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client, stored_app())
    reply = await client.get("/explain", params={"pod": "default/nobody"})
    assert reply.status == 404
    assert "default/nobody" in (await reply.json())["error"]
