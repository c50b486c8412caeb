"""The Kubernetes API edge: creating Bindings, listing and watching Nodes, Pods and the config
ConfigMap, with the `kubernetes` client for the calls and msgspec for the bodies (shared/objects.py).

The client is synchronous; callers run these in worker threads and hand results back to the
event loop.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

import msgspec
import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from loadext.core.requests import BindingArgs, BoundPod
from loadext.shared.objects import ConfigMap, ListMeta, Node, Pod, PodStatus, Status, WatchEvent
from loadext.sources.connection import connection_cause

log = logging.getLogger(__name__)

Object = TypeVar("Object", Pod, Node, ConfigMap)  # what the watches keep
Item = TypeVar("Item", bound=msgspec.Struct)  # any decoded list item

# Seconds one API call may take (the watches' long polls excepted): without a bound, an API
# server that takes the connection and never answers holds a worker thread forever, and a
# few such binds starve the refresh of threads and keep shutdown waiting.
API_TIMEOUT = 10.0


class KubeError(Exception):
    """The Kubernetes API could not be used, said in one line that leads with the cause."""


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


def list_nodes(api: Any) -> list[Node]:
    """Every Node, once (explain --config); a failure is one KubeError line."""
    try:
        return list_objects(api.list_node, Node).items or []
    except API_ERRORS as exc:
        raise _failed(api, "listing Nodes", exc) from None


def _failed(api: Any, doing: str, exc: ApiException | urllib3.exceptions.HTTPError) -> KubeError:
    """A call the command cannot go on without, in one line that leads with the cause."""
    host = api.api_client.configuration.host
    if isinstance(exc, ApiException):
        return KubeError(f"{doing} failed: {exc.status} {exc.reason} ({host})")
    return KubeError(f"{doing} failed: {unanswered(exc, API_TIMEOUT)} to {host}")


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


class Bookmark(msgspec.Struct):
    metadata: ListMeta


class ObjectList(msgspec.Struct, Generic[Item]):
    metadata: ListMeta = msgspec.field(default_factory=ListMeta)
    items: list[Item] | None = None


def list_objects(list_call: Callable[..., Any], kind: type[Item], **list_args: Any) -> ObjectList[Item]:
    """A list call's reply decoded by msgspec (only the fields of `kind`), not into the client's
    models. Bounded by API_TIMEOUT unless `list_args` says otherwise: a list on a connection
    that never answers would otherwise hold a watch thread, which re-lists on errors, for good."""
    reply = list_call(_preload_content=False, **{"_request_timeout": API_TIMEOUT, **list_args})
    listed: ObjectList[Item] = msgspec.json.decode(reply.data, type=ObjectList[kind])  # type: ignore[valid-type]
    return listed


LIST_PAGE = 500  # objects per page, as client-go's reflector asks


def list_all(list_call: Callable[..., Any], kind: type[Item], **list_args: Any) -> list[Item]:
    """Every object of a list, page by page; a continue token that expires midway (410 Gone)
    starts the list again, once, then the error stands."""
    for attempt in (1, 2):
        items: list[Item] = []
        token: str | None = None
        try:
            while True:
                page = list_objects(list_call, kind, limit=LIST_PAGE, _continue=token, **list_args)
                items += page.items or []
                if not page.metadata.continue_:
                    return items
                token = page.metadata.continue_
        except ApiException as exc:
            if exc.status != 410 or attempt == 2:
                raise
    raise AssertionError("unreachable")


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


def whole_lists(on_list: Callable[[list[Object]], None]) -> Callable[[list[Object], bool, bool], None]:
    """An on_page for a kind whose full list is small (Nodes' facts, the ConfigMap): the
    pages gathered, and the whole list handed over once its last page came."""
    gathered: list[Object] = []

    def on_page(items: list[Object], first: bool, last: bool) -> None:
        if first:
            gathered.clear()
        gathered.extend(items)
        if last:
            on_list(gathered.copy())
            gathered.clear()

    return on_page


class ListWatch(Generic[Object]):
    """List, then watch from that resourceVersion, and watch again from the last one seen when
    the server ends the watch; re-list on 410 Gone or any error, with a capped backoff.
    `on_page` gets the list page by page (PAGE_SIZE objects, as client-go's reflector asks
    for), told which page is the first and which the last: the full list replaces whatever was
    told before, deletions included, and a list restarted midway (its continue token expired:
    410) starts again at a first page. `on_event` gets each later change, `on_health` True
    after each successful list and False on each failure.

    Pages keep the high-water flat: 150 000 pods are never one body, nor decoded at once.
    The kubernetes client makes the calls (auth, TLS, kubeconfig), but the bodies are decoded by
    msgspec into `kind`: only the fields loadext reads, in C, line by line of the stream."""

    PAGE_SIZE = 500

    def __init__(
        self,
        list_call: Callable[..., Any],
        kind: type[Object],
        on_page: Callable[[list[Object], bool, bool], None],
        on_event: Callable[[str, Object], None],
        on_health: Callable[[bool], None] = lambda healthy: None,
        **list_args: Any,
    ) -> None:
        self.list_call = list_call
        self.kind: type[Object] = kind
        self.list_args = list_args
        self.on_page: Callable[[list[Object], bool, bool], None] = on_page
        self.on_event: Callable[[str, Object], None] = on_event
        self.on_health = on_health
        self.stop = threading.Event()
        self._object: msgspec.json.Decoder[Object] = msgspec.json.Decoder(kind)
        self._event = msgspec.json.Decoder(WatchEvent)
        self._status = msgspec.json.Decoder(Status)
        self._bookmark = msgspec.json.Decoder(Bookmark)

    def run(self) -> None:
        backoff = 1.0
        while not self.stop.is_set():
            try:
                version = self._list()
                if version is None:  # the continue token expired midway: list again from the start
                    continue
                self.on_health(True)
                backoff = 1.0
                while version and not self.stop.is_set():
                    version = self._watch(version)
                if self.stop.is_set():
                    return
                continue  # 410 Gone: the version is too old, re-list at once
            except ApiException as exc:
                log.warning("watch failed: %s %s", exc.status, exc.reason)
            except Exception as exc:  # network and decoding errors of every kind: re-list after a pause
                log.warning("watch failed: %s", exc)
            self.on_health(False)
            self.stop.wait(backoff)
            backoff = min(backoff * 2, 30.0)

    def _list(self) -> str | None:
        """The full list, page by page to on_page; its resourceVersion, or None when the
        server expired the continue token before the last page (410 Gone)."""
        token: str | None = None
        while True:
            try:
                page = list_objects(self.list_call, self.kind, limit=self.PAGE_SIZE, _continue=token, **self.list_args)
            except ApiException as exc:
                if exc.status == 410 and token is not None:
                    log.info("listing again from the start: the list's continue token expired (410 Gone)")
                    return None
                raise
            self.on_page(page.items or [], token is None, not page.metadata.continue_)
            if not page.metadata.continue_:
                return page.metadata.resourceVersion
            token = page.metadata.continue_

    def _watch(self, version: str) -> str:
        """One watch request from `version`, until the server ends it (its timeout); returns the
        last resourceVersion seen, to watch on from, or "" where the server said 410 Gone."""
        reply = self.list_call(
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=60,
            _request_timeout=75,
            _preload_content=False,
            **self.list_args,
        )
        try:
            for line in _lines(reply):
                if self.stop.is_set():
                    break
                if not line:
                    continue
                event = self._event.decode(line)
                if event.type == "ERROR":
                    status = self._status.decode(event.object)
                    if status.code == 410:
                        return ""
                    raise RuntimeError(f"watch error {status.code} {status.reason}: {status.message}")
                if event.type == "BOOKMARK":  # only metadata.resourceVersion: no object of `kind`
                    version = self._bookmark.decode(event.object).metadata.resourceVersion or version
                    continue
                obj = self._object.decode(event.object)
                version = (obj.metadata.resourceVersion if obj.metadata is not None else "") or version
                self.on_event(event.type, obj)
        finally:
            reply.release_conn()
        return version

    def start(self) -> ListWatch[Object]:
        threading.Thread(target=self.run, name="list-watch", daemon=True).start()
        return self


def _lines(reply: Any) -> Iterator[bytes]:
    """A watch stream's lines, as bytes for msgspec. (The client's iter_resp_lines decoded each
    line to a str and copied what followed it; the API server sends one event per chunk.)"""
    pending = b""
    for chunk in reply.stream(amt=None, decode_content=False):
        if b"\n" not in chunk:
            pending += chunk
            continue
        *lines, pending = (pending + chunk).split(b"\n") if pending else chunk.split(b"\n")
        yield from lines


def read_configmap(api: Any, namespace: str, name: str, key: str) -> str:
    try:
        configmap = api.read_namespaced_config_map(name, namespace, _request_timeout=API_TIMEOUT)
    except API_ERRORS as exc:
        raise _failed(api, f"reading ConfigMap {namespace}/{name}", exc) from None
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
