"""The soak's short version: benchmarks/soak/run.py for 20 s at a fixed, modest rate (CI
machines are shared) with Prometheus flapping every 2 s. Every request answered 200 and the
flapping really happened. The 30-minute run at 80 % of the measured peak is
`python3 benchmarks/soak/run.py` (numbers in docs/benchmarks.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.e2e  # needs Go, to build vegeta


def test_short_soak_with_flapping_prometheus(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    rate, seconds = 200, 20
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "soak" / "run.py"),
            f"--duration={seconds}s",
            "--interval=5s",
            f"--rate={rate}",
            "--flap=2",
            "--refresh=1",
            f"--out={out}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["errors"] == 0
    assert result["requests"] >= 0.95 * rate * seconds
    assert result["prometheus_query_errors"] > 0  # Prometheus did go down, more than once
    assert len(result["slices"]) >= 4 and all(s["status_codes"] == {"200": s["requests"]} for s in result["slices"])
    assert "| at (s) | requests |" in run.stdout  # the table docs/benchmarks.md quotes
