"""NodeDirectory's recording of the nodes named in requests: every distinct list is seen, and a
scheduler repeating the same candidates thousands of times a second costs the fold nothing."""

from __future__ import annotations

from loadext.core.nodes import NodeDirectory
from loadext.core.sorting import sorted_in_slices


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_repeated_lists_are_not_queued_again_within_the_sample() -> None:
    clock = Clock()
    directory = NodeDirectory(clock=clock, sample=0.05)
    names = [f"node-{i}" for i in range(500)]
    for _ in range(100_000):  # 100k calls in 0.1 s, as a flood of identical candidate lists
        directory.observe(list(names))
        clock.now += 1e-6
    assert len(directory._pending) <= 3
    assert directory.names() == set(names)


def test_distinct_lists_are_all_seen_even_at_once() -> None:
    clock = Clock()
    directory = NodeDirectory(clock=clock)
    directory.observe(["a", "b", "c"])
    directory.observe(["a", "b"])  # shorter
    directory.observe(["d", "b"])  # same length, other first node
    directory.observe(["d", "e"])  # same first, other last
    assert directory.names() == {"a", "b", "c", "d", "e"}


def test_unseen_nodes_are_forgotten_after_the_ttl() -> None:
    clock = Clock()
    directory = NodeDirectory(ttl=60, clock=clock)
    directory.observe(["old"])
    clock.now += 30
    directory.observe(["new"])
    clock.now += 40
    assert directory.names() == {"new"}


def test_request_names_are_capped_the_least_recently_named_forgotten_first() -> None:
    clock = Clock()
    directory = NodeDirectory(clock=clock, cap=4)
    directory.observe(["a", "b", "c"], labels={"a": {"zone": "x"}}, allocatable={"a": {"cpu": 4.0}})
    clock.now += 1
    directory.observe(["d", "a"])  # a named again: now b is the least recent
    clock.now += 1
    directory.observe(["e"])
    assert directory.names() == {"a", "c", "d", "e"}
    assert directory.take_forgotten() == 1
    assert directory.take_forgotten() == 0  # counted once
    assert directory.labelled() == {"a": {"zone": "x"}}
    clock.now += 1
    directory.observe(["f", "g", "h", "i", "j", "k"])  # longer than the cap: its first four are kept
    assert directory.names() == {"f", "g", "h", "i"}
    assert directory.take_forgotten() == 2 + 4  # the list's own two, and the four it pushed out
    assert directory.labelled() == {} and directory.allocatable("a") is None  # a's details went with it


def test_with_the_node_watch_only_its_nodes_are_known() -> None:
    directory = NodeDirectory(clock=Clock())
    directory.observe(["from-a-request"], labels={"from-a-request": {"zone": "x"}})
    assert directory.names() == {"from-a-request"}
    directory.replace_all({"watched": ["10.0.0.1"]}, {"watched": {"zone": "y"}})
    directory.observe(["watched", "made-up"], labels={"made-up": {"zone": "z"}}, allocatable={"made-up": {"cpu": 1.0}})
    assert directory.names() == {"watched"}
    assert directory.labelled() == {"watched": {"zone": "y"}}
    assert directory.allocatable("made-up") is None
    assert not directory.known("made-up")


def test_the_names_are_built_again_only_when_they_change() -> None:
    clock = Clock()
    directory = NodeDirectory(clock=clock)
    directory.observe(["a", "b"])
    first, version = directory.names(), directory.names_version
    clock.now += 1
    directory.observe(["b", "a"])  # the same nodes named again
    assert directory.names() is first and directory.names_version == version
    clock.now += 1
    directory.observe(["c"])
    assert directory.names() == {"a", "b", "c"} and directory.names_version > version


def test_sorting_in_slices_sorts_as_sorted_does() -> None:
    names = [f"node-{(i * 7919) % 10007:05d}" for i in range(10007)]
    assert sorted_in_slices(names, size=100) == sorted(names)
    assert sorted_in_slices(names[:50], size=100) == sorted(names[:50])
