"""Lists and watches of the Kubernetes API, as client-go's reflector does them: a list page by
page (limit/continue), then a watch from its resourceVersion, again after each end, and a new
list on 410 Gone or any error. The kubernetes client makes the calls (auth, TLS, kubeconfig);
msgspec decodes the bodies into the few fields loadext reads (shared/objects.py).

Blocking: the watches run in threads of their own (watches.py), the one-off lists in worker
threads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

import msgspec
from kubernetes.client.exceptions import ApiException

from loadext.shared.objects import ConfigMap, ListMeta, Node, Pod, Status, WatchEvent
from loadext.sources.kube import API_ERRORS, API_TIMEOUT, unusable

log = logging.getLogger(__name__)

Object = TypeVar("Object", Pod, Node, ConfigMap)  # what the watches keep
Item = TypeVar("Item", bound=msgspec.Struct)  # any decoded list item


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


def list_nodes(api: Any) -> list[Node]:
    """Every Node, once (explain --config, rebalance --once); a failure is one KubeError line."""
    try:
        return list_all(api.list_node, Node)
    except API_ERRORS as exc:
        raise unusable(api, "listing Nodes", exc) from None


LIST_PAGE = 500  # objects per page, as client-go's reflector asks


def pages(
    list_call: Callable[..., Any], kind: type[Item], page_size: int = LIST_PAGE, **list_args: Any
) -> Iterator[ObjectList[Item]]:
    """A list, page by page, following its continue tokens. A token the server expired midway
    raises ApiException 410 Gone from the next page: the list must start over."""
    token: str | None = None
    while True:
        page = list_objects(list_call, kind, limit=page_size, _continue=token, **list_args)
        yield page
        token = page.metadata.continue_
        if not token:
            return


def list_all(list_call: Callable[..., Any], kind: type[Item], **list_args: Any) -> list[Item]:
    """Every object of a list; a list whose continue token expires (410 Gone) starts again,
    once, then the error stands."""
    for attempt in (1, 2):
        try:
            return [item for page in pages(list_call, kind, **list_args) for item in page.items or []]
        except ApiException as exc:
            if exc.status != 410 or attempt == 2:
                raise
    raise AssertionError("unreachable")


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

    PAGE_SIZE = LIST_PAGE

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
        first = True
        try:
            for page in pages(self.list_call, self.kind, self.PAGE_SIZE, **self.list_args):
                last = not page.metadata.continue_
                self.on_page(page.items or [], first, last)
                if last:
                    return page.metadata.resourceVersion
                first = False
        except ApiException as exc:
            if exc.status == 410 and not first:
                log.info("listing again from the start: the list's continue token expired (410 Gone)")
                return None
            raise
        raise AssertionError("unreachable: the last page returns")

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
