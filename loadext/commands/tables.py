"""The tables loadext's commands print: explain's nodes, a pod's last decisions, replay's steps."""

from __future__ import annotations

import time
from typing import Any


def table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]


def format_pod_decisions(report: dict[str, Any]) -> str:
    """A pod's last filter and prioritize, one row per candidate node."""
    lines = []
    for verb in ("filter", "prioritize"):
        decision = report.get(verb)
        if decision is None:
            continue
        signals = sorted({s for node in decision["nodes"] for s in node["signals"]})
        herd = "estimate" in decision
        header = ["NODE", *(s.upper() for s in signals), *(["IN FLIGHT"] if herd else []), "POOL", "VERDICT"]
        rows = [[*header, "SCORE", "REASON"]]
        for node in decision["nodes"]:
            cells = [node["node"]]
            for signal in signals:
                sample = node["signals"].get(signal)
                cells.append(
                    f"{sample['value'] * 100:.0f}%/{(sample['threshold'] or 0) * 100:g}% ({sample['age']:.0f}s)"
                    if sample
                    else "-"
                )
            if herd:
                cells.append(_in_flight_cell(node.get("inFlight")))
            cells += [node["pool"] or "-", node["verdict"], str(node["score"]), node["reason"] or "-"]
            rows.append(cells)
        lines.append(f"{verb} for {report['pod']} (config {decision['configHash']}); values are value/threshold (age):")
        if herd:
            estimate = decision["estimate"]
            source = estimate["source"]
            lines.append(
                f"the pod counts as {estimate['cpuCores']:g} cores (from {source['cpu']}), "
                f"{estimate['memoryBytes'] / 2**20:.0f} MiB (from {source['memory']}), "
                "added to each node with what is in flight there"
            )
        lines.extend(table(rows))
        lines.append("")
    return "\n".join(lines).rstrip()


def _in_flight_cell(flight: dict[str, Any] | None) -> str:
    if not flight:
        return "-"
    return f"{flight['pods']} pod{'s' if flight['pods'] != 1 else ''}, {flight['cpuCores']:g} cores"


def format_explain(report: dict[str, Any]) -> str:
    """The table an SRE reads when asking "why not this node"."""
    signals = [s["name"] for s in report["signals"]]
    herd = report["herdGuard"]["enabled"]
    header = ["NODE", *(s.upper() for s in signals), *(["IN FLIGHT"] if herd else []), "VERDICT", "SCORE", "REASON"]
    rows = [header]
    for node in report["nodes"]:
        cells = [node["node"]]
        for signal in signals:
            sample = node["signals"].get(signal)
            cells.append(f"{sample['value'] * 100:.0f}% ({sample['age']:.0f}s)" if sample else "-")
        if herd:  # pods placed within the window, counted until the metrics can show them
            cells.append(_in_flight_cell(node.get("inFlight")))
        cells += [node["verdict"], str(node["score"]), node["reason"] or "-"]
        rows.append(cells)
    lines = table(rows)
    thresholds = ", ".join(
        f"{s['name']} {'-' if s['threshold'] is None else format(s['threshold'] * 100, 'g') + '%'}"
        for s in report["signals"]
    )
    lines.append("")
    lines.append(
        f"thresholds: {thresholds}; strategy {report['strategy']}; missingData "
        f"{report['missingData']}; failurePolicy {report['failurePolicy']}; filterMode {report['filterMode']}; "
        f"config {report['configHash']}"
    )
    if report["degraded"]:
        lines.append("DEGRADED: no fresh data from Prometheus; the failure policy decides every node")
    for endpoint in report.get("prometheus", {}).get("endpoints", []):
        if not endpoint["up"]:
            lines.append(f"prometheus endpoint {endpoint['url']} is down: {endpoint['lastError']}")
    for s in report["signals"]:
        if s.get("partial"):
            lines.append(f"{s['name']}: partial data ({s['partial']}): nodes whose series are missing have none")
    for s in report["signals"]:
        error = s.get("lastError")
        if s.get("failingFor") is not None and error:
            success = "never" if s["lastSuccess"] is None else f"{report['time'] - s['lastSuccess']:.0f}s ago"
            lines.append(
                f"{s['name']}: queries failing for {s['failingFor']:.0f}s ({error['kind']}): {error['message']}; "
                f"last success {success}"
            )
            continue  # its series are missing because of that, whatever the mapping says
        if s["unmappedNodes"]:
            lines.append(
                f"{s['name']}: {len(s['unmappedNodes'])} nodes without a series: " + ", ".join(s["unmappedNodes"][:10])
            )
        if s["unmatchedSeries"]:
            lines.append(
                f"{s['name']}: {len(s['unmatchedSeries'])} series match no node: "
                + ", ".join(s["unmatchedSeries"][:10])
            )
    lines.extend(_rebalance_lines(report.get("rebalance"), report["time"]))
    return "\n".join(lines)


def _rebalance_lines(rebalance: dict[str, Any] | None, now: float) -> list[str]:
    """The rebalancer's state, the nodes on a streak and its last moves (docs/rebalancing.md)."""
    if not rebalance or not rebalance["enabled"]:
        return []
    lines = ["", f"rebalancer: {rebalance['state']}, mode {rebalance['mode']}"]
    for node, streaks in sorted(rebalance["nodes"].items()):
        for s in streaks:
            value = "no data" if s["value"] is None else f"{s['value'] * 100:.0f}%"
            if s["hot"]:
                state = f"hot for {now - s['since']:.0f}s" + (
                    " (over its threshold for overFor)" if s["lingered"] else ""
                )
            else:
                state = f"heating ({s['streak']} refreshes at or above evictAt, {s['over']} over the threshold)"
            level = f"threshold {s['threshold'] * 100:g}%, evictAt {s['evictAt'] * 100:g}%"
            lines.append(f"  {node} {s['signal']} {value} ({level}): {state}")
    for move in rebalance["last"][:10]:
        where = move.get("target") or move.get("skipped") or move.get("detail") or ""
        lines.append(f"  {move['result']}: {move['pod'] or move['node']} ({move['reason']}) {where}".rstrip())
    for workload, pause in sorted(rebalance.get("paused", {}).items()):
        lines.append(f"  paused for {pause['until'] - now:.0f}s more: {workload}: {pause['why']}")
    for node, daemon_sets in sorted(rebalance.get("daemonPodsHeldBack", {}).items()):
        lines.append(f"  refused taint holds back on {node}: {', '.join(daemon_sets)}")
    return lines


def format_replay(steps: dict[str, list[Any]], summary: dict[str, Any]) -> str:
    names = list(steps)
    rows = [["TIME", *(f"{n.upper()} REFUSED" for n in names), *(f"{n.upper()} FAVOURITE" for n in names)]]
    for i, step in enumerate(steps[names[-1]]):
        at = [steps[n][i] if i < len(steps[n]) else None for n in names]
        refused = [", ".join(f"{k} {v}" for k, v in s.refused.items()) if s else "-" for s in at]
        rows.append([time_text(step.time), *refused, *((s.top or "-") if s else "-" for s in at)])
    lines = table(rows)
    lines.append("")
    for name in names:
        totals = ", ".join(f"{k} {v}" for k, v in summary[name]["refused"].items())
        lines.append(f"{name}: node-steps refused by signal: {totals}")
    if len(names) > 1:
        lines.append(f"same favourite node in {summary['sameFavourite']:.0%} of {summary['steps']} steps")
    return "\n".join(lines)


def time_text(stamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(stamp))
