"""What loadext believes about the cluster: its state, the one writer of it, and one reader
per consumer.

`_State` holds the config in force and every part that keeps state (the snapshot cache, the
node directory, the decision table, the signals' health, the herd guard's ledger, the stranded
pods, the hot streaks). `Cluster` is the one implementation of the Ingest port
(core/ingest.py): it hands each event to the part that owns what the event changes. Each
consumer reads through a reader of its own, which implements the port written beside that
consumer and nothing more: `Cluster.verbs` (extender.py `VerbState`), `Cluster.explained`
(explain.py `ExplainState`), `Cluster.rebalance` (core/rebalance/port.py `RebalanceState`).
The parts never leave this module, and only app.py, the composition root, knows these classes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial

from loadext.config import Config
from loadext.core.herd.guard import NO_GUARD, ActiveGuard, Guard, View
from loadext.core.herd.learned import EstimateError, PodKey
from loadext.core.herd.ledger import HerdReport, PodLedger
from loadext.core.herd.stranded import StrandedPods
from loadext.core.herd.usage import Usage, allocatable
from loadext.core.identity import Addresses, Identities, identities_for
from loadext.core.ingest import EndpointState, MappingReport, Round
from loadext.core.mapping import SeriesMapping
from loadext.core.nodes import NodeDirectory
from loadext.core.policy import DecisionTable, Verdict
from loadext.core.rebalance.heat import Heat, build_heat
from loadext.core.rebalance.streaks import HotStreaks
from loadext.core.requests import BoundPod, ExtenderArgs, NodeInfo
from loadext.core.roster import Roster, Rows
from loadext.core.signal_health import SignalHealth
from loadext.core.snapshot import SignalValues, Snapshot, SnapshotCache
from loadext.core.tables import TableKeeper


@dataclass(eq=False)
class _State:
    config: Config
    clock: Callable[[], float]
    identities: Identities = field(init=False)
    directory: NodeDirectory = field(init=False)
    cache: SnapshotCache = field(init=False)
    tables: TableKeeper = field(init=False)
    ledger: PodLedger = field(init=False)  # what pod events say; it outlives a switch-off of the guard
    # Built whatever the config says: the rebalancer's targets count pods in flight even with
    # the guard off for the verbs (guard() is NO_GUARD then).
    herd_guard: ActiveGuard = field(init=False)
    signal_health: SignalHealth = field(init=False)
    stranded: StrandedPods = field(default_factory=StrandedPods)
    streaks: HotStreaks = field(default_factory=HotStreaks)  # which nodes run hot, for the rebalancer
    mapping: SeriesMapping = field(default_factory=SeriesMapping)
    roster: Roster = field(default_factory=Roster)
    endpoints: list[EndpointState] = field(default_factory=list)  # the Prometheus endpoints' last outcomes
    refreshed_once: bool = False

    def __post_init__(self) -> None:
        config, clock = self.config, self.clock
        self.identities = identities_for(config.node_identity)
        self.directory = NodeDirectory(clock=clock)
        self.cache = SnapshotCache(config.max_data_age, clock=clock)
        self.tables = TableKeeper(config, self.identities, self.directory, clock)
        self.ledger = PodLedger(config, clock)
        self.herd_guard = ActiveGuard(config, self.ledger)
        self.signal_health = SignalHealth(clock)

    def table(self) -> DecisionTable:
        return self.tables.table(self.cache.snapshot)

    def guard(self) -> Guard:
        """The herd guard in force: NO_GUARD while the config switches it off."""
        return self.herd_guard if self.config.herd_guard.enabled else NO_GUARD

    def identities_of(self, names: list[str], addresses: Addresses, table: DecisionTable) -> list[str]:
        return self.identities.of(names, addresses, self.directory, table)

    def view(self, table: DecisionTable) -> View:
        directory = self.directory
        versions = (directory.allocatable_version, self.identities.version(directory))
        return View(table, self.cache.snapshot.by_identity, directory.allocatable, versions, self.config, self.clock())

    def judged(self, names: list[str], incoming: Usage, guard: Guard) -> list[Verdict]:
        """How filter would judge a pod of `incoming` usage on `names` now."""
        table = self.table()
        identities = self.identities_of(names, {}, table)
        verdicts = guard.corrected(partial(self.view, table), names, identities, incoming, None)
        return table.verdicts(identities) if verdicts is None else verdicts


class Cluster:
    """The Ingest port: every event from the sources, and a reload's config."""

    def __init__(self, config: Config, clock: Callable[[], float] = time.time) -> None:
        self._state = state = _State(config, clock)
        self.verbs = VerbReader(state)
        self.explained = ExplainReader(state)
        self.rebalance = RebalanceReader(state)

    @property
    def config(self) -> Config:
        return self._state.config

    def clock(self) -> float:
        return self._state.clock()

    @property
    def ready(self) -> bool:
        """Ready once a first refresh round ended: with data, or with the failure policy in force."""
        return self._state.refreshed_once

    def config_applied(self, config: Config) -> None:
        state = self._state
        state.config, state.identities = config, identities_for(config.node_identity)
        state.tables.configure(config, state.identities)
        state.ledger.configure(config)
        state.herd_guard.configure(config)
        state.cache.set_max_age(config.max_data_age)
        state.cache.forget_signals_except({s.name for s in config.signals})
        state.signal_health.forget_except({s.name for s in config.signals})
        state.cache.rebuild()
        state.streaks.forget()  # thresholds, evictAt, hotFor or overFor may have changed: count afresh

    # --- refresh rounds -----------------------------------------------------------------------

    def round_builder(self) -> Callable[[Iterable[SignalValues]], Round]:
        """Stores a round's values and decides them, for the refresher's worker thread: storing
        thousands of values and judging every node takes tens of milliseconds at 5000 nodes."""
        decide, cache = self._state.tables.decider(), self._state.cache

        def build(values: Iterable[SignalValues]) -> Round:
            snapshot = cache.store_round(values)
            return Round(snapshot, decide(snapshot))

        return build

    def publish_round(self, round: Round) -> None:
        state = self._state
        previous = state.cache.snapshot
        state.cache.publish(round.snapshot)
        state.tables.adopt(round.table)
        state.ledger.inflight.expire(state.clock())
        state.refreshed_once = True
        config = state.config
        if config.rebalance.enabled and round.snapshot is not previous:  # a counted snapshot has nothing new
            state.streaks.observe(
                round.snapshot, state.tables.signals_of(), config.max_data_age, state.clock(), config.rebalance
            )

    def refreshed(self, values: Iterable[SignalValues]) -> Round:
        built = self.round_builder()(values)
        self.publish_round(built)
        self.mapping_counter()()
        return built

    def mapping_counter(self) -> Callable[[], Mapping[str, MappingReport]]:
        state = self._state
        failing = {s.name for s in state.config.signals if state.signal_health.failing(s.name) is not None}
        return state.mapping.counter(state.cache.snapshot, state.directory, state.identities, state.config, failing)

    def signal_failed(self, signal: str, kind: str, message: str) -> None:
        self._state.signal_health.failed(signal, kind, message)

    def signal_succeeded(self, signal: str, partial: str = "") -> None:
        self._state.signal_health.succeeded(signal, partial)

    def endpoints_reported(self, states: list[EndpointState]) -> None:
        self._state.endpoints = states

    def pod_usage_measured(self, measured: Mapping[str, Mapping[PodKey, float]]) -> list[EstimateError]:
        return self._state.ledger.pod_usage_measured(measured)

    # --- Kubernetes events --------------------------------------------------------------------

    def request_nodes_forgotten(self) -> int:
        return self._state.directory.take_forgotten()

    def nodes_listed(self, nodes: list[NodeInfo]) -> None:
        directory = self._state.directory
        directory.replace_all({n.name: n.addresses for n in nodes}, {n.name: n.labels for n in nodes})
        for node in nodes:
            directory.set_allocatable(node.name, allocatable(node.allocatable))

    def node_seen(self, node: NodeInfo) -> None:
        self._state.directory.upsert(node.name, node.addresses, node.labels)
        self._state.directory.set_allocatable(node.name, allocatable(node.allocatable))

    def node_gone(self, name: str) -> None:
        self._state.directory.delete(name)

    def nodes_named(self, names: list[str]) -> None:
        self._state.directory.observe(names)

    def pods_listed(self, pods: list[BoundPod], first: bool = True, last: bool = True) -> None:
        for pod in pods:
            self._state.stranded.release(pod.uid)
        self._state.ledger.pods_listed(pods, first, last)

    def pod_bound(self, pod: BoundPod) -> None:
        self._state.stranded.release(pod.uid)
        self._state.ledger.pod_bound(pod)

    def pod_gone(self, uid: str) -> None:
        self._state.ledger.pod_gone(uid)

    def pods_unwatched(self) -> None:
        self._state.ledger.pods_listed([])

    def bound_by_loadext(self, uid: str, node: str) -> None:
        self._state.guard().count_now(uid, node)

    # --- stranded pods ------------------------------------------------------------------------

    def reopened_node(self) -> str | None:
        """Judged as filter would judge the pod: measured load plus the herd guard's estimates
        and the pod's own (load fell, the herd window passed, the config changed)."""
        state = self._state
        for incoming, nodes in state.stranded.due(state.clock()).items():
            names = sorted(nodes)
            for name, verdict in zip(names, state.judged(names, incoming, state.guard()), strict=True):
                if verdict.passed:
                    return name
        return None

    def stranded_nudged(self) -> int:
        return self._state.stranded.nudged(self._state.clock())

    def stranded_count(self) -> int:
        """Pods whose last filter passed no node (loadext_stranded_pods)."""
        return len(self._state.stranded)


