"""The last decisions per pod, for "why did my pod go there / not there".

Recording is O(1) on the scheduling path: a decision keeps references to the request's name
list, the verdicts, and the immutable snapshot and config they came from; rows are expanded
only when someone asks.

What a decision costs is what it keeps alive. A snapshot and its decision table cost ~2.6 MB
at 5000 nodes, so a quiet cluster, where each pod meets a new refresh, once kept 256 of them
for 256 pods: 750 MB measured. The log now keeps at most `whole` snapshots (and tables)
alive; a decision made on an older one is cut down to its own rows, each candidate's samples
and verdict (~4 KB per 500 candidates plus the samples themselves). A burst decides many pods
per refresh, so it rarely cuts anything; a quiet cluster cuts one pod's decisions per refresh.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from loadext.config import Config
from loadext.core.herd.learned import Estimate
from loadext.core.herd.usage import Usage
from loadext.core.policy import Verdict
from loadext.core.snapshot import Sample, Snapshot

NodeSamples = Mapping[str, Sample] | None  # signal -> sample of one candidate; None: no data


@dataclass(frozen=True, slots=True)
class Decision:
    verb: str
    time: float
    names: list[str]
    identities: list[str] | None  # None: identities are the names ("": a node without one)
    verdicts: list[Verdict] | Mapping[str, Verdict]  # per name, or the table's identity -> verdict
    snapshot: Snapshot | None  # None once cut down: `samples` holds the candidates' rows
    config: Config
    # With the herd guard on: the pod's own estimate, and per node what was in flight then.
    estimate: Estimate | None = None
    in_flight: Mapping[str, tuple[Usage, int]] | None = None
    samples: list[NodeSamples] | None = None  # per name, once the snapshot is let go

    def node_verdicts(self) -> list[Verdict]:
        """One verdict per name: a table-decided call kept the table's (immutable) lookup
        instead of building a list on the scheduling path."""
        if isinstance(self.verdicts, list):
            return self.verdicts
        lookup = self.verdicts
        if self.identities is None:
            return list(map(lookup.__getitem__, self.names))
        return list(map(lookup.__getitem__, self.identities))

    def node_samples(self) -> list[NodeSamples]:
        """One row of samples per name, as they were when the decision was made."""
        if self.samples is not None:
            return self.samples
        assert self.snapshot is not None  # a decision keeps one or the other
        return list(map(self.snapshot.by_identity.get, self.identities or self.names))

    def pins(self) -> tuple[int, int]:
        """What this decision keeps alive beyond its own rows: the snapshot, and the table's
        verdict lookup when the table alone decided (a verdict list is the decision's own)."""
        table = 0 if isinstance(self.verdicts, list) else id(self.verdicts)
        return id(self.snapshot), table

    def cut_down(self) -> Decision:
        """The same decision holding only its own rows, not the snapshot and table."""
        return dataclasses.replace(self, verdicts=self.node_verdicts(), snapshot=None, samples=self.node_samples())


class DecisionLog:
    """The decisions of the last `size` pods decided. A dict in the order pods were last
    decided, not a cachetools LRUCache: cutting decisions down walks every entry, and an
    LRUCache's reads would reorder it."""

    def __init__(self, size: int = 256, whole: int = 4) -> None:
        self._pods: dict[str, dict[str, Decision]] = {}
        self._size = size
        self._pinned: dict[tuple[int, int], None] = {}  # what whole decisions keep alive, oldest first
        self._whole = whole

    def record(self, pod: str, decision: Decision) -> None:
        verbs = self._pods.pop(pod, None)
        if verbs is None:
            verbs = {}
            if len(self._pods) >= self._size:
                del self._pods[next(iter(self._pods))]
        self._pods[pod] = verbs
        verbs[decision.verb] = decision
        pins = decision.pins()
        if pins not in self._pinned:
            self._pinned[pins] = None
            if len(self._pinned) > self._whole:
                del self._pinned[next(iter(self._pinned))]
                self._cut_down_unpinned()

    def _cut_down_unpinned(self) -> None:
        for verbs in self._pods.values():
            for verb, decision in verbs.items():
                if decision.snapshot is not None and decision.pins() not in self._pinned:
                    verbs[verb] = decision.cut_down()

    def get(self, pod: str) -> dict[str, Decision] | None:
        return self._pods.get(pod)
