"""The herd guard's memo: corrected verdicts per node for one pod size, kept current between calls."""

from __future__ import annotations

from dataclasses import dataclass

from cachetools import LRUCache

from loadext.core.herd.inflight import InFlight
from loadext.core.herd.usage import Usage
from loadext.core.policy import Verdict


class IncomingVerdicts:
    """The herd guard's verdicts for one incoming pod size, kept current per node: with the
    estimates in flight on each node plus the incoming pod's, as correction.corrected decides them.

    A burst is mostly pods of one size (a ReplicaSet's). Between calls only a few nodes change
    (a placement or two), so a call re-judges the nodes InFlight reports changed and looks the
    rest up: a dict lookup per candidate, not a judge. The memo is dropped when the decision
    table, any node's allocatable or the node-to-identity mapping changes (`versions`)."""

    def __init__(self, sizes: int = 16) -> None:
        self._key: tuple[object, tuple[int, int]] | None = None
        self._by_size: LRUCache[Usage, SizeMemo] = LRUCache(maxsize=sizes)

    def for_size(self, table: object, versions: tuple[int, int], incoming: Usage, inflight: InFlight) -> SizeMemo:
        """The memo for this pod size, with the nodes changed in flight since the last call
        dropped (those it had a verdict for are listed in `stale`); the caller judges what is
        missing."""
        if self._key is None or self._key[0] is not table or self._key[1] != versions:
            self._key = (table, versions)
            self._by_size.clear()
        memo = self._by_size.get(incoming)
        if memo is None:
            memo = self._by_size[incoming] = SizeMemo(inflight.version, {}, {}, set())
            return memo
        changed = inflight.changed_since(memo.version)
        if changed is None:
            memo.verdicts.clear()
            memo.overloads.clear()
            memo.stale.clear()
        else:
            for node in changed:
                if memo.verdicts.pop(node, None) is not None:
                    memo.stale.add(node)
                memo.overloads.pop(node, None)
        memo.version = inflight.version
        return memo


@dataclass(slots=True)
class SizeMemo:
    version: int  # InFlight.version the entries are current with
    verdicts: dict[str, Verdict]  # correction.corrected per node
    overloads: dict[str, float | None]  # corrected_overload per node, filled only when soft mode asks
    stale: set[str]  # nodes whose verdict was dropped for a change in flight: re-judge before reading
