"""Everything under tests/e2e/ needs the real control plane (Go-built binaries): marked e2e.

The modules share one control plane (harness/cluster.py). Each test owns its nodes (labelled
with its case) and its pods select only those nodes, so tests never see each other's nodes.
Nodes are API objects with kubelet-like status; no kubelet runs, so pods are only ever
scheduled, never started."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)
