"""Node identity: how a series' label value names a node, written once per kind.

`nodeIdentity.kind` picks one of two implementations of `Identities`, and nothing else in
loadext asks which kind is configured:

- ByName: the label holds the node name (`node="worker-1"`), so a node's identity is its name
  and a request's names are its identities, the same list, at no cost per call.
- ByAddress: the label holds the address a node was scraped on (`instance="10.0.0.7:9100"`),
  matched to the Node's InternalIP. Addresses come from full Node objects in non-cache
  requests or from the Node watch, through the NodeDirectory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set
from typing import TYPE_CHECKING, Protocol

from loadext.config import Config, NodeIdentity, Pool
from loadext.core.addresses import normalise_address
from loadext.core.policy import DecisionTable
from loadext.core.snapshot import Snapshot

if TYPE_CHECKING:  # a type only: sources/ parse series keys with this module, never touch the directory
    from loadext.core.nodes import NodeDirectory

Addresses = Mapping[str, tuple[str, ...]]  # node name -> IPs as a request gave them


class Identities(Protocol):
    kind: str
    needs_addresses: bool  # http/ must decode each full Node's IPs for this kind

    def key(self, label_value: str) -> str | None:
        """The key a series is stored under, from its identity label's value; None: unusable."""

    def of(self, names: list[str], addresses: Addresses, directory: NodeDirectory, table: DecisionTable) -> list[str]:
        """Each name's identity, in order ("" where a node has none: it reads as no data)."""

    def version(self, directory: NodeDirectory) -> int:
        """Bumps whenever `of` may answer differently for the same table."""

    def pools(self, directory: NodeDirectory, config: Config) -> dict[str, Pool]:
        """identity -> pool, from the labels of the nodes loadext has seen."""

    def node_for(self, identity: str, directory: NodeDirectory) -> str | None:
        """The node a stored series belongs to, if loadext knows that node."""

    def resolver(self, directory: NodeDirectory) -> Callable[[str], str | None]:
        """node_for as of now, safe to call from a worker thread (it reads no mutable part)."""

    def nodes(self, directory: NodeDirectory, snapshot: Snapshot) -> Set[str]:
        """Every node to report on: the known ones, and those a series names where that is a name."""


class ByName:
    kind = "name"
    needs_addresses = False

    def key(self, label_value: str) -> str | None:
        return label_value or None

    def of(self, names: list[str], addresses: Addresses, directory: NodeDirectory, table: DecisionTable) -> list[str]:
        return names

    def version(self, directory: NodeDirectory) -> int:
        return 0

    def pools(self, directory: NodeDirectory, config: Config) -> dict[str, Pool]:
        assignment = {}
        for name, labels in directory.labelled().items():
            pool = config.pool_for(labels)
            if pool is not None:
                assignment[name] = pool
        return assignment

    def node_for(self, identity: str, directory: NodeDirectory) -> str | None:
        return identity if directory.known(identity) else None

    def resolver(self, directory: NodeDirectory) -> Callable[[str], str | None]:
        names = directory.names()
        return lambda identity: identity if identity in names else None

    def nodes(self, directory: NodeDirectory, snapshot: Snapshot) -> Set[str]:
        return directory.names() | set(snapshot.by_identity)


class ByAddress:
    kind = "address"
    needs_addresses = True

    def key(self, label_value: str) -> str | None:
        return normalise_address(label_value)

    def of(self, names: list[str], addresses: Addresses, directory: NodeDirectory, table: DecisionTable) -> list[str]:
        return [self._one(name, addresses.get(name, ()), directory, table) for name in names]

    def _one(self, name: str, addresses: tuple[str, ...], directory: NodeDirectory, table: DecisionTable) -> str:
        """The first of the node's IPs that has data, else its first IP: the request's own IPs
        first, then those the directory knows."""
        ips = [ip for ip in (normalise_address(a) for a in addresses) if ip] or list(directory.addresses(name))
        for ip in ips:
            if ip in table.by_identity:
                return ip
        return ips[0] if ips else ""

    def version(self, directory: NodeDirectory) -> int:
        return directory.addresses_version

    def pools(self, directory: NodeDirectory, config: Config) -> dict[str, Pool]:
        assignment: dict[str, Pool] = {}
        for name, labels in directory.labelled().items():
            pool = config.pool_for(labels)
            if pool is not None:
                assignment.update(dict.fromkeys(directory.addresses(name), pool))
        return assignment

    def node_for(self, identity: str, directory: NodeDirectory) -> str | None:
        return directory.name_for_ip(identity)

    def resolver(self, directory: NodeDirectory) -> Callable[[str], str | None]:
        return directory.ip_index().get

    def nodes(self, directory: NodeDirectory, snapshot: Snapshot) -> Set[str]:
        return directory.names()


def identities_for(identity: NodeIdentity) -> Identities:
    return ByAddress() if identity.kind == "address" else ByName()
