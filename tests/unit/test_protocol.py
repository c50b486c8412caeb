"""Every wire fixture answered in the shape kube-scheduler decodes, in both node-cache modes.

The snapshot here is stored straight into loadext's cache (no Prometheus): these tests are about
the protocol; test_prometheus.py drives the same verbs from a real Prometheus.
"""

from __future__ import annotations

import copy
import json
import tracemalloc
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient

from harness.inprocess import STORED_CONFIG, client_for, post, stored_app
from harness.wire import fixture_bytes
from loadext.config.serving import Limits

CONFIG = STORED_CONFIG
GO_FILTER_KEYS = ["Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"]
REASON = "loadext: cpu above 80%"


@pytest.fixture
async def client(aiohttp_client: Any) -> TestClient[Any, Any]:
    return await client_for(aiohttp_client, stored_app())


@pytest.mark.parametrize("fixture", ["filter-names.json", "edge/filter-names-lowercase-keys.json"])
async def test_filter_names_mode(client: TestClient[Any, Any], fixture: str) -> None:
    status, reply = await post(client, "/filter", fixture_bytes(fixture))
    assert status == 200
    assert list(reply) == GO_FILTER_KEYS
    assert reply["NodeNames"] == ["ceph3", "ceph1"]  # the request's order, ceph2 removed
    assert reply["FailedAndUnresolvableNodes"] == {"ceph2": REASON}
    assert reply["FailedNodes"] == {} and reply["Nodes"] is None and reply["Error"] == ""


async def test_filter_full_nodes_echoes_node_objects_unchanged(client: TestClient[Any, Any]) -> None:
    request = orjson.loads(fixture_bytes("filter-nodes.json"))
    status, reply = await post(client, "/filter", fixture_bytes("filter-nodes.json"))
    assert status == 200 and list(reply) == GO_FILTER_KEYS
    assert reply["NodeNames"] is None
    expected = [n for n in request["Nodes"]["items"] if n["metadata"]["name"] != "ceph2"]
    assert reply["Nodes"] == {"metadata": {}, "items": expected}
    assert reply["FailedAndUnresolvableNodes"] == {"ceph2": REASON}
    # the reference reply in the fixtures carries the same node objects
    reference = orjson.loads(fixture_bytes("filter-result-nodes.json"))
    assert sorted(n["metadata"]["name"] for n in reply["Nodes"]["items"]) == sorted(
        n["metadata"]["name"] for n in reference["Nodes"]["items"]
    )


@pytest.mark.parametrize("fixture", ["prioritize-names.json", "prioritize-nodes.json"])
async def test_prioritize_is_a_bare_array_of_int_scores(client: TestClient[Any, Any], fixture: str) -> None:
    status, reply = await post(client, "/prioritize", fixture_bytes(fixture))
    assert status == 200
    assert isinstance(reply, list)
    assert all(list(entry) == ["Host", "Score"] and type(entry["Score"]) is int for entry in reply)
    scores = {entry["Host"]: entry["Score"] for entry in reply}
    # leastLoaded: 10 x mean free share over cpu and memory
    assert scores == {"ceph1": 6, "ceph2": 0, "ceph3": 7}
    assert b'Score":6' in orjson.dumps(reply)  # ints on the wire, never 6.0


@pytest.mark.parametrize("fixture", ["preempt-meta.json", "preempt-full.json"])
async def test_preempt_drops_overloaded_candidates_and_keeps_victims(
    client: TestClient[Any, Any], fixture: str
) -> None:
    status, reply = await post(client, "/preempt", fixture_bytes(fixture))
    assert status == 200
    assert list(reply) == ["NodeNameToMetaVictims"]  # the meta form in both modes
    assert reply["NodeNameToMetaVictims"] == {
        "ceph3": {
            "Pods": [
                {"UID": "d32408b4-8c87-58fd-8cd2-adb50cd3b8e0"},
                {"UID": "c2c004dc-c406-54e5-b32b-9393a9578e42"},
            ],
            "NumPDBViolations": 1,
        },
    }


async def test_preempt_keeps_placeholder_candidates(client: TestClient[Any, Any]) -> None:
    status, reply = await post(client, "/preempt", fixture_bytes("edge/preempt-meta-placeholder.json"))
    assert status == 200
    victims = reply["NodeNameToMetaVictims"]
    assert set(victims) == {"ceph1", "ceph3"}
    assert victims["ceph1"] == {"Pods": [], "NumPDBViolations": 0}


