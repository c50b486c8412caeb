"""Live config reload from a mounted ConfigMap file.

The kubelet updates a ConfigMap volume by writing a new timestamped directory and swapping the
`..data` symlink, so inotify on the file itself misses the change. Polling the path's content
hash sees it whatever the mechanism (symlink swap, in-place write, editor rename). A change that
fails validation is reported loudly and the last good config stays in force.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable

from loadext.config import Config, ConfigError, parse_config
from loadext.telemetry import Telemetry

log = logging.getLogger(__name__)


class ConfigFileWatcher:
    def __init__(
        self,
        path: str,
        initial_text: str,
        apply: Callable[[Config], None],
        telemetry: Telemetry,
        interval: float = 2.0,
    ) -> None:
        self.path = path
        self.apply = apply
        self.telemetry = telemetry
        self.interval = interval
        self._seen = _digest(initial_text.encode())
        self.last_error: str | None = None

    def check(self) -> bool | None:
        """Look once: True if a new config was applied, False if rejected, None if unchanged."""
        try:
            with open(self.path, "rb") as handle:
                raw = handle.read()
        except OSError as exc:
            message = f"cannot read {self.path}: {exc}"
            if message != self.last_error:
                log.error("config reload failed, keeping the last good config: %s", message)
                self.telemetry.config_reloads.labels("failure").inc()
                self.last_error = message
            return False
        digest = _digest(raw)
        if digest == self._seen:
            return None
        self._seen = digest
        try:
            config = parse_config(raw.decode("utf-8", errors="replace"), source=self.path)
        except ConfigError as exc:
            self.last_error = str(exc)
            log.error("config reload rejected, keeping the last good config: %s", exc)
            self.telemetry.config_reloads.labels("failure").inc()
            return False
        self.apply(config)
        self.last_error = None
        self.telemetry.config_reloads.labels("success").inc()
        log.info("config reloaded from %s (hash %s)", self.path, config.hash)
        return True

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.check()


def _digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()
