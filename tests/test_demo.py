"""The README's demo command keeps telling the truth: it runs and shows real decisions, here
and on a stock Debian 12 whose only Python is Debian's own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.debian import DebianRoot

ROOT = Path(__file__).resolve().parent.parent


def assert_shows_decisions(out: str) -> None:
    assert "rejected worker-1  loadext: cpu above 85%" in out
    assert "rejected worker-4  loadext: memory above 90%" in out
    before, after = out.split("worker-3 heats up")
    assert "-> the extender's favourite: worker-3" in before
    assert "rejected worker-3  loadext: cpu above 85%" in after
    assert "-> the extender's favourite: worker-5" in after
    assert 'loadext_node_rejections_total{cause="threshold",signal="cpu"}' in after


def test_demo_shows_decisions_from_prometheus() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "demo" / "run.py")], capture_output=True, text=True, timeout=180
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert_shows_decisions(result.stdout)


@pytest.mark.packaging
def test_quick_start_on_stock_debian(tmp_path: Path) -> None:
    """The README's first command, unchanged, on a fresh Debian 12 (PEP 668 in force): it must
    install into .venv, never into Debian's interpreter, and a second setup must not reinstall."""
    debian = DebianRoot(tmp_path)
    assert (debian.root / "usr/lib/python3.11/EXTERNALLY-MANAGED").exists()
    assert not (debian.root / "usr/bin/prometheus").exists()
    src = debian.copy_checkout()
    demo = debian.run(f"cd {src} && scripts/demo.sh")
    assert demo.returncode == 0, (demo.stdout + demo.stderr)[-4000:]
    assert_shows_decisions(demo.stdout)
    assert "ERROR" not in demo.stdout, "installer noise on the demo's screen"

    after = debian.run(
        f"cd {src} && readlink -f .venv/bin/python && python3 -c 'import aiohttp' 2>&1; time -p scripts/setup.sh"
    )
    interpreter = after.stdout.splitlines()[0]
    assert interpreter == "/usr/bin/python3.11"  # Debian's own, in a virtualenv
    assert "No module named 'aiohttp'" in after.stdout, "loadext's dependencies leaked into Debian's python3"
    assert "setup: installing" not in after.stderr, after.stderr
