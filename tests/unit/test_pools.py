"""Policy by node pool: label-selected threshold and weight overrides, first match wins."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest

from harness.inprocess import client_for, post, stored_app
from harness.wire import fixture_bytes
from loadext.app import App
from loadext.config import ConfigError, parse_config
from loadext.core.policy import judge
from loadext.core.snapshot import Sample
from tests.unit.inside import parts

CONFIG = """
prometheus: {url: "http://127.0.0.1:1"}
signals:
  - {name: cpu, query: c, threshold: 0.8, weight: 1}
  - {name: memory, query: m, threshold: 0.9, weight: 1}
pools:
  - name: batch
    nodeSelector: {pool: batch}
    signals: [{name: cpu, threshold: 0.9}]
  - name: batch-gpu
    nodeSelector: {pool: batch, gpu: "true"}
    signals: [{name: cpu, threshold: 0.5}, {name: memory, weight: 3}]
"""


def test_first_matching_pool_wins_and_overrides_only_what_it_names() -> None:
    config = parse_config(CONFIG)
    assert config.pool_for({"pool": "batch", "gpu": "true"}).name == "batch"  # type: ignore[union-attr]
    assert config.pool_for({"pool": "web"}) is None and config.pool_for(None) is None
    batch = config.pools[0]
    assert [(s.name, s.threshold, s.weight) for s in batch.signals] == [("cpu", 0.9, 1.0), ("memory", 0.9, 1.0)]
    now = time.time()
    samples = {"cpu": Sample(0.85, now), "memory": Sample(0.2, now)}
    assert not judge(samples, config, now).passed
    assert judge(samples, config, now, batch).passed


@pytest.mark.parametrize(
    ("pools", "expected"),
    [
        (
            "pools: [{name: a, nodeSelector: {}, signals: [{name: cpu, threshold: 0.9}]}]",
            "pools[a].nodeSelector: must be a non-empty map",
        ),
        (
            "pools: [{name: a, nodeSelector: {p: a}, signals: [{name: disk, threshold: 0.9}]}]",
            "pools[a].signals[0].name: no signal named 'disk'",
        ),
        (
            "pools: [{name: a, nodeSelector: {p: a}, signals: [{name: cpu, threshold: 2}]}]",
            "pools[a].signals[cpu].threshold: must be a ratio",
        ),
        (
            "pools: [{name: a, nodeSelector: {p: a}, signals: [{name: cpu}]}, {name: a, nodeSelector: {p: b}, "
            "signals: [{name: cpu}]}]",
            "pools[1].name: pool 'a' is listed twice",
        ),
        ("pools: [{name: a, nodeSelector: {p: a}, signals: [], extra: 1}]", "pools[a].extra: unknown key"),
    ],
)
def test_pool_errors_name_the_field(pools: str, expected: str) -> None:
    text = CONFIG.split("pools:")[0] + pools + "\n"
    with pytest.raises(ConfigError) as info:
        parse_config(text)
    assert any(expected in str(e) for e in info.value.errors), info.value.errors


def pools_app() -> App:
    return stored_app(CONFIG, {"ceph1": 0.85, "ceph2": 0.85, "ceph3": 0.85}, {"ceph1": 0.2, "ceph2": 0.2, "ceph3": 0.2})


async def test_pools_from_node_objects_in_non_cache_requests(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client, pools_app())
    request = orjson.loads(fixture_bytes("filter-nodes.json"))
    for node in request["Nodes"]["items"]:
        if node["metadata"]["name"] == "ceph3":
            node["metadata"]["labels"]["pool"] = "batch"
    status, reply = await post(client, "/filter", orjson.dumps(request))
    assert status == 200
    assert [n["metadata"]["name"] for n in reply["Nodes"]["items"]] == ["ceph3"]
    assert set(reply["FailedAndUnresolvableNodes"]) == {"ceph1", "ceph2"}
    explained = {row["node"]: row for row in (await (await client.get("/explain")).json())["nodes"]}
    assert explained["ceph3"]["pool"] == "batch" and explained["ceph1"]["pool"] is None


async def test_pools_from_watched_node_labels_in_cache_mode(aiohttp_client: Any) -> None:
    app = pools_app()
    client = await client_for(aiohttp_client, app)
    status, reply = await post(client, "/filter", fixture_bytes("filter-names.json"))
    assert status == 200
    assert reply["NodeNames"] == []  # all three at 85 % cpu, threshold 80 %
    parts(app.cluster).directory.upsert("ceph1", ["10.20.0.11"], {"pool": "batch"})  # as the Node watch reports it
    status, reply = await post(client, "/filter", fixture_bytes("filter-names.json"))
    assert status == 200
    assert reply["NodeNames"] == ["ceph1"]
    assert reply["FailedAndUnresolvableNodes"]["ceph2"] == "loadext: cpu above 80%"
