"""Live config reload, from a mounted ConfigMap file or from the ConfigMap object itself.

Both sources hand raw text to one ConfigReloader, which applies a valid new version and rejects
an invalid one loudly (log line, metric, and an optional callback that kube.py uses to write a
Kubernetes Event) while the last good config stays in force.

The kubelet updates a ConfigMap volume by writing a new timestamped directory and swapping the
`..data` symlink, so inotify on the file itself misses the change. Polling the path's content
hash sees it whatever the mechanism (symlink swap, in-place write, editor rename).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from typing import Any

from loadext.config import Config, ConfigError, parse_config
from loadext.config.serving import ConfigSource
from loadext.sources import kube
from loadext.telemetry.reload import ReloadMetrics

log = logging.getLogger(__name__)


class ConfigReloader:
    def __init__(
        self,
        initial_text: str,
        apply: Callable[[Config], None],
        metrics: ReloadMetrics,
        on_rejected: Callable[[str], None] | None = None,
    ) -> None:
        self.apply = apply
        self.metrics = metrics
        self.on_rejected = on_rejected
        self._seen: str | None = _digest(initial_text)
        self.last_error: str | None = None

    def offer(self, text: str, source: str) -> bool | None:
        """A version of the config: True if applied, False if rejected, None if unchanged."""
        digest = _digest(text)
        if digest == self._seen:
            return None
        try:
            config = parse_config(text, source=source)
        except ConfigError as exc:
            self.reject(str(exc))
            self._seen = digest  # the same broken text again is no news
            return False
        self._seen = digest
        self.apply(config)
        self.last_error = None
        self.metrics.accepted()
        log.info("config reloaded from %s (hash %s)", source, config.hash)
        return True

    def reject(self, message: str) -> None:
        """Report a config that cannot be used; repeated identical reports are logged once.
        Whatever text comes next is evaluated, even the one in force: a deleted ConfigMap
        re-created unchanged must clear the failure."""
        self._seen = None
        if message == self.last_error:
            return
        self.last_error = message
        log.error("config reload rejected, keeping the last good config: %s", message)
        self.metrics.rejected()
        if self.on_rejected is not None:
            self.on_rejected(message)


class ConfigFileWatcher:
    def __init__(self, path: str, reloader: ConfigReloader, interval: float = 2.0) -> None:
        self.path = path
        self.reloader = reloader
        self.interval = interval

    def check(self) -> bool | None:
        try:
            with open(self.path, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
        except OSError as exc:
            self.reloader.reject(f"cannot read {self.path}: {exc}")
            return False
        return self.reloader.offer(text, self.path)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.check()


def initial_text(source: ConfigSource, api: Any) -> tuple[str, str]:
    """The config document at start, and where it came from (for log lines and errors): the
    ConfigMap's key when --configmap names one (read through `api`), else the file."""
    ref = source.configmap_ref
    if ref is not None:
        if api is None:
            raise OSError("--configmap needs a Kubernetes API client (--kubeconfig, or run in a pod)")
        text = kube.read_configmap(api, ref.namespace, ref.name, ref.key)
        return text, f"configmap {ref.namespace}/{ref.name} key {ref.key}"
    where = source.file or ""
    with open(where, encoding="utf-8") as handle:
        return handle.read(), where


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