async def test_edge_requests(client: TestClient[Any, Any]) -> None:
    status, reply = await post(client, "/filter", fixture_bytes("edge/filter-names-empty-list.json"))
    assert (status, reply["NodeNames"], reply["FailedAndUnresolvableNodes"]) == (200, [], {})
    status, reply = await post(client, "/filter", fixture_bytes("edge/filter-names-single.json"))
    single = orjson.loads(fixture_bytes("edge/filter-names-single.json"))["NodeNames"]
    assert status == 200 and len(single) == 1
    assert reply["NodeNames"] + list(reply["FailedAndUnresolvableNodes"]) == single
    status, reply = await post(client, "/filter", fixture_bytes("edge/filter-names-besteffort.json"))
    assert status == 200 and reply["NodeNames"] == ["ceph3", "ceph1"]
    status, reply = await post(client, "/prioritize", b'{"Pod":null,"Nodes":null,"NodeNames":null}')
    assert (status, reply) == (200, [])


async def test_daemonset_pods_are_never_filtered(client: TestClient[Any, Any]) -> None:
    request = orjson.loads(fixture_bytes("filter-names.json"))
    request["Pod"]["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "node-agent", "uid": "x", "controller": True}
    ]
    status, reply = await post(client, "/filter", orjson.dumps(request))
    assert status == 200
    assert reply["NodeNames"] == ["ceph2", "ceph3", "ceph1"]
    assert reply["FailedAndUnresolvableNodes"] == {}
    request_preempt = orjson.loads(fixture_bytes("preempt-meta.json"))
    request_preempt["Pod"] = request["Pod"]
    status, reply = await post(client, "/preempt", orjson.dumps(request_preempt))
    assert set(reply["NodeNameToMetaVictims"]) == {"ceph2", "ceph3"}


async def test_unschedulable_rejections_go_to_failed_nodes(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client, stored_app(CONFIG + "rejectedNodes: unschedulable\n"))
    _status, reply = await post(client, "/filter", fixture_bytes("filter-names.json"))
    assert reply["FailedNodes"] == {"ceph2": REASON}
    assert reply["FailedAndUnresolvableNodes"] == {}


async def test_path_prefix(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client, stored_app(), path_prefix="/scheduler/")
    status, reply = await post(client, "/scheduler/filter", fixture_bytes("filter-names.json"))
    assert status == 200 and reply["NodeNames"] == ["ceph3", "ceph1"]
    assert (await client.post("/filter", data=fixture_bytes("filter-names.json"))).status == 404


def big_node_list(count: int) -> bytes:
    request = orjson.loads(fixture_bytes("filter-nodes.json"))
    template = request["Nodes"]["items"][0]
    items = []
    for i in range(count):
        node = copy.deepcopy(template)
        node["metadata"]["name"] = f"worker-{i:04d}"
        items.append(node)
    request["Nodes"]["items"] = items
    return orjson.dumps(request)


async def test_large_non_cache_requests_pass_the_body_limit(aiohttp_client: Any) -> None:
    body = big_node_list(300)  # ~2.6 MB: aiohttp's 1 MiB default would refuse it
    assert len(body) > 2 * 1024 * 1024
    client = await client_for(aiohttp_client, stored_app())
    status, reply = await post(client, "/filter", body)
    assert status == 200 and len(reply["Nodes"]["items"]) == 300

    small = await client_for(aiohttp_client, stored_app(limits=Limits(max_body_size=1024 * 1024)))
    status, reply = await post(small, "/filter", body)
    assert status == 413
    assert "too large" in reply["error"] and reply["verb"] == "filter"


async def test_bind_is_refused_when_disabled(client: TestClient[Any, Any]) -> None:
    status, reply = await post(client, "/bind", fixture_bytes("bind.json"))
    assert status == 200
    assert list(reply) == ["Error"] and "bind is disabled" in reply["Error"]


async def test_bind_enabled_without_api_client_is_an_error_reply(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client, stored_app(CONFIG + "bind: {enabled: true}\n"))
    status, reply = await post(client, "/bind", fixture_bytes("bind.json"))
    assert status == 200 and "no Kubernetes API client" in reply["Error"]


AWKWARD_NAMES = ['q"uote', "back\\slash", "tab\tand\nnewline", "ünïcødé-节点", "emoji-🚀", "ctl\x01", "plain"]


