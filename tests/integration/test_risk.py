"""The riskAware strategy against a real Prometheus holding 20 minutes of history: of two nodes
with the same mean, the noisier scores lower, and it still costs one query per signal."""

from __future__ import annotations

import time
from pathlib import Path

from harness.faultproxy import FaultProxy
from harness.inprocess import Loadext, StartLoadext
from harness.prometheus import PrometheusServer, backfill, risk_history
from harness.waiting import eventually
from harness.wire import names_request


async def test_noisier_node_scores_lower_with_one_query_per_signal(tmp_path: Path, start_loadext: StartLoadext) -> None:
    prom = PrometheusServer(
        str(tmp_path), "scrape_configs: []\n", data_dir=backfill(str(tmp_path), risk_history(time.time()))
    )
    proxy = FaultProxy(prom.url)
    try:
        config = {
            "prometheus": {"url": proxy.url},
            "refreshInterval": "1s",
            "signals": [{"name": "cpu", "query": "risk_cpu", "threshold": 0.9, "weight": 1}],
            "scoring": {"strategy": "riskAware", "riskWindow": "10m", "riskStdDevs": 1},
        }
        loadext = await start_loadext(config)

        async def scored() -> bool:
            _, scores = await loadext.post("prioritize", names_request("steady", "noisy"))
            got = {s["Host"]: s["Score"] for s in scores}
            assert got == {"steady": 5, "noisy": 2}  # 10 * (1 - (0.5 + 0)) vs 10 * (1 - (0.5 + 0.3))
            return True

        await eventually(scored)
        # Read both counters just after a refresh ends, in the quiet second before the next one.
        refreshes_before = await _just_refreshed(loadext, _refreshes(await loadext.metrics()) + 1)
        queries_before = proxy.requests
        refreshes_after = await _just_refreshed(loadext, refreshes_before + 3)
        assert proxy.requests - queries_before == refreshes_after - refreshes_before  # one query per refresh
    finally:
        proxy.close()
        prom.stop()


def _refreshes(metrics: str) -> float:
    for line in metrics.splitlines():
        if line.startswith('loadext_prometheus_query_duration_seconds_count{signal="cpu"}'):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no query duration count")


async def _just_refreshed(loadext: Loadext, at_least: float) -> float:
    async def check() -> float:
        count = _refreshes(await loadext.metrics())
        return count if count >= at_least else 0.0

    result: float = await eventually(check, interval=0.01)
    return result
