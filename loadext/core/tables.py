"""The decision table in force (policy.build_table), kept until what it was built from changes.

Every verb reads the table, so it is built once per refresh round (in the refresher's worker
thread, through `decider`) and again on the loop only when the config or the pool labels
change, or when its earliest sample crosses maxDataAge.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeGuard

from loadext.config import Config, Pool, Signal
from loadext.core.identity import Identities
from loadext.core.nodes import NodeDirectory
from loadext.core.policy import DecisionTable, build_table
from loadext.core.snapshot import Snapshot


class TableKeeper:
    def __init__(
        self, config: Config, identities: Identities, directory: NodeDirectory, clock: Callable[[], float]
    ) -> None:
        self._config, self._identities, self._directory, self._clock = config, identities, directory, clock
        self._table: DecisionTable | None = None
        self._pools: tuple[tuple[object, ...], dict[str, Pool]] = ((), {})

    def configure(self, config: Config, identities: Identities) -> None:
        self._config, self._identities, self._table = config, identities, None

    def table(self, snapshot: Snapshot) -> DecisionTable:
        """The table for `snapshot`: the one in force while it holds, else one built now."""
        table = self._table
        if not holds(table, snapshot, self._config.hash, self.pools_version(), self._clock()):
            table = self._table = self.decider()(snapshot)
        return table

    def adopt(self, table: DecisionTable) -> None:
        """A round's table, in force unless a reload came in while it was built."""
        if table.config_hash == self._config.hash:
            self._table = table

    def decider(self) -> Callable[[Snapshot], DecisionTable]:
        """The one way a table is built: bound to the config and pool labels of now (read here,
        on the event loop), so that it can run in a worker thread; the table in force is kept
        while it still decides the snapshot (a round with Prometheus down stores nothing new)."""
        config, pools_version, clock, current = self._config, self.pools_version(), self._clock, self._table
        assignment = self.pool_assignment()

        def decide(snapshot: Snapshot) -> DecisionTable:
            now = clock()
            if holds(current, snapshot, config.hash, pools_version, now):
                return current
            return build_table(snapshot, config, now, assignment, pools_version)

        return decide

    def pools_version(self) -> int:
        return self._directory.labels_version if self._config.pools else 0

    def pool_assignment(self) -> dict[str, Pool]:
        """identity -> its pool, worked out again only when node labels, addresses or the
        config changed (every round and every rebuilt table reads it)."""
        config, directory = self._config, self._directory
        if not config.pools:
            return {}
        built_from = (directory.labels_version, self._identities.version(directory), config.hash)
        if built_from != self._pools[0]:
            self._pools = (built_from, self._identities.pools(directory, config))
        return self._pools[1]

    def signals_of(self) -> Callable[[str], tuple[Signal, ...]]:
        """identity -> the signals it is judged by (its pool's, else the config's)."""
        config, pools = self._config, self.pool_assignment()
        return lambda identity: config.signals_for(pools.get(identity))


def holds(
    table: DecisionTable | None, snapshot: Snapshot, config_hash: str, pools_version: int, now: float
) -> TypeGuard[DecisionTable]:
    """Whether `table` still decides `snapshot` under this config and these pool labels."""
    return (
        table is not None
        and table.snapshot_version == snapshot.version
        and table.config_hash == config_hash
        and table.pools_version == pools_version
        and now < table.valid_until
    )