class _Reader:
    def __init__(self, state: _State) -> None:
        self._state = state

    @property
    def config(self) -> Config:
        return self._state.config

    def clock(self) -> float:
        return self._state.clock()

    def table(self) -> DecisionTable:
        return self._state.table()

    def snapshot(self) -> Snapshot:
        return self._state.cache.snapshot


class VerbReader(_Reader):
    """What filter, prioritize and preempt read, and tell (extender.py VerbState)."""

    @property
    def needs_node_details(self) -> bool:
        """Whether a request's full Node objects must be read beyond their names: their IPs
        (address identities), labels (pools) or allocatable (the herd guard)."""
        state = self._state
        return state.identities.needs_addresses or bool(state.config.pools) or state.config.herd_guard.enabled

    def note_request(self, args: ExtenderArgs) -> None:
        """What a request tells about nodes: their names, and in non-cache mode their labels,
        IPs and allocatable."""
        sizes = {name: allocatable(quantities) for name, quantities in args.allocatable.items()}
        self._state.directory.observe(args.names, args.addresses, args.labels, sizes)

    def nodes_named(self, names: list[str]) -> None:
        self._state.directory.observe(names)

    def guard(self) -> Guard:
        return self._state.guard()

    def identities_of(self, names: list[str], addresses: Addresses, table: DecisionTable) -> list[str]:
        return self._state.identities_of(names, addresses, table)

    def view(self, table: DecisionTable) -> View:
        return self._state.view(table)

    def strand(self, uid: str, names: list[str], incoming: Usage) -> None:
        self._state.stranded.strand(uid, names, incoming, self._state.clock())

    def unstrand(self, uid: str) -> None:
        self._state.stranded.release(uid)


