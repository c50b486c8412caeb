"""Which nodes exist, with their IPs, labels and allocatable: the NodeDirectory.

It learns them from the Node list/watch and from the scheduler's requests (names, and in
non-cache mode the full Node objects). identity.py reads it to match a series' label value
to a node.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping

from loadext.core.addresses import normalise_address

REQUEST_NAMES_CAP = 50_000


class NodeDirectory:
    """Node names and their IPs, as learnt from the API or from scheduler requests.

    With the Node watch, the watch's nodes are the directory: a name only a request gives is
    not kept. Without it, nodes are learnt from requests, kept until `ttl` seconds unseen and
    at most `cap` of them, the least recently named forgotten first (every refresh round
    reports on every known node: a request naming 200 000 made-up nodes must not make each
    round that long). Recording is O(1), on every scheduling call; reading folds what was
    recorded, and a list that looks like the last one kept (same length, same first and last
    node) within `sample` seconds is not kept again (a scheduler under load names the same
    candidates call after call)."""

    def __init__(
        self,
        ttl: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
        sample: float = 0.05,
        cap: int = REQUEST_NAMES_CAP,
    ) -> None:
        self._ttl = ttl
        self._sample = sample
        self._cap = cap
        self._last: tuple[float, list[str]] = (float("-inf"), [])
        self._clock = clock
        self._seen: OrderedDict[str, float] = OrderedDict()  # name -> when last named, least recent first
        self._seen_raw: dict[str, tuple[str, ...]] = {}  # name -> addresses as a request gave them
        self._seen_ips: dict[str, tuple[str, ...]] = {}
        self._watched: dict[str, tuple[str, ...]] = {}
        self._listed = False  # the Node watch listed once: it alone says which nodes exist
        self._by_ip: dict[str, str] | None = None
        self._pending: deque[tuple[float, list[str]]] = deque(maxlen=1024)
        self._labels: dict[str, Mapping[str, str]] = {}
        self._allocatable: dict[str, Mapping[str, float]] = {}  # name -> {"cpu": cores, "memory": bytes}
        self._names: tuple[int, frozenset[str]] = (-1, frozenset())
        self._forgotten = 0  # request-only names dropped over the cap, since take_forgotten
        self.labels_version = 0  # bumps when any node's labels change: pool assignment is stale
        self.allocatable_version = 0  # bumps when any node's allocatable changes: herd verdicts are stale
        self.addresses_version = 0  # bumps when any node's IPs change: address identities are stale
        self.names_version = 0  # bumps when the set of known names changes

    def _fold(self) -> None:
        seen, watched = self._seen, self._watched
        while self._pending:
            when, names = self._pending.popleft()
            for name in names:
                if name in seen:
                    seen.move_to_end(name)
                elif name not in watched:
                    self.names_version += 1
                seen[name] = when
        while len(seen) > self._cap:
            self._forget(next(iter(seen)))
            self._forgotten += 1

    def observe(
        self,
        names: list[str],
        addresses: Mapping[str, tuple[str, ...]] | None = None,
        labels: Mapping[str, Mapping[str, str]] | None = None,
        allocatable: Mapping[str, Mapping[str, float]] | None = None,
    ) -> None:
        """Record the nodes named in a request (addresses, labels and allocatable: non-cache
        requests only). O(1): the list is queued (unless it repeats the last one) and folded in
        when the directory is read; under a flood of distinct lists the oldest queued drop.
        Once the Node watch has listed, a request tells nothing the watch does not."""
        if self._listed:
            return
        if len(names) > self._cap:
            self._forgotten += len(names) - self._cap
            names = names[: self._cap]
            kept = set(names)
            addresses = {n: a for n, a in (addresses or {}).items() if n in kept}
            labels = {n: v for n, v in (labels or {}).items() if n in kept}
            allocatable = {n: v for n, v in (allocatable or {}).items() if n in kept}
        now = self._clock()
        kept_at, last = self._last
        if (
            now - kept_at >= self._sample
            or len(names) != len(last)
            or (names and (names[0] != last[0] or names[-1] != last[-1]))
        ):
            self._last = (now, names)
            self._pending.append((now, names))
        for name, raw in (addresses or {}).items():
            if self._seen_raw.get(name) != raw:
                self._seen_raw[name] = raw
                self._seen_ips[name] = _normalised(raw)
                self._addresses_changed()
        for name, node_labels in (labels or {}).items():
            self.set_labels(name, node_labels)
        for name, quantities in (allocatable or {}).items():
            self.set_allocatable(name, quantities)

    def upsert(self, name: str, addresses: Iterable[str], labels: Mapping[str, str] | None = None) -> None:
        """A Node added or changed, from the API watch."""
        ips = _normalised(addresses)
        if name not in self._watched and name not in self._seen:
            self.names_version += 1
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
            self.names_version += 1
        self._forget(name)

    def _forget(self, name: str) -> None:
        """Forget a request-named node (and a deleted one): a name the watch still has stays."""
        if self._seen.pop(name, None) is not None:
            self.names_version += 1
        self._seen_raw.pop(name, None)
        if self._seen_ips.pop(name, None):
            self._addresses_changed()
        if name in self._watched:
            return
        if self._allocatable.pop(name, None) is not None:
            self.allocatable_version += 1
        if self._labels.pop(name, None) is not None:
            self.labels_version += 1

    def replace_all(
        self, nodes: Mapping[str, Iterable[str]], labels: Mapping[str, Mapping[str, str]] | None = None
    ) -> None:
        """A fresh list from the API (after a watch restart) replaces what the watch knew, and
        from now on the watch alone says which nodes exist."""
        gone = [name for name in (*self._watched, *self._seen) if name not in nodes]
        self._listed = True
        self._pending.clear()
        self._watched = {name: _normalised(addresses) for name, addresses in nodes.items()}
        self._seen.clear()
        self._seen_raw.clear()
        self._seen_ips.clear()
        for name in gone:
            self._forget(name)
        self._addresses_changed()
        self.names_version += 1
        for name, node_labels in (labels or {}).items():
            self.set_labels(name, node_labels)

    def _addresses_changed(self) -> None:
        self._by_ip = None
        self.addresses_version += 1

    def names(self) -> frozenset[str]:
        """Every known name: built again only when the set changed."""
        self._fold()
        seen, cutoff = self._seen, self._clock() - self._ttl
        while seen and next(iter(seen.values())) < cutoff:
            self._forget(next(iter(seen)))
        version, names = self._names
        if version != self.names_version:
            names = frozenset(self._watched.keys() | seen.keys())
            self._names = (self.names_version, names)
        return names

    def take_forgotten(self) -> int:
        """How many request-only names were dropped over the cap since the last call."""
        forgotten, self._forgotten = self._forgotten, 0
        return forgotten

    def addresses(self, name: str) -> tuple[str, ...]:
        return self._watched.get(name) or self._seen_ips.get(name) or ()

    def name_for_ip(self, ip: str) -> str | None:
        return self.ip_index().get(ip)

    def ip_index(self) -> Mapping[str, str]:
        """IP -> node name; a new mapping whenever addresses change, never changed in place."""
        if self._by_ip is None:
            self._by_ip = {
                ip: name for source in (self._seen_ips, self._watched) for name, ips in source.items() for ip in ips
            }
        return self._by_ip

    def known(self, name: str) -> bool:
        """Whether loadext knows a node of this name (watched, or named in a request)."""
        self._fold()
        return name in self._watched or name in self._seen


def _normalised(addresses: Iterable[str]) -> tuple[str, ...]:
    return tuple(ip for ip in (normalise_address(a) for a in addresses) if ip)
