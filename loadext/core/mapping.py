"""How each signal's series map to nodes: the known nodes without one, the series naming none.

A node-identity mismatch (the label names an instance, the nodes are named otherwise) is the
most common reason a load-aware scheduler silently does nothing, so every refresh recounts it
and a change is logged with the hint that fixes it; explain and the metrics show the counts.
"""

from __future__ import annotations

import logging
from collections.abc import Set

from loadext.config import Config
from loadext.core.identity import Identities
from loadext.core.ingest import MappingReport
from loadext.core.nodes import NodeDirectory
from loadext.core.snapshot import Snapshot

log = logging.getLogger(__name__)


class SeriesMapping:
    def __init__(self) -> None:
        self.reports: dict[str, MappingReport] = {}

    def get(self, signal: str) -> MappingReport:
        return self.reports.get(signal, MappingReport())

    def recount(
        self,
        snapshot: Snapshot,
        directory: NodeDirectory,
        identities: Identities,
        config: Config,
        failing: Set[str],
    ) -> dict[str, MappingReport]:
        """Recount which known nodes lack series and which series name no node; log changes,
        except for the signals whose queries are `failing` (their series are missing for that
        reason, logged by SignalHealth: pointing at nodeIdentity would point away from it)."""
        known = directory.names()
        reports = {}
        for signal in config.signals:
            present = {i for i, s in snapshot.by_identity.items() if signal.name in s}
            mapped = {i: identities.node_for(i, directory) for i in present}
            unmatched = sorted(i for i, node in mapped.items() if node is None)
            report = MappingReport(
                unmapped_nodes=tuple(sorted(known - {m for m in mapped.values() if m})),
                unmatched_series=tuple(unmatched) if known else (),
            )
            previous = self.reports.get(signal.name)
            if previous != report and (report.unmapped_nodes or report.unmatched_series) and signal.name not in failing:
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


def _sample(items: tuple[str, ...], limit: int = 5) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")
