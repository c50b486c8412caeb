"""The Kubernetes call the rebalancer makes to move a pod (placement.py reads, taints.py keeps its
taints): evictions through the Eviction API (policy/v1, so PodDisruptionBudgets hold). Its Events
go through kube.record_event. Blocking, like kube.py: callers run it in a worker thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from loadext.sources.kube import API_TIMEOUT, unanswered


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
