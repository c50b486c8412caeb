"""Replay a candidate config over real Prometheus history, side by side with the one in force."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness.inprocess import StartLoadext, sees
from harness.prometheus import PrometheusServer, backfill, risk_history
from loadext.commands.replay import fetch
from loadext.config import parse_config
from loadext.sources.prometheus import PrometheusSource


@pytest.fixture
def prometheus_with_history(tmp_path: Path) -> PrometheusServer:
    data = backfill(str(tmp_path), risk_history(time.time()))
    prom = PrometheusServer(str(tmp_path), "scrape_configs: []\n", data_dir=data)
    yield prom  # type: ignore[misc]
    prom.stop()


def config_file(path: Path, url: str, threshold: float) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "prometheus": {"url": url},
                "signals": [{"name": "cpu", "query": "risk_cpu", "threshold": threshold, "weight": 1}],
            }
        )
    )
    return path


def test_replay_counts_what_a_tighter_threshold_would_have_refused(
    prometheus_with_history: PrometheusServer, tmp_path: Path
) -> None:
    current = config_file(tmp_path / "current.yaml", prometheus_with_history.url, 0.9)
    candidate = config_file(tmp_path / "candidate.yaml", prometheus_with_history.url, 0.7)
    chart = tmp_path / "replay.png"
    command = [
        sys.executable,
        "-m",
        "loadext",
        "replay",
        "--config",
        str(candidate),
        "--current",
        str(current),
        "--since",
        "10m",
        "--step",
        "30s",
    ]
    result = subprocess.run(
        [*command, "--output", "json", "--chart", str(chart)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    steps = report["summary"]["steps"]
    assert steps == 21  # 10 minutes at 30 s, both ends included
    # "noisy" alternates 20 % / 80 % every 15 s, so at 30 s steps it sits on one phase: either
    # always 80 % (refused at every step by the candidate) or always 20 %; "steady" is 50 %.
    refused = report["summary"]["candidate"]["refused"]["cpu"]
    assert refused in (0, steps)
    assert report["summary"]["current"]["refused"]["cpu"] == 0  # nothing is over 90 %
    noisy_at_80 = refused == steps
    favourites = {s["top"] for s in report["steps"]["candidate"]}
    assert favourites == ({"steady"} if noisy_at_80 else {"noisy"})
    assert chart.stat().st_size > 5000

    table = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].split()[:3] == ["TIME", "CURRENT", "REFUSED"]
    assert "candidate: node-steps refused by signal: cpu" in table.stdout


async def test_replay_reads_samples_by_the_live_paths_rules(tmp_path: Path, start_loadext: StartLoadext) -> None:
    """NaN dropped (not read as an idle 0 %), and of two series for one node the higher one, in
    replay exactly as in the live snapshot."""
    start = int(time.time()) - 10 * 60
    lines = []
    for t in range(start, start + 12 * 60, 15):
        lines += [
            f'dup_cpu{{node="twice",job="a"}} 0.3 {t}',
            f'dup_cpu{{node="twice",job="b"}} 0.7 {t}',
            f'dup_cpu{{node="broken"}} NaN {t}',
            f'dup_cpu{{node="plain"}} 0.4 {t}',
        ]
    data = backfill(str(tmp_path), "\n".join([*lines, "# EOF"]) + "\n")
    prom = PrometheusServer(str(tmp_path), "scrape_configs: []\n", data_dir=data)
    try:
        text = {"prometheus": {"url": prom.url}, "signals": [{"name": "cpu", "query": "dup_cpu", "threshold": 0.9}]}
        loadext = await start_loadext(text)
        expected = {"twice": {"cpu": 0.7}, "plain": {"cpu": 0.4}}
        await sees(loadext, expected)
        assert "broken" not in await loadext.node_values()
        config = parse_config(yaml.safe_dump(text))
        now = time.time()
        source = PrometheusSource(config.prometheus)
        history = await asyncio.to_thread(fetch, source, config, now - 300, now, 60)
        source.close()
        assert history
        for step in history.values():
            assert {node: {s: round(v.value, 3) for s, v in signals.items()} for node, signals in step.items()} == (
                expected
            )
    finally:
        prom.stop()
