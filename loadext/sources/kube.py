"""The Kubernetes API edge: the client, Bindings, the config ConfigMap, Events and node
annotations, and how a failed call is said (API_ERRORS, why_failed); lists and watches are in
listwatch.py. Bodies are decoded by msgspec (shared/objects.py).

The client is synchronous; callers run these in worker threads and hand results back to the
event loop.
"""

from __future__ import annotations

import ctypes
import logging
import math
import os
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from loadext.core.requests import BindingArgs, BoundPod
from loadext.shared.objects import ConfigMap, Pod, PodStatus
from loadext.sources.connection import connection_cause

log = logging.getLogger(__name__)


# Seconds one API call may take (the watches' long polls excepted): without a bound, an API
# server that takes the connection and never answers holds a worker thread forever, and a
# few such binds starve the refresh of threads and keep shutdown waiting.
API_TIMEOUT = 10.0


class KubeError(Exception):
    """The Kubernetes API could not be used, said in one line that leads with the cause.
    `passing` when waiting may cure it: no answer came, or the server said so (429, 5xx)."""

    def __init__(self, message: str, passing: bool = False) -> None:
        super().__init__(message)
        self.passing = passing


def api_client(kubeconfig: str | None) -> Any:
    """A CoreV1Api from a kubeconfig file, or from the pod's service account in-cluster."""
    configuration = client.Configuration()
    if kubeconfig:
        if not os.path.exists(kubeconfig):
            raise KubeError(f"--kubeconfig {kubeconfig}: no such file")
        try:
            config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        except (ConfigException, OSError, ValueError) as exc:
            raise KubeError(f"--kubeconfig {kubeconfig}: {exc}") from None
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            config.load_incluster_config(client_configuration=configuration)
        except ConfigException as exc:
            raise KubeError(f"in-cluster service account: {exc}") from None
    else:
        return None
    # No quick retries inside a call: every caller has its own (the watches' backoff, the
    # scheduler retrying a bind), and three retry warnings buried the one reason.
    configuration.retries = False
    return client.CoreV1Api(client.ApiClient(configuration))


# How long serve's start waits out a refusal of its ConfigMap (401, 403, 404): an API server just
# started refuses what it will allow until its authorizer's caches fill (seen here ~1 s after a
# restart), so a refusal is believed once it has held this long.
REFUSAL_WAITED = 30.0


def worth_waiting(exc: Exception) -> float:
    """For how long a failed read of serve's ConfigMap at start is worth trying again: no answer
    or the server's own trouble (429, 5xx) as long as it lasts, a refusal REFUSAL_WAITED,
    anything else (a missing key, no API client) not at all."""
    if not isinstance(exc, KubeError):
        return 0.0
    return math.inf if exc.passing else REFUSAL_WAITED


def unusable(api: Any, doing: str, exc: ApiException | urllib3.exceptions.HTTPError) -> KubeError:
    """A call the command cannot go on without, in one line that leads with the cause."""
    host = api.api_client.configuration.host
    if isinstance(exc, ApiException):
        passing = exc.status == 429 or (exc.status or 0) >= 500
        return KubeError(f"{doing} failed: {exc.status} {exc.reason} ({host})", passing=passing)
    return KubeError(f"{doing} failed: {unanswered(exc, API_TIMEOUT)} to {host}", passing=True)


def bind(api: Any, args: BindingArgs, timeout: float = API_TIMEOUT) -> str:
    """Create the Binding; "" on success. Idempotent: a retry for a pod already bound to the
    same node succeeds, so a late reply followed by a scheduler retry does no harm."""
    body = client.V1Binding(
        metadata=client.V1ObjectMeta(name=args.pod_name, namespace=args.pod_namespace, uid=args.pod_uid),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name=args.node),
    )
    failure = f"binding {args.pod_namespace}/{args.pod_name} to {args.node} failed"
    try:
        # _preload_content=False: the client cannot deserialize the Binding it gets back.
        api.create_namespaced_pod_binding(
            args.pod_name, args.pod_namespace, body, _preload_content=False, _request_timeout=timeout
        )
        return ""
    except ApiException as exc:
        failure = f"{failure}: {exc.status} {exc.reason}"
        if exc.status != 409:
            return failure
    except urllib3.exceptions.HTTPError as exc:
        return f"{failure}: {unanswered(exc, timeout)}"
    try:
        pod = api.read_namespaced_pod(args.pod_name, args.pod_namespace, _request_timeout=timeout)
    except API_ERRORS as exc:
        return f"{failure}; reading the pod failed: {why_failed(exc, timeout)}"
    if pod.metadata.uid != args.pod_uid:
        return f"pod {args.pod_namespace}/{args.pod_name} has UID {pod.metadata.uid}, not {args.pod_uid}"
    if pod.spec.node_name == args.node:
        return ""
    return f"pod {args.pod_namespace}/{args.pod_name} is already bound to {pod.spec.node_name}"


