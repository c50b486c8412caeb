"""The Kubernetes calls the rebalancer makes to act (placement.py reads): evictions through the Eviction
API (policy/v1, so PodDisruptionBudgets hold), and loadext's taints on Nodes (its Events go
through kube.record_event). Blocking, like kube.py: callers run them in worker threads.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgspec
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from loadext.sources.kube import API_TIMEOUT, unanswered

HOT_TAINT = ("loadext.io/hot", "PreferNoSchedule")  # hot nodes: the default scheduler's pods avoid them
REFUSED_TAINT = ("loadext.io/refused", "NoSchedule")  # refused nodes: cluster-autoscaler sees them full
TAINT_KEYS = frozenset(key for key, _ in (HOT_TAINT, REFUSED_TAINT))


class ApiUnavailable(Exception):
    """The API server could not be asked: this cycle stops, nothing more is evicted."""


@dataclass(frozen=True)
class Evicted:
    result: str  # evicted | pdb_blocked | failed
    detail: str = ""


def evict(api: Any, namespace: str, name: str, uid: str) -> Evicted:
    """POST the pod's eviction; the uid precondition keeps a pod of the same name, recreated
    meanwhile, from being evicted in its place."""
    body = client.V1Eviction(
        metadata=client.V1ObjectMeta(name=name, namespace=namespace),
        delete_options=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)),
    )
    try:
        api.create_namespaced_pod_eviction(name, namespace, body, _request_timeout=API_TIMEOUT)
    except ApiException as exc:
        if exc.status == 429:
            return Evicted("pdb_blocked", _message(exc) or "a PodDisruptionBudget allows no disruption now")
        return Evicted("failed", f"{exc.status} {exc.reason}: {_message(exc)}")
    except urllib3.exceptions.HTTPError as exc:
        raise ApiUnavailable(f"evicting {namespace}/{name} failed: {unanswered(exc, API_TIMEOUT)}") from None
    return Evicted("evicted")


def _message(exc: ApiException) -> str:
    try:
        body = msgspec.json.decode(exc.body or b"{}")
    except msgspec.DecodeError:
        return str(exc.body or "")[:200]
    return str(body.get("message", ""))[:300] if isinstance(body, dict) else ""


def set_taints(api: Any, node: str, wanted: Iterable[tuple[str, str]]) -> str:
    """Make loadext's taints on `node` exactly `wanted` (others' taints untouched); "" when done
    or nothing changed, else why not. The node's resourceVersion guards the write, so a
    concurrent change to its taints is never lost: a 409 is retried next cycle."""
    try:
        current = api.read_node(node, _request_timeout=API_TIMEOUT)
    except ApiException as exc:
        return f"reading node {node} failed: {exc.status} {exc.reason}"
    except urllib3.exceptions.HTTPError as exc:
        return f"reading node {node} failed: {unanswered(exc, API_TIMEOUT)}"
    taints = [t.to_dict() for t in current.spec.taints or ()]
    kept = [{k: v for k, v in t.items() if v is not None} for t in taints if t.get("key") not in TAINT_KEYS]
    ours = sorted((t["key"], t["effect"]) for t in taints if t.get("key") in TAINT_KEYS)
    if ours == sorted(wanted):
        return ""
    body = {
        "metadata": {"resourceVersion": current.metadata.resource_version},
        "spec": {"taints": kept + [{"key": key, "effect": effect} for key, effect in sorted(wanted)]},
    }
    try:
        api.patch_node(node, body, _request_timeout=API_TIMEOUT, _content_type="application/merge-patch+json")
    except ApiException as exc:
        return f"tainting node {node} failed: {exc.status} {exc.reason}"
    except urllib3.exceptions.HTTPError as exc:
        return f"tainting node {node} failed: {unanswered(exc, API_TIMEOUT)}"
    return ""
