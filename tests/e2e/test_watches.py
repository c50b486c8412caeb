"""listwatch.ListWatch against the real API server: a list comes in pages (limit/continue, as
client-go's reflector asks), each page handed over as it comes, and the watch goes on from the
list's resourceVersion. (A continue token expiring midway is tested with a stand-in server in
tests/unit/test_watch.py: the real one expires tokens only when etcd compacts.)"""

from __future__ import annotations

import threading
from typing import Any

from kubernetes import client

from harness.cluster import Cluster
from harness.kubernetes import wait_until
from loadext.shared.objects import Pod
from loadext.sources.listwatch import ListWatch


def test_the_pod_list_comes_in_pages_and_the_watch_follows_it(cluster: Cluster, slug: str) -> None:
    core = cluster.core
    namespace = f"pages-{slug}"[:63]
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    container = client.V1Container(name="app", image="registry.k8s.io/pause:3.10")
    names = [f"p{i}" for i in range(7)]
    for name in names:
        spec = client.V1PodSpec(node_name="not-a-node", containers=[container], termination_grace_period_seconds=0)
        core.create_namespaced_pod(namespace, client.V1Pod(metadata=client.V1ObjectMeta(name=name), spec=spec))
    pages: list[tuple[list[str], bool, bool]] = []
    events: list[tuple[str, str]] = []
    synced = threading.Event()

    def on_page(items: list[Pod], first: bool, last: bool) -> None:
        pages.append((sorted(p.metadata.name for p in items if p.metadata), first, last))

    def on_event(kind: str, pod: Pod) -> None:
        events.append((kind, pod.metadata.name if pod.metadata else ""))

    watch: ListWatch[Any] = ListWatch(
        core.list_namespaced_pod, Pod, on_page, on_event, lambda healthy: healthy and synced.set(), namespace=namespace
    )
    watch.PAGE_SIZE = 3
    watch.start()
    try:
        assert synced.wait(30), "the list never completed"
        assert [(len(names_), first, last) for names_, first, last in pages] == [
            (3, True, False),
            (3, False, False),
            (1, False, True),
        ]
        assert sorted(name for page in pages for name in page[0]) == names
        core.delete_namespaced_pod("p3", namespace, grace_period_seconds=0)
        wait_until(lambda: ("DELETED", "p3") in events, "the watch to report the deletion", timeout=30)
        assert len(pages) == 3  # no re-list: the watch went on from the list's resourceVersion
    finally:
        watch.stop.set()
        core.delete_namespace(namespace)
