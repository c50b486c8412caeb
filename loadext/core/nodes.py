"""Which nodes exist, with their IPs, labels and allocatable: the NodeDirectory.

It learns them from the Node list/watch and from the scheduler's requests (names, and in
non-cache mode the full Node objects). identity.py reads it to match a series' label value
to a node.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping

from loadext.core.addresses import normalise_address


class NodeDirectory:
    """Node names and their IPs, as learnt from the API or from scheduler requests.

    Nodes learnt only from requests are forgotten after `ttl` seconds unseen, so a deleted node
    stops being reported as unmapped. Nodes from the API watch stay until the watch deletes them.

    Recording runs on every scheduling call, so it is O(1), and reading folds what was recorded.
    A scheduler under load names the same candidates call after call: a list that looks like the
    last one kept (same length, same first and last node) within `sample` seconds is not kept
    again. Without that, 900 calls/s x 500 names piled up 2 million entries per refresh and the
    fold stalled the event loop for 250 ms (measured); now it is at most 1/`sample` lists/s.
    """

    def __init__(self, ttl: float = 600.0, clock: Callable[[], float] = time.monotonic, sample: float = 0.05) -> None:
        self._ttl = ttl
        self._sample = sample
        self._last: tuple[float, list[str]] = (float("-inf"), [])
        self._clock = clock
        self._seen: dict[str, float] = {}  # name -> when last named in a request
        self._seen_raw: dict[str, tuple[str, ...]] = {}  # name -> addresses as a request gave them
        self._seen_ips: dict[str, tuple[str, ...]] = {}
        self._watched: dict[str, tuple[str, ...]] = {}
        self._by_ip: dict[str, str] | None = None
        self._pending: deque[tuple[float, list[str]]] = deque(maxlen=1024)
        self._labels: dict[str, Mapping[str, str]] = {}
        self._allocatable: dict[str, Mapping[str, float]] = {}  # name -> {"cpu": cores, "memory": bytes}
        self.labels_version = 0  # bumps when any node's labels change: pool assignment is stale
        self.allocatable_version = 0  # bumps when any node's allocatable changes: herd verdicts are stale
        self.addresses_version = 0  # bumps when any node's IPs change: address identities are stale

    def _fold(self) -> None:
        while self._pending:
            when, names = self._pending.popleft()
            self._seen.update(dict.fromkeys(names, when))

    def observe(self, names: list[str], addresses: Mapping[str, tuple[str, ...]] | None = None) -> None:
        """Record the nodes named in a request; addresses come with non-cache requests only.

        O(1) on the scheduling path: the list is queued (unless it repeats the last one, see
        the class) and folded in when someone reads the directory (the mapping check, explain).
        Under a flood of distinct lists, the oldest queued ones drop."""
        now = self._clock()
        kept_at, kept = self._last
        if (
            now - kept_at >= self._sample
            or len(names) != len(kept)
            or (names and (names[0] != kept[0] or names[-1] != kept[-1]))
        ):
            self._last = (now, names)
            self._pending.append((now, names))
        for name, raw in (addresses or {}).items():
            if self._seen_raw.get(name) != raw:
                self._seen_raw[name] = raw
                self._seen_ips[name] = _normalised(raw)
                self._addresses_changed()

    def upsert(self, name: str, addresses: Iterable[str], labels: Mapping[str, str] | None = None) -> None:
        """A Node added or changed, from the API watch."""
        ips = _normalised(addresses)
        if self._watched.get(name) != ips:
            self._watched[name] = ips
            self._addresses_changed()
        if labels is not None:
            self.set_labels(name, labels)

    def set_labels(self, name: str, labels: Mapping[str, str]) -> None:
        if self._labels.get(name) != labels:
            self._labels[name] = dict(labels)
            self.labels_version += 1

    def set_allocatable(self, name: str, allocatable: Mapping[str, float]) -> None:
        if self._allocatable.get(name) != allocatable:
            self._allocatable[name] = allocatable
            self.allocatable_version += 1

    def allocatable(self, name: str) -> Mapping[str, float] | None:
        return self._allocatable.get(name)

    def labelled(self) -> Mapping[str, Mapping[str, str]]:
        """Node name -> labels, for the nodes whose labels loadext has seen."""
        return self._labels

    def delete(self, name: str) -> None:
        if self._watched.pop(name, None) is not None:
            self._addresses_changed()
        if self._allocatable.pop(name, None) is not None:
            self.allocatable_version += 1
        if self._labels.pop(name, None) is not None:
            self.labels_version += 1
        self._forget(name)

    def _forget(self, name: str) -> None:
        self._seen.pop(name, None)
        self._seen_raw.pop(name, None)
        if self._seen_ips.pop(name, None):
            self._addresses_changed()

    def replace_all(
        self, nodes: Mapping[str, Iterable[str]], labels: Mapping[str, Mapping[str, str]] | None = None
    ) -> None:
        """A fresh list from the API (after a watch restart) replaces what the watch knew."""
        self._watched = {name: _normalised(addresses) for name, addresses in nodes.items()}
        self._addresses_changed()
        for name, node_labels in (labels or {}).items():
            self.set_labels(name, node_labels)

    def _addresses_changed(self) -> None:
        self._by_ip = None
        self.addresses_version += 1

    def names(self) -> set[str]:
        self._fold()
        cutoff = self._clock() - self._ttl
        for name in [n for n, seen in self._seen.items() if seen < cutoff]:
            self._forget(name)
        return set(self._watched) | set(self._seen)

    def addresses(self, name: str) -> tuple[str, ...]:
        return self._watched.get(name) or self._seen_ips.get(name) or ()

    def name_for_ip(self, ip: str) -> str | None:
        if self._by_ip is None:
            self._by_ip = {
                ip: name for source in (self._seen_ips, self._watched) for name, ips in source.items() for ip in ips
            }
        return self._by_ip.get(ip)

    def known(self, name: str) -> bool:
        """Whether loadext knows a node of this name (watched, or named in a request)."""
        self._fold()
        return name in self._watched or name in self._seen


def _normalised(addresses: Iterable[str]) -> tuple[str, ...]:
    return tuple(ip for ip in (normalise_address(a) for a in addresses) if ip)
