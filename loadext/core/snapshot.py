"""The TTL cache of per-node signal values, and the immutable snapshots policy decides from.

Values expire after maxDataAge: a node whose data stopped arriving is treated as missing, never
as idle (Volcano's trap) nor as forever-hot (Trimaran's). The scheduling path only ever reads a
Snapshot, which is rebuilt after each refresh, so it never waits on Prometheus.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from cachetools import TTLCache


@dataclass(frozen=True, slots=True)
class Sample:
    value: float  # 0..1
    timestamp: float  # wall-clock seconds at which Prometheus evaluated it
    mean: float | None = None  # riskAware: mean over the risk window
    stddev: float | None = None  # riskAware: standard deviation over the risk window

    def fresh(self, now: float, max_age: float) -> bool:
        return fresh(self.timestamp, now, max_age)


def fresh(timestamp: float, now: float, max_age: float) -> bool:
    """Younger than maxDataAge: the one rule for whether a value (or a query's last success)
    still says anything."""
    return now - timestamp < max_age


@dataclass(frozen=True)
class Snapshot:
    """Everything loadext believes at one moment; shared read-only by every request."""

    by_identity: Mapping[str, Mapping[str, Sample]]  # identity -> signal -> sample
    last_success: Mapping[str, float]  # signal -> wall time of its last successful query
    version: int
    series_counts: Mapping[str, int] = field(default_factory=dict)  # signal -> series stored
    keys_version: int = 0  # bumps when which identities have which signals changes, not their values

    @property
    def newest(self) -> float | None:
        return max(self.last_success.values(), default=None)


EMPTY_SNAPSHOT = Snapshot(by_identity={}, last_success={}, version=0)


@dataclass(frozen=True, slots=True)
class SignalValues:
    """One signal's successful query: identity -> value (0..1), evaluated at `timestamp`."""

    signal: str
    values: Mapping[str, float]
    timestamp: float
    means: Mapping[str, float] = field(default_factory=dict)  # riskAware only
    stddevs: Mapping[str, float] = field(default_factory=dict)


class SnapshotCache:
    """signal -> (identity -> Sample) of its last round, in a cachetools TTLCache whose ttl is
    maxDataAge."""

    def __init__(self, max_age: float, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._max_age = max_age
        self._cache: TTLCache[str, dict[str, Sample]] = self._new_cache(max_age)
        self._last_success: dict[str, float] = {}
        self._versions = itertools.count(1)
        self._keys_version = 0
        self._keys_built: tuple[str, ...] = ()  # the signals of the last build, to see one expire
        self._built = EMPTY_SNAPSHOT  # the last one built (published or about to be)
        self._snapshot = EMPTY_SNAPSHOT
        # The refresher stores and rebuilds in a worker thread; config reloads touch the cache
        # on the event loop. TTLCache is not thread-safe, so every method takes this lock.
        self._lock = threading.RLock()

    def _new_cache(self, max_age: float) -> TTLCache[str, dict[str, Sample]]:
        # One entry per signal, holding that signal's samples of one refresh round: a round
        # replaces a signal's values wholesale and they all age together, so expiring per signal
        # is expiring per sample, at a few operations per round instead of one per node (at
        # 5000 nodes a TTLCache entry per sample cost ~200 ms of GIL per refresh).
        return TTLCache(maxsize=1024, ttl=max_age, timer=self._clock)

    @property
    def max_age(self) -> float:
        return self._max_age

    def set_max_age(self, max_age: float) -> None:
        """A reloaded config may change maxDataAge; keep what is still young enough."""
        with self._lock:
            self._set_max_age(max_age)

    def _set_max_age(self, max_age: float) -> None:
        if max_age == self._max_age:
            return
        now, old = self._clock(), self._cache
        self._max_age, self._cache = max_age, self._new_cache(max_age)
        self._keys_version += 1
        for signal, samples in old.items():
            young = {identity: s for identity, s in samples.items() if s.fresh(now, max_age)}
            if young:
                self._cache[signal] = young
        self.rebuild()

    def store_round(self, results: Iterable[SignalValues]) -> Snapshot:
        """A refresh round's successful queries, each replacing its signal's values (absent
        series are gone); returns the snapshot of them, for the caller to publish together
        with its decision table."""
        with self._lock:
            stored = False
            for result in results:
                self._store(result)
                stored = True
            self._cache.expire()
            if not stored and tuple(self._cache) == self._keys_built and self._built.version:
                return self._built  # no query answered and nothing expired: nothing to build again
            return self._build()

    def _store(self, result: SignalValues) -> None:
        timestamp, means, stddevs = result.timestamp, result.means, result.stddevs
        if means or stddevs:
            samples = {
                identity: Sample(value, timestamp, means.get(identity), stddevs.get(identity))
                for identity, value in result.values.items()
            }
        else:
            samples = {identity: Sample(value, timestamp) for identity, value in result.values.items()}
        previous = self._cache.get(result.signal)
        if previous is None or previous.keys() != samples.keys():
            self._keys_version += 1
        self._cache[result.signal] = samples
        self._last_success[result.signal] = timestamp

    def forget_signals_except(self, signals: set[str]) -> None:
        """Drop signals removed by a config reload."""
        with self._lock:
            self._forget_signals_except(signals)

    def _forget_signals_except(self, signals: set[str]) -> None:
        self._cache.expire()
        for signal in [s for s in self._cache if s not in signals]:
            del self._cache[signal]
            self._keys_version += 1
        for name in [s for s in self._last_success if s not in signals]:
            del self._last_success[name]

    def rebuild(self) -> None:
        """Publish a new snapshot of the unexpired values (after a config change)."""
        with self._lock:
            self.publish(self._build())

    def publish(self, snapshot: Snapshot) -> None:
        """The one way a snapshot becomes the one requests read."""
        self._snapshot = snapshot

    def _build(self) -> Snapshot:
        self._cache.expire()
        signals = tuple(self._cache)
        if signals != self._keys_built:
            self._keys_built = signals
            self._keys_version += 1
        by_identity: dict[str, dict[str, Sample]] = {}
        counts: dict[str, int] = {}
        for signal, samples in self._cache.items():
            if samples:
                counts[signal] = len(samples)
            for identity, sample in samples.items():
                node = by_identity.get(identity)
                if node is None:
                    by_identity[identity] = {signal: sample}
                else:
                    node[signal] = sample
        self._built = Snapshot(
            by_identity=by_identity,
            last_success=dict(self._last_success),
            version=next(self._versions),
            series_counts=counts,
            keys_version=self._keys_version,
        )
        return self._built

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot
