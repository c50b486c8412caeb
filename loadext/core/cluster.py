"""What loadext believes about the cluster: the one implementation of the Ingest port.

It owns the config in force, the snapshot cache, the node directory, the signals' health and
the decision table, and it hands each event to the part that owns what the event changes: pod
events to the herd guard (core/herd/), node events to the directory, refresh rounds to the
cache and the table. The verbs (extender.py) read it through `view`, `identities_of` and
`table`; they never write it except through the events.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import TypeGuard

from loadext.config import Config, Pool, Signal
from loadext.core.herd.guard import NO_GUARD, ActiveGuard, Guard, View
from loadext.core.herd.learned import EstimateError, PodKey
from loadext.core.herd.ledger import PodLedger
from loadext.core.herd.stranded import StrandedPods
from loadext.core.herd.usage import Usage, allocatable
from loadext.core.identity import Addresses, Identities, identities_for
from loadext.core.ingest import EndpointState, MappingReport, Round
from loadext.core.mapping import SeriesMapping
from loadext.core.nodes import NodeDirectory
from loadext.core.policy import DecisionTable, Verdict, build_table
from loadext.core.rebalance.heat import Heat, build_heat
from loadext.core.rebalance.streaks import HotStreaks
from loadext.core.requests import BoundPod, ExtenderArgs, NodeInfo
from loadext.core.roster import Roster, Rows
from loadext.core.signal_health import SignalHealth
from loadext.core.snapshot import SignalValues, Snapshot, SnapshotCache


class Cluster:
    def __init__(self, config: Config, clock: Callable[[], float] = time.time) -> None:
        self._config = config
        self.clock = clock
        self.identities: Identities = identities_for(config.node_identity)
        self.directory = NodeDirectory(clock=clock)
        self.cache = SnapshotCache(config.max_data_age, clock=clock)
        self.signal_health = SignalHealth(clock)
        self.ledger = PodLedger(config, clock)  # what pod events say; it outlives a switch-off of the guard
        self.herd = ActiveGuard(config, self.ledger)
        self.guard: Guard = self.herd if config.herd_guard.enabled else NO_GUARD
        self.stranded = StrandedPods()
        self.streaks = HotStreaks()  # which nodes run hot, for the rebalancer
        self.mapping = SeriesMapping()
        self.roster = Roster()
        self._pools: tuple[tuple[object, ...], dict[str, Pool]] = ((), {})
        self.endpoints: list[EndpointState] = []  # the Prometheus endpoints' last outcomes
        self.refreshed_once = False
        self._table: DecisionTable | None = None

    @property
    def config(self) -> Config:
        return self._config

    @property
    def ready(self) -> bool:
        """Ready once a first refresh round ended: with data, or with the failure policy in force."""
        return self.refreshed_once

    @property
    def needs_node_details(self) -> bool:
        """Whether a request's full Node objects must be read beyond their names: their IPs
        (address identities), labels (pools) or allocatable (the herd guard)."""
        config = self._config
        return self.identities.needs_addresses or bool(config.pools) or config.herd_guard.enabled

    # --- configuration ------------------------------------------------------------------------

    def config_applied(self, config: Config) -> None:
        self._config = config
        self.identities = identities_for(config.node_identity)
        self.ledger.configure(config)
        self.herd.configure(config)
        self.guard = self.herd if config.herd_guard.enabled else NO_GUARD
        self.cache.set_max_age(config.max_data_age)
        self.cache.forget_signals_except({s.name for s in config.signals})
        self.signal_health.forget_except({s.name for s in config.signals})
        self.cache.rebuild()
        self.streaks.forget()  # thresholds, evictAt or hotFor may have changed: count afresh
        self._table = None

    # --- the decision table -------------------------------------------------------------------

    def _pools_version(self) -> int:
        return self.directory.labels_version if self._config.pools else 0

    def table(self) -> DecisionTable:
        """The current table, rebuilt when the snapshot, config or pool labels changed, or
        when its earliest sample crossed maxDataAge."""
        table, snapshot = self._table, self.cache.snapshot
        if not self._holds(table, snapshot, self._config.hash, self._pools_version()):
            table = self._table = self._decider()(snapshot)
        return table

    def _holds(
        self, table: DecisionTable | None, snapshot: Snapshot, config_hash: str, pools_version: int
    ) -> TypeGuard[DecisionTable]:
        """Whether `table` still decides `snapshot` under this config and these pool labels."""
        return (
            table is not None
            and table.snapshot_version == snapshot.version
            and table.config_hash == config_hash
            and table.pools_version == pools_version
            and self.clock() < table.valid_until
        )

    def _decider(self) -> Callable[[Snapshot], DecisionTable]:
        """The one way a table is built: bound to the config and pool labels of now (read here,
        on the event loop), so that it can run in a worker thread."""
        config, pools_version, clock = self._config, self._pools_version(), self.clock
        assignment = self._pool_assignment()
        return lambda snapshot: build_table(snapshot, config, clock(), assignment, pools_version)

    def _pool_assignment(self) -> dict[str, Pool]:
        """identity -> its pool, worked out again only when node labels, addresses or the
        config changed (every round and every rebuilt table reads it)."""
        config, directory = self._config, self.directory
        if not config.pools:
            return {}
        built_from = (directory.labels_version, self.identities.version(directory), config.hash)
        if built_from != self._pools[0]:
            self._pools = (built_from, self.identities.pools(directory, config))
        return self._pools[1]

    def report_version(self) -> tuple[object, ...]:
        """What explain's rows and the per-node metrics are built from: while it is equal,
        they would come out the same (a round with Prometheus down, say)."""
        table, directory = self.table(), self.directory
        return (
            table.snapshot_version, table.valid_until, table.config_hash, table.pools_version,
            directory.names_version, directory.labels_version,
        )  # fmt: skip

    def reported_nodes(self) -> Callable[[], Rows]:
        """(node, identity) of every node explain and the per-node metrics report on, sorted:
        read now, built by the returned function (safe in a worker thread)."""
        return self.roster.builder(self.directory, self.cache.snapshot, self.identities, self.table())

    def round_builder(self) -> Callable[[Iterable[SignalValues]], Round]:
        """Stores a round's values and decides them, for the refresher's worker thread: storing
        thousands of values and judging every node takes tens of milliseconds at 5000 nodes."""
        decide, cache, current = self._decider(), self.cache, self._table
        config_hash, pools_version = self._config.hash, self._pools_version()

        def build(values: Iterable[SignalValues]) -> Round:
            snapshot = cache.store_round(values)
            if self._holds(current, snapshot, config_hash, pools_version):  # nothing new (Prometheus down)
                return Round(snapshot, current)
            return Round(snapshot, decide(snapshot))

        return build

    def publish_round(self, round: Round) -> None:
        previous = self.cache.snapshot
        self.cache.publish(round.snapshot)
        if round.table.config_hash == self._config.hash:  # else a reload came in meanwhile: decide afresh
            self._table = round.table
        self.ledger.inflight.expire(self.clock())
        self.refreshed_once = True
        rebalance = self._config.rebalance
        if rebalance.enabled and round.snapshot is not previous:  # a snapshot already counted has nothing new
            self.streaks.observe(
                self.cache.snapshot, self._signals_of(), self._config.max_data_age, self.clock(),
                rebalance.hot_for, rebalance.cool_for,
            )  # fmt: skip

    def mapping_counter(self) -> Callable[[], Mapping[str, MappingReport]]:
        failing = {s.name for s in self._config.signals if self.signal_health.failing(s.name) is not None}
        return self.mapping.counter(self.cache.snapshot, self.directory, self.identities, self._config, failing)

    def request_nodes_forgotten(self) -> int:
        return self.directory.take_forgotten()

    def refreshed(self, values: Iterable[SignalValues]) -> Round:
        built = self.round_builder()(values)
        self.publish_round(built)
        self.mapping_counter()()
        return built

    # --- what a request tells, and what the verbs read ----------------------------------------

    def note_request(self, args: ExtenderArgs) -> None:
        """What a request tells about nodes: their names, and in non-cache mode their labels,
        IPs and allocatable."""
        sizes = {name: allocatable(quantities) for name, quantities in args.allocatable.items()}
        self.directory.observe(args.names, args.addresses, args.labels, sizes)

    def identities_of(self, names: list[str], addresses: Addresses, table: DecisionTable) -> list[str]:
        return self.identities.of(names, addresses, self.directory, table)

    def view(self, table: DecisionTable) -> View:
        directory = self.directory
        versions = (directory.allocatable_version, self.identities.version(directory))
        return View(table, self.cache.snapshot.by_identity, directory.allocatable, versions, self._config, self.clock())

    def measured(self, identities: list[str], table: DecisionTable) -> list[Verdict]:
        """The table's verdicts, on measured load alone."""
        return list(map(table.by_identity.__getitem__, identities))

    # --- Prometheus events --------------------------------------------------------------------

    def signal_failed(self, signal: str, kind: str, message: str) -> None:
        self.signal_health.failed(signal, kind, message)

    def signal_succeeded(self, signal: str, partial: str = "") -> None:
        self.signal_health.succeeded(signal, partial)

    def endpoints_reported(self, states: list[EndpointState]) -> None:
        self.endpoints = states

    def pod_usage_measured(self, measured: Mapping[str, Mapping[PodKey, float]]) -> list[EstimateError]:
        return self.ledger.pod_usage_measured(measured)

    # --- Kubernetes events --------------------------------------------------------------------

    def nodes_listed(self, nodes: list[NodeInfo]) -> None:
        directory = self.directory
        directory.replace_all({n.name: n.addresses for n in nodes}, {n.name: n.labels for n in nodes})
        for node in nodes:
            directory.set_allocatable(node.name, allocatable(node.allocatable))

    def node_seen(self, node: NodeInfo) -> None:
        self.directory.upsert(node.name, node.addresses, node.labels)
        self.directory.set_allocatable(node.name, allocatable(node.allocatable))

    def node_gone(self, name: str) -> None:
        self.directory.delete(name)

    def nodes_named(self, names: list[str]) -> None:
        self.directory.observe(names)

    def pods_listed(self, pods: list[BoundPod], first: bool = True, last: bool = True) -> None:
        for pod in pods:
            self.stranded.release(pod.uid)
        self.ledger.pods_listed(pods, first, last)

    def pod_bound(self, pod: BoundPod) -> None:
        self.stranded.release(pod.uid)
        self.ledger.pod_bound(pod)

    def pod_gone(self, uid: str) -> None:
        self.ledger.pod_gone(uid)

    def pods_unwatched(self) -> None:
        self.ledger.pods_listed([])

    def bound_by_loadext(self, uid: str, node: str) -> None:
        self.guard.count_now(uid, node)

    # --- stranded pods ------------------------------------------------------------------------

    def reopened_node(self) -> str | None:
        """Judged as filter would judge the pod: measured load plus the herd guard's estimates
        and the pod's own (load fell, the herd window passed, the config changed)."""
        for incoming, nodes in self.stranded.due(self.clock()).items():
            names = sorted(nodes)
            table = self.table()
            identities = self.identities_of(names, {}, table)
            verdicts = self.guard.corrected(partial(self.view, table), names, identities, incoming, None)
            if verdicts is None:
                verdicts = self.measured(identities, table)
            for name, verdict in zip(names, verdicts, strict=True):
                if verdict.passed:
                    return name
        return None

    def stranded_nudged(self) -> int:
        return self.stranded.nudged(self.clock())

    # --- the rebalancer (core/rebalance/port.py) ---------------------------------------------

    def _signals_of(self) -> Callable[[str], tuple[Signal, ...]]:
        """identity -> the signals it is judged by (its pool's, else the config's)."""
        config = self._config
        pools = self._pool_assignment()
        return lambda identity: config.signals_for(pools.get(identity))

    def heat(self) -> Heat:
        config, directory = self._config, self.directory
        return build_heat(
            self.streaks, self.cache.snapshot, self.table(), self._signals_of(),
            partial(self.identities.node_for, directory=directory), directory.allocatable,
            config.max_data_age, self.clock(),
        )  # fmt: skip

    def passing_with(self, usage: Usage, excluding: str) -> list[str]:
        table = self.table()
        names = [name for name in sorted(self.directory.names()) if name != excluding]
        identities = self.identities_of(names, {}, table)
        verdicts = self.herd.corrected(partial(self.view, table), names, identities, usage, None)
        if verdicts is None:
            verdicts = self.measured(identities, table)
        passing = [(-verdict.score, name) for name, verdict in zip(names, verdicts, strict=True) if verdict.passed]
        return [name for _, name in sorted(passing)]

    def moved(self, workload: str, usage: Usage, until: float) -> None:
        self.ledger.learned.moved(workload, usage, self.clock(), until)

    def stranded_count(self) -> int:
        """Pods whose last filter passed no node (loadext_stranded_pods)."""
        return len(self.stranded)
