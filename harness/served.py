"""A server process started by a test on loopback, ready once its health URL answers 200."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from harness.kubernetes import Process, wait_until


class Served:
    health = "/health"  # VictoriaMetrics and vmauth; Thanos serves /-/ready

    def __init__(self, workdir: str, name: str, argv: list[str], port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.process = Process(name, argv, Path(workdir))
        wait_until(self._healthy, name, timeout=30, process=self.process)

    def _healthy(self) -> bool:
        with urllib.request.urlopen(f"{self.url}{self.health}", timeout=1) as reply:
            return bool(reply.status == 200)

    def read_log(self) -> str:
        return self.process.log_tail()

    def stop(self) -> None:
        self.process.stop()
