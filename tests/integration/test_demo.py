"""The README's demo command keeps telling the truth: it runs and shows real decisions, here
and on a stock Debian 12 whose only Python is Debian's own."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import pytest

from harness.debian import DebianRoot

ROOT = Path(__file__).resolve().parents[2]


def favourites(text: str) -> list[str]:
    return re.findall(r"-> the extender's favourite: (\S+)", text)


def assert_shows_decisions(out: str) -> None:
    """The story the README tells: the herd effect, the herd guard spreading the same burst,
    a hot node avoided, and a summary whose counts add up."""
    act1, rest = out.split("*** act 2")
    act2, rest = rest.split("*** act 3")
    act3, summary = rest.split("*** summary ***")
    assert "rejected worker-1  loadext: cpu above 85%" in act1
    assert "rejected worker-4  loadext: memory above 90%" in act1
    assert favourites(act1) == ["worker-3"] * 3  # the herd effect
    assert len(set(favourites(act2))) > 1, act2  # the herd guard spreads the same burst
    assert re.search(r"worker-3 .*\d pods?, [\d.]+ cores", act2), "explain shows the pods in flight"
    assert "rejected worker-3  loadext: cpu above 85%" in act3 and "worker-3" not in favourites(act3)
    assert "extender calls: 8 pods, loadext counted 8 filter and 8 prioritize calls" in summary
    assert re.search(r"worker-3 +5 +web-1 web-2 web-3", summary)
    assert "node refusals by signal and cause: cpu (threshold)" in summary
    assert not re.search(r"\d\.\d{4,}", out), "unrounded numbers on screen"


def demo_dirs() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("loadext-demo-*"))


def test_demo_tells_the_story_and_cleans_up() -> None:
    before = demo_dirs()
    result = subprocess.run(
        [sys.executable, str(ROOT / "demo" / "run.py")], capture_output=True, text=True, timeout=180
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert_shows_decisions(result.stdout)
    assert demo_dirs() == before, "the demo left its temporary folder behind"


def test_demo_keep_leaves_the_stack_running_until_interrupted() -> None:
    before = demo_dirs()
    demo = subprocess.Popen(
        [sys.executable, str(ROOT / "demo" / "run.py"), "--keep"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert demo.stdout is not None
        lines = []
        for line in demo.stdout:
            lines.append(line)
            if line.startswith("  curl ") and "/metrics" in line:
                break
        url = next(line.split()[1] for line in lines if line.startswith("  curl ") and "/metrics" in line)
        with urllib.request.urlopen(url, timeout=5) as reply:
            assert b"loadext_requests_total" in reply.read()
        demo.send_signal(signal.SIGINT)
        assert demo.wait(30) == 0
    finally:
        if demo.poll() is None:
            demo.kill()
    assert demo_dirs() == before


@pytest.mark.packaging
@pytest.mark.timeout(3300)  # a cold machine: the root filesystem, then two runs (harness/debian.py's bounds)
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
