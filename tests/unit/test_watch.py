"""listwatch.ListWatch with a stand-in for one list call of the kubernetes client (the end-to-end
suite runs it against the real API server): what reaches on_list and on_event, and which
resourceVersion each request asks for, when the server ends a watch, sends a bookmark, says
410 Gone, or sends a body that does not decode."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Iterator
from typing import Any

import msgspec
import orjson
import pytest
from kubernetes.client.exceptions import ApiException

from loadext.core.requests import BoundPod
from loadext.http.protocol import Codec
from loadext.shared.objects import Node, Pod
from loadext.sources.kube import API_TIMEOUT, bound_pod
from loadext.sources.listwatch import ListWatch, whole_lists
from loadext.sources.watches import Handoff, Unchanged


class Reply:
    """What the client returns with _preload_content=False: .data for a list, a stream for a watch."""

    def __init__(self, body: bytes) -> None:
        self.data = body

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        yield from (self.data[i : i + 7] for i in range(0, len(self.data), 7))  # lines split across chunks

    def release_conn(self) -> None:
        pass


def pod(name: str, version: str, node: str = "n1") -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": name, "resourceVersion": version}, "spec": {"nodeName": node}}


def event(kind: str, obj: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": kind, "object": obj}) + b"\n"


class Server:
    """Answers each call from a script; records the versions asked for; stops the watch at the end."""

    def __init__(self, script: list[bytes | ApiException], watch: ListWatch[Pod] | None = None) -> None:
        self.script = script
        self.calls: list[tuple[str, str]] = []
        self.list_timeouts: list[float | None] = []
        self.watch = watch

    def __call__(self, **args: Any) -> Reply:
        assert args.pop("_preload_content") is False
        if args.get("watch"):
            self.calls.append(("watch", args["resource_version"]))
        else:
            assert args["limit"] == ListWatch.PAGE_SIZE
            self.list_timeouts.append(args.pop("_request_timeout", None))
            self.calls.append(("list", args["_continue"] or ""))
        if not self.script:
            assert self.watch is not None
            self.watch.stop.set()
            return Reply(b"")
        answer = self.script.pop(0)
        if isinstance(answer, ApiException):
            raise answer
        return Reply(answer)


def run(script: list[bytes | ApiException]) -> tuple[Server, list[tuple[str, Any]]]:
    seen: list[tuple[str, Any]] = []
    server = Server(script)
    watch = ListWatch(
        server,
        Pod,
        whole_lists(lambda pods: seen.append(("list", [p.metadata.name for p in pods if p.metadata]))),
        lambda kind, p: seen.append((kind, p.metadata.name if p.metadata else None)),
        field_selector="spec.nodeName!=",
    )
    watch.stop.wait = lambda timeout=None: False  # type: ignore[method-assign]  # no backoff pauses
    server.watch = watch
    thread = threading.Thread(target=watch.run)
    thread.start()
    thread.join(10)
    assert not thread.is_alive()
    return server, seen


def listing(version: str, *pods: dict[str, Any], more: str = "") -> bytes:
    return orjson.dumps({"metadata": {"resourceVersion": version, "continue": more}, "items": list(pods)})


def test_a_list_comes_in_pages_and_an_expired_token_starts_it_over_without_losing_pods() -> None:
    """As client-go's reflector: limit/continue; a continue token the server no longer
    honours (410 Gone: etcd compacted past the list's version) lists again from the start,
    and the pages of the broken list never make a list of their own."""
    expired = ApiException(status=410, reason="Gone")
    pages: list[tuple[list[str], bool, bool]] = []
    server = Server(
        [
            listing("10", pod("a", "9"), pod("b", "9"), more="t1"),
            listing("10", pod("c", "9"), more="t2"),
            expired,
            listing("20", pod("a", "9"), more="t3"),
            listing("20", pod("c", "9"), pod("d", "19")),
            event("ADDED", pod("e", "21")),
        ]
    )
    watch = ListWatch(
        server,
        Pod,
        lambda items, first, last: pages.append(([p.metadata.name for p in items if p.metadata], first, last)),
        lambda kind, p: pages.append(([kind], False, False)),
    )
    server.watch = watch
    watch.run()
    lists = [("list", ""), ("list", "t1"), ("list", "t2"), ("list", ""), ("list", "t3")]
    assert server.calls == [*lists, ("watch", "20"), ("watch", "21")]
    assert server.list_timeouts == [API_TIMEOUT] * len(lists)  # a list that never ends would stop the watch
    assert pages == [
        (["a", "b"], True, False),
        (["c"], False, False),
        (["a"], True, False),  # the broken list's pages are dropped by the next first page
        (["c", "d"], False, True),
        (["ADDED"], False, False),
    ]
    whole: list[list[str]] = []
    gather = whole_lists(lambda items: whole.append(list(items)))
    for names, first, last in pages[:4]:
        gather(names, first, last)  # type: ignore[arg-type]
    assert whole == [["a", "c", "d"]]


def test_watch_goes_on_from_the_last_version_seen_and_bookmarks_only_move_it() -> None:
    server, seen = run(
        [
            listing("10", pod("a", "9")),
            event("ADDED", pod("b", "11")) + b"\n" + event("BOOKMARK", {"metadata": {"resourceVersion": "15"}}),
            event("MODIFIED", pod("b", "16")) + event("DELETED", pod("a", "17")),
        ]
    )
    assert seen == [("list", ["a"]), ("ADDED", "b"), ("MODIFIED", "b"), ("DELETED", "a")]
    # the server ended each watch (its timeout): no re-list, the next watch starts where the last left off
    assert server.calls == [("list", ""), ("watch", "10"), ("watch", "15"), ("watch", "17")]


def test_gone_relists_and_a_bad_body_relists_after_a_pause() -> None:
    gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"}
    server, seen = run(
        [
            listing("10", pod("a", "9")),
            event("ERROR", gone),
            listing("20", pod("a", "9"), pod("c", "19")),
            b'{"type": "ADDED", "object": {"metadata": {"name": 7}}}\n',
            listing("30"),
        ]
    )
    assert seen == [("list", ["a"]), ("list", ["a", "c"]), ("list", [])]
    assert server.calls == [("list", ""), ("watch", "10"), ("list", ""), ("watch", "20"), ("list", ""), ("watch", "30")]


def test_a_bookmark_is_no_object_of_the_kind_watched() -> None:
    """A Node bookmark has no name, which a Node must have: it moves the version only."""
    seen: list[str] = []
    node = {"metadata": {"name": "n1", "resourceVersion": "12"}}
    server = Server([listing("10"), event("BOOKMARK", {"metadata": {"resourceVersion": "11"}}) + event("ADDED", node)])
    watch = ListWatch(
        server, Node, whole_lists(lambda nodes: seen.append("list")), lambda kind, n: seen.append(n.metadata.name)
    )
    watch.on_health = lambda healthy: seen.append(f"healthy={healthy}")
    server.watch = watch  # type: ignore[assignment]
    watch.run()
    assert seen == ["list", "healthy=True", "n1"]
    assert server.calls == [("list", ""), ("watch", "10"), ("watch", "12")]


def test_times_go_writes_as_null_decode_on_both_paths() -> None:
    """Go marshals a zero metav1.Time as null (a condition set without a time, an object
    template): neither a watched pod nor a scheduler's request may fail on it."""
    raw = {
        "metadata": {"name": "p", "uid": "u", "creationTimestamp": None},
        "spec": {"nodeName": "n1"},
        "status": {"conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": None}]},
    }
    bound = bound_pod(msgspec.json.decode(orjson.dumps(raw), type=Pod))
    assert bound is not None and bound.node == "n1" and bound.placed_at == 0.0
    request = Codec().decode_extender_args(orjson.dumps({"Pod": raw, "NodeNames": ["n1"]}))
    assert request.args.pod is not None and request.args.pod.uid == "u"


