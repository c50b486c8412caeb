"""Thanos on loopback: a sidecar beside each Prometheus of an HA pair, and Thanos Query over
them, deduplicating on the `replica` external label. Built from its Go module with the
`slicelabels` tag, as Thanos' own release build sets it (.promu.yml): without it, Thanos'
gRPC codec reads Prometheus' string-backed labels as a slice and the sidecar panics on the
querier's first call (`makeslice: len out of range` in extgrpc.nonPoolingCodec.Marshal)."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path

from harness.prometheus import PrometheusServer, free_port
from harness.served import Served

THANOS = ("thanos", "./cmd/thanos", "v0.42.4", "github.com/thanos-io/thanos", "slicelabels")
ROOT = Path(__file__).resolve().parent.parent


def built_thanos() -> str:
    """The path of the thanos binary (built on first use if scripts/test.sh did not)."""
    name, package, version, module, tags = THANOS
    script = ROOT / "scripts" / "build-go-tool.sh"
    argv = ["bash", str(script), "--module", module, "--tags", tags, name, package, version]
    built = subprocess.run(argv, capture_output=True, text=True, check=False)
    if built.returncode != 0:
        raise RuntimeError(f"building thanos {version} failed (it needs Go): {built.stderr.strip()[-2000:]}")
    return built.stdout.strip()


class Sidecar(Served):
    """Serves its Prometheus' data over Thanos' StoreAPI (gRPC at `grpc`)."""

    health = "/-/ready"

    def __init__(self, workdir: str, name: str, prometheus: PrometheusServer, data_dir: str) -> None:
        self.grpc = f"127.0.0.1:{free_port()}"
        port = free_port()
        argv = [
            built_thanos(),
            "sidecar",
            f"--prometheus.url={prometheus.url}",
            f"--tsdb.path={data_dir}",
            f"--grpc-address={self.grpc}",
            f"--http-address=127.0.0.1:{port}",
            "--log.level=warn",
        ]
        super().__init__(workdir, name, argv, port)


class Query(Served):
    """Thanos Query over `stores`, each strict: kept in the store set while down, so a query
    reaches it and the reply warns that its data is missing (a non-strict store that stops
    answering is dropped, and its data goes missing without a warning)."""

    health = "/-/ready"

    def __init__(self, workdir: str, stores: list[str]) -> None:
        port = free_port()
        argv = [
            built_thanos(),
            "query",
            f"--http-address=127.0.0.1:{port}",
            f"--grpc-address=127.0.0.1:{free_port()}",
            *(f"--endpoint-strict={store}" for store in stores),
            "--query.replica-label=replica",
            "--log.level=warn",
        ]
        super().__init__(workdir, "thanos-query", argv, port)

    def healthy_stores(self) -> int:
        """How many stores Query has reached (its /api/v1/stores, by type)."""
        with urllib.request.urlopen(f"{self.url}/api/v1/stores", timeout=5) as reply:
            stores = json.load(reply)["data"] or {}
        return sum(1 for group in stores.values() for store in group if not store.get("lastError"))
