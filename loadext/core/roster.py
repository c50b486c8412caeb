"""Which nodes loadext reports on, in order, each with its identity: explain's rows and the
per-node metrics.

Kept until the known names, which series exist, or how names map to identities change: a round
that changes only values (most rounds) reuses them. When they do change, the work (sorting every
known node) is handed back as a function for a worker thread, never done on the event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from loadext.core.identity import Identities
from loadext.core.nodes import NodeDirectory
from loadext.core.policy import DecisionTable
from loadext.core.snapshot import Snapshot
from loadext.core.sorting import sorted_in_slices

Rows = Sequence[tuple[str, str]]  # (node, identity), sorted by node; identity "" where it has none


def layout(directory: NodeDirectory, snapshot: Snapshot, identities: Identities) -> tuple[int, int, int]:
    """What says which nodes are known and which series exist, not their values: equal, the
    node rows and the mapping check come out the same. The names are read first, so that
    those requests gave since the last read are folded in and counted."""
    directory.names()
    return directory.names_version, snapshot.keys_version, identities.version(directory)


class Roster:
    def __init__(self) -> None:
        self._built_from: tuple[object, ...] = ()
        self._rows: Rows = ()

    def builder(
        self, directory: NodeDirectory, snapshot: Snapshot, identities: Identities, table: DecisionTable
    ) -> Callable[[], Rows]:
        """The rows as of now: read here, on the event loop; built by the returned function,
        which is safe to call in a worker thread."""
        built_from = (*layout(directory, snapshot, identities), identities.kind)
        if built_from == self._built_from:
            rows = self._rows
            return lambda: rows
        names = identities.nodes(directory, snapshot)

        def build() -> Rows:
            ordered = sorted_in_slices(names)
            rows = list(zip(ordered, identities.of(ordered, {}, directory, table), strict=True))
            self._rows, self._built_from = rows, built_from
            return rows

        return build
