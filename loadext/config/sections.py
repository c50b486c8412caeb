"""The `rebalance:` and `herdGuard:` sections, read field by field into their dataclasses
(schema.py declares each field's key and default; reading.py the value readers)."""

from __future__ import annotations

from loadext.config.promql import derive_window
from loadext.config.reading import (
    Section,
    boolean,
    choice,
    count,
    names,
    positive_count,
    positive_duration,
    promql_or_off,
    quantity_value,
    ratio,
)
from loadext.config.schema import REBALANCE_MODES, HerdGuard, Rebalance, Signal


def rebalance(section: Section) -> Rebalance:
    taints, stop_rule = section.section("taints"), section.section("stopRule")
    rebalance = Rebalance(
        enabled=section.setting(Rebalance, "enabled", boolean),
        mode=section.setting(Rebalance, "mode", choice(*REBALANCE_MODES)),
        hot_for=section.setting(Rebalance, "hot_for", positive_count),
        cool_for=section.setting(Rebalance, "cool_for", positive_count),
        over_for=section.setting(Rebalance, "over_for", count),
        cycle=section.setting(Rebalance, "cycle", positive_duration),
        max_per_node_per_cycle=section.setting(Rebalance, "max_per_node_per_cycle", count),
        max_per_cycle=section.setting(Rebalance, "max_per_cycle", count),
        max_unavailable_per_workload=section.setting(Rebalance, "max_unavailable_per_workload", positive_count),
        min_pod_age=section.setting(Rebalance, "min_pod_age", positive_duration),
        excluded_namespaces=section.setting(Rebalance, "excluded_namespaces", names),
        evict_local_storage=section.setting(Rebalance, "evict_local_storage", boolean),
        taint_hot=taints.setting(Rebalance, "taint_hot", boolean),
        taint_refused=taints.setting(Rebalance, "taint_refused", boolean),
        pending_for=stop_rule.setting(Rebalance, "pending_for", positive_duration),
        pause_for=stop_rule.setting(Rebalance, "pause_for", positive_duration),
    )
    taints.finish()
    stop_rule.finish()
    section.finish()
    return rebalance


def herd_guard(doc: Section, signals: tuple[Signal, ...], refresh: float) -> HerdGuard:
    section = doc.section("herdGuard")
    best_effort = section.section("bestEffort")
    pod_usage = section.section("podUsage")
    guard = HerdGuard(
        enabled=section.setting(HerdGuard, "enabled", boolean),
        window=section.setting(
            HerdGuard, "window", positive_duration, derive_window((s.query for s in signals), refresh)
        ),
        cpu_limit_factor=section.setting(HerdGuard, "cpu_limit_factor", ratio),
        memory_limit_factor=section.setting(HerdGuard, "memory_limit_factor", ratio),
        best_effort_cpu=best_effort.setting(HerdGuard, "best_effort_cpu", quantity_value),
        best_effort_memory=best_effort.setting(HerdGuard, "best_effort_memory", quantity_value),
        burst_cap=section.setting(HerdGuard, "burst_cap", count),
        soft=section.setting(HerdGuard, "soft", boolean),
        pod_usage_cpu=pod_usage.setting(HerdGuard, "pod_usage_cpu", promql_or_off),
        pod_usage_memory=pod_usage.setting(HerdGuard, "pod_usage_memory", promql_or_off),
    )
    pod_usage.finish()
    best_effort.finish()
    section.finish()
    return guard
