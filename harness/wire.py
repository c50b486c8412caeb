"""Extender request bodies for tests: the recorded fixtures in tests/fixtures, reshaped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"


def fixture_bytes(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def names_request(*nodes: str) -> dict[str, Any]:
    """A nodeCacheCapable filter/prioritize request for these node names."""
    request: dict[str, Any] = orjson.loads(fixture_bytes("filter-names.json"))
    request["NodeNames"] = list(nodes)
    return request


def full_nodes_request(nodes: dict[str, str]) -> dict[str, Any]:
    """A non-cache request whose Node objects carry the given InternalIPs."""
    request: dict[str, Any] = orjson.loads(fixture_bytes("filter-nodes.json"))
    template = request["Nodes"]["items"][0]
    items = []
    for name, ip in nodes.items():
        node = orjson.loads(orjson.dumps(template))
        node["metadata"]["name"] = name
        node["status"]["addresses"] = [
            {"type": "InternalIP", "address": ip},
            {"type": "Hostname", "address": name},
        ]
        items.append(node)
    request["Nodes"]["items"] = items
    return request
