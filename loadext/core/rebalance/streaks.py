"""Which nodes run hot: per node and signal, a streak of refreshes, with hysteresis.

A signal of a node turns *hot* after `hotFor` consecutive refreshes whose fresh value is at or
above its `evictAt`, or after `overFor` consecutive refreshes over its filter threshold (0: never
for that alone), and *cool* again after `coolFor` consecutive refreshes within its filter
threshold (Koordinator's LowNodeLoad counts 5 abnormal and 3 normal checks alike). Between the
threshold and evictAt a hot signal stays hot and a cool one stays cool for up to `overFor`
refreshes: the gap keeps a node near its threshold from being moved from and back on a passing
rise, and `overFor` keeps a node the load left just over its threshold from staying there for
good (refused by the filter, so nothing more lands on it, but never relieved).

Only a new sample counts: a refresh whose query failed leaves the last sample in the snapshot
until maxDataAge, and counting it again would heat a node on data that did not change. Stale
or missing data never counts towards hot, and resets a streak; a node that leaves the snapshot
is forgotten. Only nodes with a streak are kept, so the state is as small as the trouble.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from loadext.config import Signal
from loadext.config.schema import Rebalance
from loadext.core.snapshot import Snapshot


@dataclass(slots=True)
class Streak:
    hot: bool = False
    count: int = 0  # consecutive refreshes towards the other state
    over: int = 0  # while cool: consecutive refreshes over the threshold, towards overFor
    lingered: bool = False  # hot by overFor, not by evictAt
    since: float = 0.0  # when the signal turned hot (or cool)
    seen: float = 0.0  # the timestamp of the last sample counted


@dataclass(frozen=True, slots=True)
class SignalHeat:
    """One signal of one node, as /explain and the plan see it."""

    signal: str
    value: float | None  # None: no fresh sample
    threshold: float
    evict_at: float
    hot: bool
    streak: int  # refreshes at or above evictAt (cool), or within the threshold (hot)
    over: int  # while cool: refreshes over the threshold, towards overFor
    lingered: bool  # hot because it stayed over the threshold for overFor, not at evictAt
    since: float  # hot since (or cool since)


class HotStreaks:
    def __init__(self) -> None:
        self._streaks: dict[tuple[str, str], Streak] = {}  # (identity, signal) -> streak

    def observe(
        self,
        snapshot: Snapshot,
        signals_of: Callable[[str], tuple[Signal, ...]],
        max_age: float,
        now: float,
        policy: Rebalance,
    ) -> None:
        """One refresh round: count every (node, signal) whose sample is new."""
        streaks, over_for = self._streaks, policy.over_for
        for identity in [i for i, _ in streaks if i not in snapshot.by_identity]:
            for key in [k for k in streaks if k[0] == identity]:
                del streaks[key]
        for identity, samples in snapshot.by_identity.items():
            for signal in signals_of(identity):
                level = signal.evict_level
                if level is None or signal.threshold is None:
                    continue
                key = (identity, signal.name)
                sample = samples.get(signal.name)
                streak = streaks.get(key)
                if sample is None or not sample.fresh(now, max_age):
                    if streak is not None:
                        streak.count = 0
                        if not streak.hot:
                            del streaks[key]
                    continue
                if streak is not None and sample.timestamp <= streak.seen:
                    continue  # the same sample as last round: nothing new to count
                lingering = over_for > 0 and signal.over(sample.value)
                if streak is None:
                    if sample.value < level and not lingering:
                        continue
                    streak = streaks[key] = Streak(since=now)
                streak.seen = sample.timestamp
                if not streak.hot:
                    streak.count = streak.count + 1 if sample.value >= level else 0
                    streak.over = streak.over + 1 if lingering else 0
                    if streak.count >= policy.hot_for or (lingering and streak.over >= over_for):
                        streak.lingered = streak.count < policy.hot_for
                        streak.hot, streak.count, streak.over, streak.since = True, 0, 0, now
                    elif streak.count == 0 and streak.over == 0:
                        del streaks[key]
                else:
                    streak.count = streak.count + 1 if not signal.over(sample.value) else 0
                    if streak.count >= policy.cool_for:
                        del streaks[key]  # cool again: nothing left to remember

    def forget(self) -> None:
        """A new config (thresholds, evictAt, hotFor, overFor): every streak starts again."""
        self._streaks.clear()

    def hot_identities(self) -> set[str]:
        return {identity for (identity, _), streak in self._streaks.items() if streak.hot}

    def report(
        self, snapshot: Snapshot, signals_of: Callable[[str], tuple[Signal, ...]], max_age: float, now: float
    ) -> dict[str, list[SignalHeat]]:
        """identity -> its signals with a streak (hot, or on the way to hot), for the plan and /explain."""
        out: dict[str, list[SignalHeat]] = {}
        for (identity, name), streak in sorted(self._streaks.items()):
            signal = next((s for s in signals_of(identity) if s.name == name), None)
            if signal is None or signal.threshold is None or signal.evict_level is None:
                continue
            sample = snapshot.by_identity.get(identity, {}).get(name)
            value = sample.value if sample is not None and sample.fresh(now, max_age) else None
            heat = SignalHeat(
                name, value, signal.threshold, signal.evict_level, streak.hot, streak.count, streak.over,
                streak.lingered, streak.since,
            )  # fmt: skip
            out.setdefault(identity, []).append(heat)
        return out
