"""The verbs' counts wait as plain ints and reach /metrics at each scrape: exact, whatever the
number of calls between two scrapes, on either port's /metrics."""

from __future__ import annotations

from typing import Any

from harness.inprocess import client_for, post, stored_app
from harness.metrics_text import metric_value
from harness.wire import fixture_bytes


async def test_counts_between_scrapes_reach_the_next_scrape_exactly(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client, stored_app())  # ceph1 30 %, ceph2 95 % (refused), ceph3 10 %

    async def scrape() -> str:
        reply = await client.get("/metrics")
        return await reply.text()

    before = await scrape()
    for _ in range(3):
        assert (await post(client, "/filter", fixture_bytes("filter-names.json")))[0] == 200
    assert (await post(client, "/prioritize", fixture_bytes("prioritize-names.json")))[0] == 200
    after = await scrape()

    def delta(name: str, **labels: str) -> float:
        return metric_value(after, name, **labels) - metric_value(before, name, **labels)

    assert delta("loadext_filter_nodes_total", result="passed") == 3 * 2
    assert delta("loadext_filter_nodes_total", result="rejected") == 3 * 1
    assert delta("loadext_node_rejections_total", signal="cpu", cause="threshold") == 3
    scored = sum(delta("loadext_prioritize_scores_total", score=str(s)) for s in range(11))
    assert scored == 3  # one score per node of the prioritize body
    again = await scrape()  # nothing new: nothing counted twice
    assert metric_value(again, "loadext_filter_nodes_total", result="passed") == metric_value(
        after, "loadext_filter_nodes_total", result="passed"
    )
