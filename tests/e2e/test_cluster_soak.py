"""The cluster soak's short profile (benchmarks/soak/cluster.py --profile short), through its
command line: a control plane of its own, kwok, two Prometheus servers and two loadext replicas
live through every fault kind once, with the rebalancer evicting, and every invariant holds.

It runs apart from the shared control plane (harness/cluster.py) because it stops the API
server and kills replicas; about six minutes, most of it the schedule (bounded apart from the
suite's 600 s: a cold machine builds kwok first)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "soak"))
sys.path.insert(0, str(ROOT / "benchmarks" / "placement"))

from life import FAULTS  # noqa: E402

RUN_BOUND = 1200  # seconds: kwok built cold (about 4 minutes), the control plane, the schedule (about 5)


@pytest.mark.timeout(RUN_BOUND + 60)
def test_a_short_life_with_every_fault_holds_every_invariant(tmp_path: Path) -> None:
    out = tmp_path / "soak"
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "soak" / "cluster.py"), "--profile", "short", "--seed", "1",
         "--out", str(out)],
        capture_output=True, text=True, timeout=RUN_BOUND, check=False,
    )  # fmt: skip
    assert (out / "results.json").exists(), result.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    broken = {name: found["examples"] for name, found in results["invariants"].items() if found["violations"]}
    assert broken == {}, f"{broken}\n{result.stdout}\nlogs in {out}"
    assert result.returncode == 0, result.stderr[-3000:]
    assert results["figures"]["faults injected"] == dict.fromkeys(FAULTS, 1)
    # Not vacuous: the rebalancer evicted, and one kill came right after an eviction.
    assert results["figures"]["evictions"] >= 1
    interrupted = next(f for f in results["faults"] if f["kind"] == "kill_mid_eviction")
    assert "right after evicting" in interrupted["what"], interrupted
    judged = {name for name, found in results["invariants"].items() if found["not judged"] is None}
    assert {"no eviction on stale metrics", "a fault shows in /explain and its alert within 30 s"} <= judged
    assert "| no eviction on stale metrics | 0 |" in result.stdout
    assert (out / "timeline.png").stat().st_size > 10_000
