"""The last decisions per pod, for "why did my pod go there / not there".

Recording is O(1) on the scheduling path: a decision keeps references to the request's name
list, the verdicts, and the immutable snapshot and config they came from; rows are expanded
only when someone asks. The memory is a bounded LRU (cachetools): with 500-node requests, 256
pods cost a few MB.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cachetools import LRUCache

from loadext.config import Config
from loadext.core.herd import Usage
from loadext.core.policy import Verdict
from loadext.core.snapshot import Snapshot
from loadext.core.usage import Estimate


@dataclass(frozen=True, slots=True)
class Decision:
    verb: str
    time: float
    names: list[str]
    identities: list[str | None] | None  # None: identities are the names
    verdicts: list[Verdict] | Mapping[str, Verdict]  # per name, or the table's identity -> verdict
    snapshot: Snapshot
    config: Config
    # With the herd guard on: the pod's own estimate, and per node what was in flight then.
    estimate: Estimate | None = None
    in_flight: Mapping[str, tuple[Usage, int]] | None = None

    def node_verdicts(self) -> list[Verdict]:
        """One verdict per name: a table-decided call kept the table's (immutable) lookup
        instead of building a list on the scheduling path."""
        if isinstance(self.verdicts, list):
            return self.verdicts
        lookup = self.verdicts
        return [lookup[identity or ""] for identity in (self.identities or self.names)]


class DecisionLog:
    def __init__(self, size: int = 256) -> None:
        self._pods: LRUCache[str, dict[str, Decision]] = LRUCache(maxsize=size)

    def record(self, pod: str, decision: Decision) -> None:
        verbs = self._pods.get(pod)
        if verbs is None:
            verbs = self._pods[pod] = {}
        verbs[decision.verb] = decision

    def get(self, pod: str) -> dict[str, Decision] | None:
        return self._pods.get(pod)
