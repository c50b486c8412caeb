"""`loadext explain`: what loadext believes, from one Prometheus round (--config) or from a
running loadext (--url), as a table or JSON."""

from __future__ import annotations

import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import orjson

from loadext.commands import EXIT_INVALID, EXIT_OK, EXIT_PROMETHEUS, UsageError
from loadext.commands.tables import format_explain, format_pod_decisions
from loadext.config import load_config
from loadext.core.identity import identities_for


def from_prometheus(config_path: str, kubeconfig: str | None, nodes: list[str], output: str) -> int:
    """One refresh round with this config, then the same report as /explain."""
    from loadext.app import explain_once  # the composition root: only this command needs it

    config = load_config(config_path)
    if identities_for(config.node_identity).needs_addresses and not kubeconfig:
        raise UsageError(
            f"nodeIdentity kind {config.node_identity.kind!r} matches series to Nodes by their IPs, which only "
            "the API has: give --kubeconfig"
        )
    report = explain_once(config, kubeconfig, nodes)
    problems = [
        f"signal {s['name']}: query failed ({s['lastError']['kind']}): {s['lastError']['message']}"
        if s["failingFor"] is not None
        else f"signal {s['name']}: the query returned no series (check it with check-config --prometheus)"
        for s in report["signals"]
        if s["failingFor"] is not None or not s["series"]
    ]
    if problems:
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        return EXIT_PROMETHEUS
    _print(report, output, format_explain)
    return EXIT_OK


def from_url(url: str, pod: str | None, output: str) -> int:
    """A running loadext's /explain, or its last decisions for one pod."""
    query = "?" + urllib.parse.urlencode({"pod": pod}) if pod else ""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/explain" + query, timeout=10) as reply:
            report = orjson.loads(reply.read())
    except urllib.error.HTTPError as exc:
        print(f"error: {orjson.loads(exc.read()).get('error', exc)}", file=sys.stderr)
        return EXIT_INVALID
    _print(report, output, format_pod_decisions if pod else format_explain)
    return EXIT_OK


def _print(report: dict[str, Any], output: str, as_table: Any) -> None:
    if output == "json":
        sys.stdout.buffer.write(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print(as_table(report))