async def test_replies_for_awkward_node_names_equal_a_plain_json_encoder(aiohttp_client: Any) -> None:
    """Prioritize joins pre-encoded per-node fragments and filter encodes names and reasons:
    both must escape exactly as a plain JSON encoder does, byte for byte, call after call."""
    cpu = {name: 0.1 * i for i, name in enumerate(AWKWARD_NAMES)}  # the last ones over 80 %: refused
    cpu["plain"] = 0.95
    app = stored_app(STORED_CONFIG, cpu, dict.fromkeys(AWKWARD_NAMES, 0.5))
    client = await client_for(aiohttp_client, app)
    body = orjson.dumps({"Pod": None, "Nodes": None, "NodeNames": AWKWARD_NAMES})
    for _ in range(2):  # the second call joins the fragments the first one encoded
        response = await client.post("/prioritize", data=body)
        scores = [app.cluster.verbs.table().verdict(name).score for name in AWKWARD_NAMES]
        expected = [{"Host": name, "Score": score} for name, score in zip(AWKWARD_NAMES, scores, strict=True)]
        assert await response.read() == json.dumps(expected, ensure_ascii=False, separators=(",", ":")).encode()
    response = await client.post("/filter", data=body)
    reply = await response.read()
    assert json.loads(reply)["NodeNames"] == [n for n in AWKWARD_NAMES if n != "plain"]
    assert json.loads(reply)["FailedAndUnresolvableNodes"] == {"plain": "loadext: cpu above 80%"}
    expected_names = json.dumps([n for n in AWKWARD_NAMES if n != "plain"], ensure_ascii=False, separators=(",", ":"))
    assert expected_names.encode() in reply


def test_priority_fragments_cost_about_their_length() -> None:
    """The fragments are kept for every node and score. Kept as orjson.dumps results they held a
    ~4 KB buffer each (214 MB at 5000 nodes); they must cost about their own length."""
    from loadext.http.protocol import _PriorityFragments

    fragments, names = _PriorityFragments(), [f"node-{i:05d}" for i in range(1000)]
    tracemalloc.start()
    try:
        reply = fragments.join(names, [5] * len(names))
        held = tracemalloc.get_traced_memory()[0] - len(reply)
    finally:
        tracemalloc.stop()
    assert orjson.loads(reply)[-1] == {"Host": "node-00999", "Score": 5}
    assert held < 11 * len(names) * 100  # 11 fragments a node of ~36 bytes, with object overhead


def test_the_same_pod_bytes_decode_once_and_a_changed_pod_anew() -> None:
    """filter and then prioritize carry the same Pod bytes: the second decode is the first's
    PodRef; a pod whose bytes differ (another pod, or the same one changed) is decoded again."""
    from loadext.http.protocol import Codec

    codec, body = Codec(), fixture_bytes("filter-names.json")
    first = codec.decode_extender_args(body).args.pod
    again = codec.decode_extender_args(bytes(body)).args.pod  # equal bytes, another object
    assert first is not None and again is first
    changed = json.loads(body)
    changed["Pod"]["metadata"]["name"] = "another"
    other = codec.decode_extender_args(orjson.dumps(changed)).args.pod
    assert other is not None and other is not first and other.name == "another"
    # Another server's codec (another App in the process) shares none of it.
    assert Codec().decode_extender_args(body).args.pod is not first


def test_prioritize_shares_filters_name_list_when_the_bytes_are_equal() -> None:
    """prioritize gets the names filter passed, in filter's order: equal bytes share the list
    (the decision log keeps both calls); other names, or repeated ones, are decoded anew."""
    from loadext.http.protocol import Codec

    codec, body = Codec(), json.loads(fixture_bytes("filter-names.json"))
    first = codec.decode_extender_args(orjson.dumps(body)).args.names
    again = codec.decode_extender_args(orjson.dumps(body)).args.names
    assert again is first and again == body["NodeNames"]
    fewer = codec.decode_extender_args(orjson.dumps({**body, "NodeNames": body["NodeNames"][1:]})).args.names
    assert fewer == body["NodeNames"][1:]
    repeated = {**body, "NodeNames": ["a", "b", "a"]}
    for _ in range(2):  # the memo keeps the list with the repeat dropped
        assert codec.decode_extender_args(orjson.dumps(repeated)).args.names == ["a", "b"]


def test_a_bad_pod_is_refused_every_time_not_remembered() -> None:
    from loadext.http.protocol import Codec, ProtocolError

    codec, bad = Codec(), b'{"Pod": {"metadata": {"name": 7}}, "NodeNames": ["a"]}'
    for _ in range(2):
        with pytest.raises(ProtocolError, match=r"Pod\.metadata\.name"):
            codec.decode_extender_args(bad)


def test_two_apps_in_one_process_share_no_wire_cache() -> None:
    """The codec's caches are the App's: a second App decodes the same bytes for itself."""
    first, second = stored_app(), stored_app()
    body = fixture_bytes("filter-names.json")
    pod = first.server.codec.decode_extender_args(body).args.pod
    assert pod is not None and first.server.codec.decode_extender_args(body).args.pod is pod
    assert second.server.codec.decode_extender_args(body).args.pod is not pod
