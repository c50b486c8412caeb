"""/metrics in the format the scraper asks for: OpenMetrics for Prometheus (which asks for it
first), the text format otherwise; the per-node families, rendered per refresh round, in both."""

from __future__ import annotations

from typing import Any

from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families as text_families

from harness.inprocess import client_for, stored_app
from loadext.core.explain import node_states

# What Prometheus 2.x sends (scrape_protocols' default order).
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


async def test_metrics_are_openmetrics_for_prometheus_and_text_for_the_rest(aiohttp_client: Any) -> None:
    app = stored_app()
    app.telemetry.nodes.render(node_states(app.cluster.explained))  # as after a refresh round
    client = await client_for(aiohttp_client, app)

    reply = await client.get("/metrics", headers={"Accept": PROMETHEUS_ACCEPT})
    assert reply.headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    text = await reply.text()
    assert text.endswith("# EOF\n") and text.count("# EOF") == 1
    families = {family.name: family for family in openmetrics_families(text)}  # strict: fails on a bad line
    schedulable = {s.labels["node"]: s.value for s in families["loadext_node_schedulable"].samples}
    assert schedulable and set(schedulable.values()) <= {0.0, 1.0}
    assert families["loadext_requests"].type == "counter" and "loadext_requests_created" not in families

    reply = await client.get("/metrics")
    assert reply.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    plain = {family.name: family for family in text_families(await reply.text())}
    assert {s.labels["node"]: s.value for s in plain["loadext_node_schedulable"].samples} == schedulable
