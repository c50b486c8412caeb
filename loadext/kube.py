"""The Kubernetes API edge: creating Bindings and watching Nodes, with the `kubernetes` client.

The client is synchronous; callers run these in worker threads and hand results back to the
event loop.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from loadext.protocol import BindingArgs

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
        failure = (
            f"binding {args.pod_namespace}/{args.pod_name} to {args.node} failed: {exc.status} {exc.reason}"
        )
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


class NodeWatcher:
    """List then watch Nodes; re-list on 410 Gone or any error, with a capped backoff."""

    def __init__(
        self,
        api: Any,
        on_list: Callable[[dict[str, Iterable[str]]], None],
        on_event: Callable[[str, str, list[str]], None],
    ) -> None:
        self.api = api
        self.on_list = on_list
        self.on_event = on_event
        self.stop = threading.Event()

    def run(self) -> None:
        backoff = 1.0
        while not self.stop.is_set():
            try:
                listed = self.api.list_node()
                self.on_list({n.metadata.name: node_addresses(n) for n in listed.items})
                backoff = 1.0
                stream = watch.Watch().stream(
                    self.api.list_node,
                    resource_version=listed.metadata.resource_version,
                    timeout_seconds=60,
                    _request_timeout=75,
                )
                for event in stream:
                    if self.stop.is_set():
                        return
                    node = event["object"]
                    self.on_event(event["type"], node.metadata.name, node_addresses(node))
            except ApiException as exc:
                if exc.status == 410:  # resourceVersion too old: re-list at once
                    continue
                log.warning("node watch failed: %s %s", exc.status, exc.reason)
            except Exception as exc:  # network errors of every kind: re-list after a pause
                log.warning("node watch failed: %s", exc)
            else:
                continue  # the watch ended normally (server timeout): watch again
            self.stop.wait(backoff)
            backoff = min(backoff * 2, 30.0)
