"""How each signal's series map to nodes: the known nodes without one, the series naming none.

A node-identity mismatch (the label names an instance, the nodes are named otherwise) is the
most common reason a load-aware scheduler silently does nothing, so every refresh recounts it
and a change is logged with the hint that fixes it; explain and the metrics show the counts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Set

from loadext.config import Config
from loadext.core.identity import Identities
from loadext.core.ingest import MappingReport
from loadext.core.nodes import NodeDirectory
from loadext.core.roster import layout
from loadext.core.snapshot import Snapshot
from loadext.core.sorting import sorted_in_slices

log = logging.getLogger(__name__)


class SeriesMapping:
    """The counts of the last recount, kept until what they are counted from changes: at
    15 000 nodes a recount is tens of milliseconds of the event loop, and most rounds change
    values, not which nodes and series exist."""

    def __init__(self) -> None:
        self.reports: dict[str, MappingReport] = {}
        self._counted_from: tuple[object, ...] = ()

    def get(self, signal: str) -> MappingReport:
        return self.reports.get(signal, MappingReport())

    def counter(
        self,
        snapshot: Snapshot,
        directory: NodeDirectory,
        identities: Identities,
        config: Config,
        failing: Set[str],
    ) -> Callable[[], dict[str, MappingReport]]:
        """Recount which known nodes lack series and which series name no node, and log changes,
        except for the signals whose queries are `failing` (their series are missing for that
        reason, logged by SignalHealth: pointing at nodeIdentity would point away from it).

        What to count from is read here, on the event loop; the count is the returned function,
        safe to run in a worker thread (at 15 000 nodes it is tens of milliseconds)."""
        counted_from = (*layout(directory, snapshot, identities), config.hash)
        if counted_from == self._counted_from:
            reports = self.reports
            return lambda: reports
        self._counted_from = counted_from
        known, node_for = directory.names(), identities.resolver(directory)
        previous_reports = self.reports

        def count() -> dict[str, MappingReport]:
            reports = {}
            for signal in config.signals:
                present = [i for i, s in snapshot.by_identity.items() if signal.name in s]
                mapped = {i: node_for(i) for i in present}
                unmatched = sorted_in_slices(i for i, node in mapped.items() if node is None)
                report = MappingReport(
                    unmapped_nodes=tuple(sorted_in_slices(known - {m for m in mapped.values() if m})),
                    unmatched_series=tuple(unmatched) if known else (),
                )
                previous = previous_reports.get(signal.name)
                if (
                    previous != report
                    and (report.unmapped_nodes or report.unmatched_series)
                    and signal.name not in failing
                ):
                    log.warning(
                        "signal %s: %d known nodes have no series (%s); %d series match no node (%s); "
                        "check nodeIdentity (label %r, kind %s)",
                        signal.name,
                        len(report.unmapped_nodes),
                        _sample(report.unmapped_nodes),
                        len(report.unmatched_series),
                        _sample(report.unmatched_series),
                        config.node_identity.label,
                        identities.kind,
                    )
                reports[signal.name] = report
            self.reports = reports
            return reports

        return count


def _sample(items: tuple[str, ...], limit: int = 5) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")
