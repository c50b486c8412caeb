"""Hostile and broken bodies: a 400 with a JSON body that names the problem, never a 5xx."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient
from hypothesis import given
from hypothesis import strategies as st

from harness.inprocess import client_for, post, stored_app

VERBS = ["filter", "prioritize", "preempt", "bind"]

CASES = [
    ("filter", b"", "empty body"),
    ("filter", b"{not json", "malformed JSON"),
    ("filter", b"[]", "body: expected a JSON object (Expected `object`, got `array`)"),
    ("filter", b'{"NodeNames": "ceph1"}', "NodeNames: Expected `array | null`, got `str`"),
    ("filter", b'{"NodeNames": ["ceph1", ""]}', "NodeNames[1]: Expected `str` of length >= 1"),
    ("filter", b'{"NodeNames": ["ceph1", 7]}', "NodeNames[1]: Expected `str`, got `int`"),
    ("prioritize", b'{"Nodes": {"items": {}}}', "Nodes.items: Expected `array | null`, got `object`"),
    (
        "prioritize",
        b'{"Nodes": {"items": [{"metadata": {}}]}}',
        "Nodes.items[0].metadata: Object missing required field `name`",
    ),
    ("filter", b'{"Pod": "ingest-0", "NodeNames": []}', "Pod: Expected `object | null`, got `str`"),
    (
        "preempt",
        b'{"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": 5}]}}}',
        "NodeNameToMetaVictims['n1'].Pods[0].UID: Expected `str`, got `int`",
    ),
    (
        "preempt",
        b'{"NodeNameToMetaVictims": {"n1": {"Pods": [], "NumPDBViolations": "1"}}}',
        "NumPDBViolations: Expected `int | null`, got `str`",
    ),
    ("bind", b'{"PodName": "p", "PodNamespace": "ns", "PodUID": "u"}', "Node: Expected `str`, got `null`"),
    (  # inside a Node object that would be echoed back as it came (found by atheris)
        "filter",
        b'{"Nodes": {"items": [{"metadata": {"name": "n1", "labels": {"a": "\x8d"}}}]}}',
        "body is not valid UTF-8 (byte 66)",
    ),
]


@pytest.fixture
async def client(aiohttp_client: Any) -> TestClient[Any, Any]:
    return await client_for(aiohttp_client, stored_app())


@pytest.mark.parametrize(("verb", "body", "message"), CASES)
async def test_bad_bodies_get_a_400_naming_the_problem(
    client: TestClient[Any, Any], verb: str, body: bytes, message: str
) -> None:
    status, reply = await post(client, f"/{verb}", body)
    assert status == 400
    assert reply["verb"] == verb
    assert message in reply["error"]


async def test_bad_requests_are_counted(client: TestClient[Any, Any]) -> None:
    await post(client, "/filter", b"{")
    text = await (await client.get("/metrics")).text()
    assert 'loadext_requests_total{outcome="bad_request",verb="filter"} 1.0' in text


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
protocol_keys = st.sampled_from(
    [
        "Pod",
        "Nodes",
        "NodeNames",
        "nodenames",
        "NodeNameToMetaVictims",
        "NodeNameToVictims",
        "PodName",
        "PodNamespace",
        "PodUID",
        "Node",
        "items",
        "metadata",
        "name",
        "Pods",
        "UID",
        "NumPDBViolations",
    ]
)
shaped = st.recursive(
    st.none() | st.integers() | st.text(max_size=6) | st.booleans(),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(protocol_keys, children, max_size=5),
    max_leaves=25,
)


def encode(value: Any) -> bytes:
    return json.dumps(value).encode()  # json, not orjson: integers beyond 64 bits are valid JSON


bodies = st.binary(max_size=64) | json_values.map(encode) | shaped.map(encode)


@given(verb=st.sampled_from(VERBS), body=bodies)
async def test_random_bodies_never_get_a_5xx(client: TestClient[Any, Any], verb: str, body: bytes) -> None:
    reply = await client.post(f"/{verb}", data=body)
    assert reply.status in (200, 400), await reply.text()
    assert reply.content_type == "application/json"
    orjson.loads(await reply.read())