class ExplainReader(_Reader):
    """What explain and the per-node metrics read (explain.py ExplainState)."""

    def reported_nodes(self) -> Callable[[], Rows]:
        """(node, identity) of every node explain and the per-node metrics report on, sorted:
        read now, built by the returned function (safe in a worker thread)."""
        state = self._state
        return state.roster.builder(state.directory, state.cache.snapshot, state.identities, state.table())

    def report_version(self) -> tuple[object, ...]:
        """What explain's rows and the per-node metrics are built from: while it is equal,
        they would come out the same (a round with Prometheus down, say)."""
        table, directory = self._state.table(), self._state.directory
        return (
            table.snapshot_version, table.valid_until, table.config_hash, table.pools_version,
            directory.names_version, directory.labels_version,
        )  # fmt: skip

    def node_labels(self) -> Mapping[str, Mapping[str, str]]:
        return self._state.directory.labelled()

    def herd_report(self) -> HerdReport:
        return self._state.ledger.report(self._state.clock())

    def endpoints(self) -> list[EndpointState]:
        return self._state.endpoints

    def signal_report(self, signal: str) -> dict[str, object]:
        """The signal's health (its last success and error) and how its series map to nodes."""
        mapped = self._state.mapping.get(signal)
        return {
            **self._state.signal_health.report(signal, self._state.clock()),
            "unmappedNodes": list(mapped.unmapped_nodes),
            "unmatchedSeries": list(mapped.unmatched_series),
        }


class RebalanceReader(_Reader):
    """What the rebalancer reads, and tells (core/rebalance/port.py RebalanceState)."""

    def heat(self) -> Heat:
        state, directory = self._state, self._state.directory
        return build_heat(
            state.streaks, state.cache.snapshot, state.table(), state.tables.signals_of(),
            partial(state.identities.node_for, directory=directory), directory.allocatable,
            state.config.max_data_age, state.clock(),
        )  # fmt: skip

    def passing_with(self, usage: Usage, excluding: str, planned: Mapping[str, Usage]) -> list[str]:
        state = self._state
        names = [name for name in sorted(state.directory.names()) if name != excluding]
        verdicts = dict(zip(names, state.judged(names, usage, state.herd_guard), strict=True))
        for node, sent in planned.items():  # judged again with what this cycle already sends there
            if node in verdicts:
                verdicts[node] = state.judged([node], usage + sent, state.herd_guard)[0]
        passing = [(-verdict.score, name) for name, verdict in verdicts.items() if verdict.passed]
        return [name for _, name in sorted(passing)]

    def moved(self, workload: str, usage: Usage, until: float) -> None:
        self._state.ledger.learned.moved(workload, usage, self._state.clock(), until)