try:
    _malloc_trim: Callable[[int], object] | None = ctypes.CDLL("libc.so.6").malloc_trim
except (OSError, AttributeError):  # not glibc: nothing to hand back this way
    _malloc_trim = None


def release_freed_memory() -> None:
    """Hand the heap pages a big list freed back to the OS. glibc keeps freed memory for reuse,
    and the pages of a 60 000-pod list are not needed again: without this, the settled RSS
    keeps some of the list's high-water for good."""
    if _malloc_trim is not None:
        _malloc_trim(0)


def rfc3339_seconds(rfc3339: str | None) -> float:
    try:
        return datetime.fromisoformat(rfc3339).timestamp() if rfc3339 else 0.0
    except ValueError:
        return 0.0


def bound_pod(pod: Pod) -> BoundPod | None:
    spec, meta, status = pod.spec, pod.metadata, pod.status or PodStatus()
    if spec is None or meta is None or not spec.nodeName:
        return None
    placed = meta.creationTimestamp
    for condition in status.conditions or ():
        if condition.type == "PodScheduled" and condition.status == "True" and condition.lastTransitionTime:
            placed = condition.lastTransitionTime
    finished = status.phase in ("Succeeded", "Failed") or meta.deletionTimestamp is not None
    return BoundPod(pod.ref(), spec.nodeName, rfc3339_seconds(placed), finished)


def read_configmap(api: Any, namespace: str, name: str, key: str) -> str:
    try:
        configmap = api.read_namespaced_config_map(name, namespace, _request_timeout=API_TIMEOUT)
    except API_ERRORS as exc:
        raise unusable(api, f"reading ConfigMap {namespace}/{name}", exc) from None
    data = configmap.data or {}
    if key not in data:
        raise KeyError(f"ConfigMap {namespace}/{name} has no key {key!r} (keys: {', '.join(data) or 'none'})")
    return str(data[key])


def configmap_event(api: Any, configmap: ConfigMap, reason: str, message: str) -> None:
    """A Warning Event on the ConfigMap, where `kubectl describe configmap` shows it."""
    meta = configmap.metadata
    record_event(
        api, "ConfigMap", meta.name, meta.namespace, reason, message, "Warning", meta.uid, meta.resourceVersion
    )


def record_event(
    api: Any,
    kind: str,
    name: str,
    namespace: str,
    reason: str,
    message: str,
    type_: str = "Normal",
    uid: str = "",
    resource_version: str = "",
) -> None:
    """An Event on an object: namespaced ones in their namespace, a Node in default (where
    `kubectl describe node` finds it). A failure is logged, never raised: what it reports
    happened either way."""
    now = datetime.now(UTC)
    event = client.CoreV1Event(
        metadata=client.V1ObjectMeta(generate_name=f"{name}.", namespace=namespace),
        involved_object=client.V1ObjectReference(
            api_version="v1",
            kind=kind,
            name=name,
            namespace=None if kind == "Node" else namespace,
            uid=uid or None,
            resource_version=resource_version or None,
        ),
        reason=reason,
        message=message[:1024],
        type=type_,
        count=1,
        first_timestamp=now,
        last_timestamp=now,
        source=client.V1EventSource(component="loadext"),
        reporting_component="loadext",
        reporting_instance=os.environ.get("HOSTNAME", "loadext"),
    )
    try:
        api.create_namespaced_event(namespace, event, _request_timeout=API_TIMEOUT)
    except API_ERRORS as exc:
        log.warning("could not record an Event on %s %s/%s: %s", kind, namespace, name, getattr(exc, "status", exc))


def annotate_node(api: Any, node: str, key: str, value: str) -> str:
    """Set one annotation on a Node (a merge patch of that key alone); "" on success."""
    try:
        api.patch_node(node, {"metadata": {"annotations": {key: value}}}, _request_timeout=API_TIMEOUT)
        return ""
    except API_ERRORS as exc:
        return f"annotating node {node} failed: {why_failed(exc)}"


# What a call to the API server raises when it fails: the server's refusal, or no answer.
API_ERRORS = (ApiException, urllib3.exceptions.HTTPError)


def why_failed(exc: ApiException | urllib3.exceptions.HTTPError, timeout: float = API_TIMEOUT) -> str:
    """A failed API call's cause in a few words: the server's status and reason, or why no
    answer came."""
    if isinstance(exc, ApiException):
        return f"{exc.status} {exc.reason}"
    return unanswered(exc, timeout)


def unanswered(exc: urllib3.exceptions.HTTPError, timeout: float) -> str:
    """Why an API call got no reply, in words. (urllib3's NewConnectionError, a refused
    connection, is a ConnectTimeoutError by inheritance only.)"""
    refused = isinstance(exc, urllib3.exceptions.NewConnectionError)
    if isinstance(exc, urllib3.exceptions.TimeoutError) and not refused:
        return f"no answer within {timeout:g}s"
    return connection_cause(exc)
