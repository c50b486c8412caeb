"""How each signal's queries are going: the last error (kind, message, time) and the last
success, so that `explain` and the logs say *why* a signal has no data instead of only that it
has none.

Logging follows the operator's attention: one line when a signal starts failing (or fails
differently), a reminder at most once per `reminder_interval` while it keeps failing, and one
line when it recovers. A steady failure is never silent and never floods the log.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("loadext.sources.refresher")


@dataclass
class Failure:
    kind: str
    message: str
    time: float


@dataclass
class _Status:
    last_success: float | None = None
    last_error: Failure | None = None
    failing_since: float | None = None
    reminded_at: float = 0.0
    partial: str = ""  # why the last answer may be incomplete; "" when it was whole


class SignalHealth:
    def __init__(self, clock: Callable[[], float], reminder_interval: float = 60.0) -> None:
        self._clock = clock
        self._reminder = reminder_interval
        self._status: dict[str, _Status] = {}

    def failed(self, signal: str, kind: str, message: str) -> None:
        now = self._clock()
        status = self._status.setdefault(signal, _Status())
        changed = status.failing_since is None or status.last_error is None or status.last_error.kind != kind
        if status.failing_since is None:
            status.failing_since = now
        status.last_error = Failure(kind, message, now)
        if changed:
            status.reminded_at = now
            log.warning("prometheus query for signal %s failed (%s): %s", signal, kind, message)
        elif now - status.reminded_at >= self._reminder:
            status.reminded_at = now
            log.warning(
                "prometheus query for signal %s still failing (%s) for %.0fs, last success %s: %s",
                signal,
                kind,
                now - status.failing_since,
                _ago(now, status.last_success),
                message,
            )

    def succeeded(self, signal: str, partial: str = "") -> None:
        """An answer; `partial` is what the backend warned of (a store down), "" for whole data.
        A change of partial-ness is logged once, like a failure."""
        now = self._clock()
        status = self._status.setdefault(signal, _Status())
        if status.failing_since is not None:
            log.info("prometheus query for signal %s recovered after %.0fs", signal, now - status.failing_since)
        status.failing_since = None
        status.last_success = now
        if partial and not status.partial:
            log.warning(
                "prometheus answered signal %s with partial data: %s; nodes whose series are missing have no "
                "data (partialResponse use; fail refuses such replies)",
                signal,
                partial,
            )
        elif status.partial and not partial:
            log.info("prometheus answers signal %s with whole data again", signal)
        status.partial = partial

    def failing(self, signal: str) -> Failure | None:
        """The current failure, None while the signal's last query succeeded."""
        status = self._status.get(signal)
        return status.last_error if status is not None and status.failing_since is not None else None

    def forget_except(self, signals: set[str]) -> None:
        for name in set(self._status) - signals:
            del self._status[name]

    def report(self, signal: str, now: float) -> dict[str, Any]:
        """The explain fields: the last success and the last error, each with its age."""
        status = self._status.get(signal, _Status())
        error = status.last_error
        return {
            "lastSuccess": status.last_success,
            "partial": status.partial or None,
            "failingFor": None if status.failing_since is None else round(now - status.failing_since, 1),
            "lastError": None
            if error is None
            else {"kind": error.kind, "message": error.message, "time": error.time, "age": round(now - error.time, 1)},
        }


def _ago(now: float, then: float | None) -> str:
    return "never" if then is None else f"{now - then:.0f}s ago"