def test_decoded_objects_stay_out_of_the_garbage_collector() -> None:
    """A 5000-node watch keeps its decoded objects alive; the collector must not walk them
    (gc=False structs, tuples rather than lists), so a full collection stays short."""
    raw = {
        "metadata": {"name": "n1", "labels": {"pool": "a"}},
        "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}], "allocatable": {"cpu": "4"}},
    }
    node = msgspec.json.decode(orjson.dumps(raw), type=Node)
    assert node.ips() == ("10.0.0.1",)
    gc.collect()  # a tuple of untracked objects is untracked at its first collection
    parts: list[object] = [node, node.metadata, node.status, node.metadata.labels, node.allocatable()]
    parts += [node.status.addresses, *node.status.addresses] if node.status and node.status.addresses else []
    assert [gc.is_tracked(part) for part in parts] == [False] * 7


def test_the_handoff_runs_a_threads_calls_on_the_loop_in_order_a_batch_per_wakeup(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> tuple[list[tuple[int, bool]], int]:
        loop = asyncio.get_running_loop()
        handoff, ran, wakeups, done = Handoff(loop), [], 0, asyncio.Event()
        loop_thread = threading.get_ident()
        original = loop.call_soon_threadsafe

        def counted(*args: Any) -> Any:
            nonlocal wakeups
            wakeups += 1
            return original(*args)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]

        def record(i: int) -> None:
            if i == 3:
                raise ValueError("a bad event")
            ran.append((i, threading.get_ident() == loop_thread))
            if i == 999:
                done.set()

        def watch_thread() -> None:
            for i in range(1000):
                handoff(record, i)

        await asyncio.to_thread(watch_thread)
        await asyncio.wait_for(done.wait(), 10)
        return ran, wakeups

    ran, wakeups = asyncio.run(scenario())
    assert [i for i, _ in ran] == [i for i in range(1000) if i != 3]  # in order; one failure skips only itself
    assert all(on_loop for _, on_loop in ran)
    assert wakeups < 1000  # calls made while the loop had not run yet went in one batch
    assert "handling a watch event failed" in caplog.text


def test_an_event_that_changes_nothing_loadext_keeps_is_dropped_in_the_watch_thread() -> None:
    def bound(**status: Any) -> BoundPod:
        raw = {**pod("a", "1"), "status": {"phase": "Running", **status}}
        decoded = bound_pod(msgspec.json.decode(orjson.dumps(raw), type=Pod))
        assert decoded is not None
        return decoded

    unchanged = Unchanged()
    assert not unchanged.seen(bound())  # the first event of a pod is news
    ready = {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-07T07:00:00Z"}]}
    assert unchanged.seen(bound(**ready))  # a kubelet's status update: nothing loadext keeps
    assert not unchanged.seen(bound(phase="Succeeded"))  # finished: news
    assert unchanged.seen(bound(phase="Failed"))  # finished still, as loadext keeps it
    unchanged.clear()  # a new list replaced what the events told
    assert not unchanged.seen(bound(phase="Failed"))
    unchanged.forget("a")
    assert not unchanged.seen(bound(phase="Failed"))
