"""The Kubernetes API edge: creating Bindings and watching Nodes, with the `kubernetes` client.

The client is synchronous; callers run these in worker threads and hand results back to the
event loop.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from loadext.core.herd import BoundPod
from loadext.core.requests import BindingArgs
from loadext.core.usage import owner_of

log = logging.getLogger(__name__)


def api_client(kubeconfig: str | None) -> Any:
    """A CoreV1Api from a kubeconfig file, or from the pod's service account in-cluster."""
    if kubeconfig:
        return client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config()
        return client.CoreV1Api()
    return None


def bind(api: Any, args: BindingArgs) -> str:
    """Create the Binding; "" on success. Idempotent: a retry for a pod already bound to the
    same node succeeds, so a late reply followed by a scheduler retry does no harm."""
    body = client.V1Binding(
        metadata=client.V1ObjectMeta(name=args.pod_name, namespace=args.pod_namespace, uid=args.pod_uid),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name=args.node),
    )
    try:
        # _preload_content=False: the client cannot deserialize the Binding it gets back.
        api.create_namespaced_pod_binding(args.pod_name, args.pod_namespace, body, _preload_content=False)
        return ""
    except ApiException as exc:
        failure = f"binding {args.pod_namespace}/{args.pod_name} to {args.node} failed: {exc.status} {exc.reason}"
        if exc.status != 409:
            return failure
    try:
        pod = api.read_namespaced_pod(args.pod_name, args.pod_namespace)
    except ApiException as exc:
        return f"{failure}; reading the pod failed: {exc.status} {exc.reason}"
    if pod.metadata.uid != args.pod_uid:
        return f"pod {args.pod_namespace}/{args.pod_name} has UID {pod.metadata.uid}, not {args.pod_uid}"
    if pod.spec.node_name == args.node:
        return ""
    return f"pod {args.pod_namespace}/{args.pod_name} is already bound to {pod.spec.node_name}"


def node_addresses(node: Any) -> list[str]:
    addresses = (node.status.addresses if node.status else None) or []
    return [a.address for a in addresses if a.type in ("InternalIP", "ExternalIP")]


def node_allocatable(node: Any) -> dict[str, Any]:
    return dict((node.status.allocatable if node.status else None) or {})


def _requirements(containers: list[Any] | None) -> tuple[tuple[dict[str, Any], dict[str, Any]], ...]:
    out = []
    for container in containers or ():
        resources = container.resources
        out.append(
            (
                dict((resources.requests if resources else None) or {}),
                dict((resources.limits if resources else None) or {}),
            )
        )
    return tuple(out)


def bound_pod(pod: Any) -> BoundPod | None:
    if not pod.spec or not pod.spec.node_name:
        return None
    placed = pod.metadata.creation_timestamp
    for condition in (pod.status.conditions if pod.status else None) or []:
        if condition.type == "PodScheduled" and condition.status == "True" and condition.last_transition_time:
            placed = condition.last_transition_time
    phase = pod.status.phase if pod.status else None
    meta = pod.metadata
    refs = ((ref.kind, ref.name, bool(ref.controller)) for ref in meta.owner_references or ())
    return BoundPod(
        uid=meta.uid,
        namespace=meta.namespace or "",
        name=meta.name or "",
        owner=owner_of(meta.namespace or "", refs, (meta.labels or {}).get("pod-template-hash", "")),
        node=pod.spec.node_name,
        placed_at=placed.timestamp() if placed else 0.0,
        containers=_requirements(pod.spec.containers),
        init_containers=_requirements(pod.spec.init_containers),
        overhead=dict(pod.spec.overhead or {}),
        finished=phase in ("Succeeded", "Failed") or pod.metadata.deletion_timestamp is not None,
    )


class ListWatch:
    """List, then watch from that resourceVersion; re-list on 410 Gone or any error, with a
    capped backoff. `on_list` gets the full list (so whatever changed while the API server was
    unreachable, deletions included, is replaced, not kept stale), `on_event` each later change,
    `on_health` True after each successful list and False on each failure."""

    def __init__(
        self,
        list_call: Callable[..., Any],
        on_list: Callable[[list[Any]], None],
        on_event: Callable[[str, Any], None],
        on_health: Callable[[bool], None] = lambda healthy: None,
        **list_args: Any,
    ) -> None:
        self.list_call = list_call
        self.list_args = list_args
        self.on_list = on_list
        self.on_event = on_event
        self.on_health = on_health
        self.stop = threading.Event()

    def run(self) -> None:
        backoff = 1.0
        while not self.stop.is_set():
            try:
                listed = self.list_call(**self.list_args)
                self.on_list(listed.items)
                self.on_health(True)
                backoff = 1.0
                stream = watch.Watch().stream(
                    self.list_call,
                    resource_version=listed.metadata.resource_version,
                    timeout_seconds=60,
                    _request_timeout=75,
                    **self.list_args,
                )
                for event in stream:
                    if self.stop.is_set():
                        return
                    self.on_event(event["type"], event["object"])
            except ApiException as exc:
                if exc.status == 410:  # resourceVersion too old: re-list at once
                    continue
                log.warning("watch failed: %s %s", exc.status, exc.reason)
            except Exception as exc:  # network errors of every kind: re-list after a pause
                log.warning("watch failed: %s", exc)
            else:
                continue  # the watch ended normally (server timeout): watch again
            self.on_health(False)
            self.stop.wait(backoff)
            backoff = min(backoff * 2, 30.0)

    def start(self) -> ListWatch:
        threading.Thread(target=self.run, name="list-watch", daemon=True).start()
        return self


def read_configmap(api: Any, namespace: str, name: str, key: str) -> str:
    configmap = api.read_namespaced_config_map(name, namespace)
    data = configmap.data or {}
    if key not in data:
        raise KeyError(f"ConfigMap {namespace}/{name} has no key {key!r} (keys: {', '.join(data) or 'none'})")
    return str(data[key])


def configmap_event(api: Any, configmap: Any, reason: str, message: str) -> None:
    """A Warning Event on the ConfigMap, where `kubectl describe configmap` shows it."""
    now = datetime.now(UTC)
    meta = configmap.metadata
    event = client.CoreV1Event(
        metadata=client.V1ObjectMeta(generate_name=f"{meta.name}.", namespace=meta.namespace),
        involved_object=client.V1ObjectReference(
            api_version="v1",
            kind="ConfigMap",
            name=meta.name,
            namespace=meta.namespace,
            uid=meta.uid,
            resource_version=meta.resource_version,
        ),
        reason=reason,
        message=message[:1024],
        type="Warning",
        count=1,
        first_timestamp=now,
        last_timestamp=now,
        source=client.V1EventSource(component="loadext"),
        reporting_component="loadext",
        reporting_instance=os.environ.get("HOSTNAME", "loadext"),
    )
    try:
        api.create_namespaced_event(meta.namespace, event)
    except ApiException as exc:
        log.warning(
            "could not record an Event on ConfigMap %s/%s: %s %s",
            meta.namespace,
            meta.name,
            exc.status,
            exc.reason,
        )


def annotate_node(api: Any, node: str, key: str, value: str) -> str:
    """Set one annotation on a Node (a merge patch of that key alone); "" on success."""
    try:
        api.patch_node(node, {"metadata": {"annotations": {key: value}}})
        return ""
    except ApiException as exc:
        return f"annotating node {node} failed: {exc.status} {exc.reason}"
