"""The one port through which the world reaches loadext's state: every event a source can send.

Sources (the Prometheus refresher, the Kubernetes watches, the stranded-pod requeue, replay,
the tests' harness) are typed against this Protocol and call nothing else of core's state, so
a new data source is one module that sends these events. `core.cluster.Cluster` is its one
implementation; each event goes to the part that owns what it changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from loadext.config import Config
from loadext.core.herd.learned import EstimateError, PodKey
from loadext.core.policy import DecisionTable
from loadext.core.requests import BoundPod, NodeInfo
from loadext.core.snapshot import SignalValues, Snapshot


@dataclass(frozen=True)
class MappingReport:
    """Per signal: known nodes without a series, and series that match no known node."""

    unmapped_nodes: tuple[str, ...] = ()
    unmatched_series: tuple[str, ...] = ()


@dataclass(frozen=True)
class EndpointState:
    """One Prometheus endpoint's last outcome (prometheus.urls are tried in order)."""

    url: str
    up: bool
    error: str  # the last failure's one line; "" while up
    time: float


@dataclass(frozen=True)
class Round:
    """A refresh round stored and decided: the snapshot and the table built from it, which
    requests see together or not at all."""

    snapshot: Snapshot
    table: DecisionTable


class Ingest(Protocol):
    @property
    def config(self) -> Config:
        """The config in force (a source reads what to query, how often)."""

    def clock(self) -> float:
        """Wall time, as core reads it (tests inject theirs)."""

    # --- configuration ------------------------------------------------------------------------

    def config_applied(self, config: Config) -> None:
        """A validated config: in force from the next decision."""

    # --- Prometheus ---------------------------------------------------------------------------

    def round_builder(self) -> Callable[[Iterable[SignalValues]], Round]:
        """A function that stores a round's values and decides them, bound to the config and
        node labels of now, safe to run in a worker thread; publish its result with
        publish_round."""

    def publish_round(self, round: Round) -> None:
        """A built round comes into force."""

    def mapping_counter(self) -> Callable[[], Mapping[str, MappingReport]]:
        """A function that counts how each signal's series map to nodes as of the published
        round (and logs a change), safe to run in a worker thread."""

    def request_nodes_forgotten(self) -> int:
        """How many node names learnt only from requests were forgotten over the cap since the
        last call (core/nodes.py)."""

    def refreshed(self, values: Iterable[SignalValues]) -> Round:
        """round_builder, publish_round and the mapping's count in one step, on the calling thread."""

    def signal_failed(self, signal: str, kind: str, message: str) -> None: ...

    def signal_succeeded(self, signal: str, partial: str = "") -> None:
        """A signal's query answered; `partial` says why its data may be incomplete (the
        backend's warnings), "" when it is whole."""

    def endpoints_reported(self, states: list[EndpointState]) -> None:
        """Each Prometheus endpoint's last outcome, after a round."""

    def pod_usage_measured(self, measured: Mapping[str, Mapping[PodKey, float]]) -> list[EstimateError]:
        """A round's measured usage per resource and pod; returns how far off the estimates
        it replaced were."""

    # --- Kubernetes ---------------------------------------------------------------------------

    def nodes_listed(self, nodes: list[NodeInfo]) -> None:
        """A full Node list: it replaces what the Node watch told before."""

    def node_seen(self, node: NodeInfo) -> None: ...

    def node_gone(self, name: str) -> None: ...

    def nodes_named(self, names: list[str]) -> None:
        """Nodes known by name only (a CLI argument, a request)."""

    def pods_listed(self, pods: list[BoundPod], first: bool = True, last: bool = True) -> None:
        """A page of a full list of bound pods (the list is paginated): the first page starts
        the list over, the last one makes the whole list replace what the watch told before."""

    def pod_bound(self, pod: BoundPod) -> None: ...

    def pod_gone(self, uid: str) -> None: ...

    def pods_unwatched(self) -> None:
        """The pod watch stopped (the herd guard was switched off): forget what it told."""

    def bound_by_loadext(self, uid: str, node: str) -> None:
        """loadext's own bind succeeded: count the pod there before the watch reports it."""

    # --- stranded pods ------------------------------------------------------------------------

    def reopened_node(self) -> str | None:
        """A node some stranded pod was refused on that would pass it now, or None."""

    def stranded_nudged(self) -> int:
        """A Node event was made for the stranded pods; returns how many there are."""
