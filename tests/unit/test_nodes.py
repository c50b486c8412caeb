"""NodeDirectory's recording of the nodes named in requests: every distinct list is seen, and a
scheduler repeating the same candidates thousands of times a second costs the fold nothing."""

from __future__ import annotations

from loadext.core.nodes import NodeDirectory


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
