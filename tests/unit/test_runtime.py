"""tune_interpreter, in a fresh interpreter (it changes process-wide settings): what was alive
at startup is frozen out of the collector's sight, and worker threads give the GIL back sooner."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import gc, sys
from loadext.app import SWITCH_INTERVAL, tune_interpreter
before = gc.get_freeze_count()
tune_interpreter()
print(before, gc.get_freeze_count(), sys.getswitchinterval() == SWITCH_INTERVAL)
"""


def test_tune_interpreter_freezes_startup_objects_and_shortens_the_switch_interval() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout.split()
    before, frozen, switched = int(out[0]), int(out[1]), out[2]
    assert before == 0
    assert frozen > 10_000  # the imported modules of loadext, aiohttp and the kubernetes client
    assert switched == "True"
