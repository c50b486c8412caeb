"""`loadext rebalance --once`: one rebalancing cycle now, printed; it evicts only with
`rebalance.mode: evict` in the config and without --dry-run."""

from __future__ import annotations

import os
import sys

import orjson

from loadext.commands import EXIT_OK, EXIT_PROMETHEUS, UsageError
from loadext.config import load_config


def run(config_path: str, kubeconfig: str | None, dry_run: bool, output: str) -> int:
    from loadext.app import rebalance_once  # the composition root: only this command needs it

    if not kubeconfig and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        raise UsageError("rebalance reads the pods of hot nodes and evicts through the API: give --kubeconfig")
    config = load_config(config_path)
    status, done = rebalance_once(config, kubeconfig, dry_run)
    if status == "paused":
        print("error: no fresh metrics from Prometheus: the rebalancer never acts on stale data", file=sys.stderr)
        return EXIT_PROMETHEUS
    if output == "json":
        for step in done:
            sys.stdout.buffer.write(orjson.dumps(step.as_json()) + b"\n")
        return EXIT_OK
    if not done:
        print("no node is hot: none is at or above its evictAt")
        return EXIT_OK
    rows = [("NODE", "POD", "RESULT", "TARGET OR WHY NOT", "REASON")]
    rows += [(d.node, d.pod or "-", d.result, d.target or d.skipped or d.detail, d.reason) for d in done]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[4])
    return EXIT_OK
