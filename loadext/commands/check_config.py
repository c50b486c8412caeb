"""`loadext check-config FILE [--prometheus URL]`: the file validated, its PromQL parsed, and
with a Prometheus each query run once and what it returns checked."""

from __future__ import annotations

from dataclasses import replace

from loadext.commands import EXIT_INVALID, EXIT_OK, EXIT_PROMETHEUS
from loadext.config import load_config
from loadext.config.prometheus import endpoint
from loadext.sources.prometheus import QueryResult
from loadext.sources.query_error import QueryError


def run(path: str, prometheus: str | None) -> int:
    config = load_config(path, check_queries=True)
    print(f"{path}: ok (hash {config.hash}, signals: {', '.join(s.name for s in config.signals)})")
    if not prometheus:
        return EXIT_OK
    from loadext.app import metrics_source  # the composition root names the backend

    url = endpoint(prometheus)  # a bad one says why (missing scheme, a query string, /api/v1)
    source = metrics_source(replace(config.prometheus, url=url, urls=()))
    identity = config.node_identity
    worst = EXIT_OK
    try:
        for signal in config.signals:
            try:
                result = source.query(signal.name, config.query_for(signal), identity)
            except QueryError as exc:
                print(f"  {signal.name}: query failed ({exc.kind}): {exc.detail}")
                worst = EXIT_PROMETHEUS
                continue
            problem = result_problem(result, identity.label)
            mapped = len(result.values)
            line = f"  {signal.name}: {mapped + result.unlabelled} series, {mapped} with label {identity.label!r}"
            if result.values:
                line += f", values {min(result.values.values()):.2f}..{max(result.values.values()):.2f}"
            print(line + (f": {problem}" if problem else ""))
            if problem and worst == EXIT_OK:
                worst = EXIT_INVALID
    finally:
        source.close()
    return worst


def result_problem(result: QueryResult, label: str) -> str | None:
    """What makes a query's answer unusable for loadext, said so that it can be fixed."""
    if not result.values and not result.unlabelled:
        return "returned no series (a typo in a metric name or label, or nothing scraped yet?)"
    if not result.values:
        return f"no series has the label {label!r}: check nodeIdentity (or the preset)"
    if result.highest is not None and result.highest > 1.5:
        return (
            f"values up to {result.highest:g} look like percent (0-100); loadext needs a 0..1 ratio: "
            "divide the query by 100"
        )
    return None
