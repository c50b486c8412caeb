"""Live config reload: a valid change applies without a restart, an invalid one is rejected
loudly with the last good config kept, and the kubelet's atomic ..data symlink swap is seen."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.exporter import Exporter
from harness.inprocess import Loadext, StartLoadext, live_config, sees, set_load
from harness.metrics_text import metric_value
from harness.prometheus import PrometheusServer
from harness.waiting import eventually
from harness.wire import names_request


async def rejected(loadext: Loadext, nodes: list[str]) -> dict[str, str]:
    _, reply = await loadext.post("filter", names_request(*nodes))
    result: dict[str, str] = reply["FailedAndUnresolvableNodes"]
    return result


async def test_valid_change_applies_without_restart(
    prometheus: PrometheusServer, exporter: Exporter, start_loadext: StartLoadext, case: str
) -> None:
    set_load(exporter, case, {"warm": 0.85, "cool": 0.2}, {"warm": 0.3, "cool": 0.3})
    config = live_config(prometheus.url, case)
    loadext = await start_loadext(config)
    await sees(loadext, {"warm": {"cpu": 0.85, "memory": 0.3}})
    assert await rejected(loadext, ["warm", "cool"]) == {"warm": "loadext: cpu above 80%"}
    old_hash = loadext.app.cluster.config.hash
    # The App counts its start-up load as a success too, as `loadext serve` does.
    successes_before = metric_value(await loadext.metrics(), "loadext_config_reloads_total", result="success")

    config["signals"][0]["threshold"] = 0.9
    loadext.config_path.write_text(yaml.safe_dump(config))

    async def applied() -> bool:
        assert await rejected(loadext, ["warm", "cool"]) == {}
        return True

    await eventually(applied)
    metrics = await loadext.metrics()
    assert metric_value(metrics, "loadext_config_reloads_total", result="success") == successes_before + 1
    assert metric_value(metrics, "loadext_config_info", hash=loadext.app.cluster.config.hash) == 1
    assert loadext.app.cluster.config.hash != old_hash
    assert f'hash="{old_hash}"' not in metrics
    assert metric_value(metrics, "loadext_config_last_reload_success_timestamp_seconds") > time.time() - 30


async def test_invalid_change_is_rejected_and_the_old_config_kept(
    prometheus: PrometheusServer,
    exporter: Exporter,
    start_loadext: StartLoadext,
    case: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    set_load(exporter, case, {"warm": 0.85}, {"warm": 0.3})
    config = live_config(prometheus.url, case)
    loadext = await start_loadext(config)
    await sees(loadext, {"warm": {"cpu": 0.85, "memory": 0.3}})
    good_hash = loadext.app.cluster.config.hash
    caplog.set_level(logging.ERROR, logger="loadext")

    broken: dict[str, Any] = dict(config, failurePolicy="sometimes")
    loadext.config_path.write_text(yaml.safe_dump(broken))

    async def reported() -> bool:
        text = await loadext.metrics()
        assert metric_value(text, "loadext_config_reloads_total", result="failure") == 1
        return True

    await eventually(reported)
    assert "failurePolicy: must be one of open, closed; got 'sometimes'" in caplog.text
    assert "keeping the last good config" in caplog.text
    assert loadext.app.reloader.last_error is not None and "line" in loadext.app.reloader.last_error
    assert loadext.app.cluster.config.hash == good_hash
    assert await rejected(loadext, ["warm"]) == {"warm": "loadext: cpu above 80%"}  # still deciding

    loadext.config_path.write_text("prometheus: [unclosed\n")  # not even YAML
    await eventually(reported_count(loadext, 2))
    loadext.config_path.unlink()  # the file vanishes: still the last good config
    await eventually(reported_count(loadext, 3))
    assert await rejected(loadext, ["warm"]) == {"warm": "loadext: cpu above 80%"}


def reported_count(loadext: Loadext, count: int) -> Any:
    async def check() -> bool:
        text = await loadext.metrics()
        assert metric_value(text, "loadext_config_reloads_total", result="failure") == count
        return True

    return check


def kubelet_projection(root: Path, text: str, generation: int) -> None:
    """Write a ConfigMap volume update the way the kubelet's atomic writer does."""
    stamp = root / f"..2026_12_02_15_00_{generation:02d}.000000001"
    stamp.mkdir()
    (stamp / "config.yaml").write_text(text)
    tmp_link = root / "..data_tmp"
    tmp_link.symlink_to(stamp.name)
    os.rename(tmp_link, root / "..data")  # atomic replace of the ..data symlink
    if not (root / "config.yaml").is_symlink():
        (root / "config.yaml").symlink_to("..data/config.yaml")


async def test_configmap_symlink_swap_is_picked_up(
    prometheus: PrometheusServer, exporter: Exporter, start_loadext: StartLoadext, case: str, tmp_path: Path
) -> None:
    set_load(exporter, case, {"warm": 0.85}, {"warm": 0.3})
    volume = tmp_path / "volume"
    volume.mkdir()
    config = live_config(prometheus.url, case)
    kubelet_projection(volume, yaml.safe_dump(config), 1)
    loadext = await start_loadext(config, path=volume / "config.yaml")
    await sees(loadext, {"warm": {"cpu": 0.85, "memory": 0.3}})
    assert await rejected(loadext, ["warm"]) == {"warm": "loadext: cpu above 80%"}

    config["signals"][0]["threshold"] = 0.95
    kubelet_projection(volume, yaml.safe_dump(config), 2)

    async def applied() -> bool:
        assert await rejected(loadext, ["warm"]) == {}
        return True

    await eventually(applied)
