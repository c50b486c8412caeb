"""The README's demo command keeps telling the truth: it runs and shows real decisions."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_demo_shows_decisions_from_prometheus() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "demo" / "run.py")], capture_output=True, text=True, timeout=180
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "rejected worker-1  loadext: cpu above 85%" in out
    assert "rejected worker-4  loadext: memory above 90%" in out
    before, after = out.split("worker-3 heats up")
    assert "-> the extender's favourite: worker-3" in before
    assert "rejected worker-3  loadext: cpu above 85%" in after
    assert "-> the extender's favourite: worker-5" in after
    assert 'loadext_node_rejections_total{cause="threshold",signal="cpu"}' in after
