"""The one place unit tests look inside the Cluster (core/cluster.py keeps its parts private):
a test that seeds pods in flight at a given usage, or that compares the herd guard's fast path
with its reference, needs the parts themselves. Everything else goes through the ports."""

from __future__ import annotations

from loadext.core.cluster import Cluster, _State


def parts(cluster: Cluster) -> _State:
    return cluster._state
