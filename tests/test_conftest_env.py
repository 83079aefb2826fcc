"""The test session starts without the server's settings of the shell that runs it (``tests/conftest.py``)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

PROBE = """
import os, sys
sys.path.insert(0, {tests!r})
import conftest  # what pytest imports before any test module
from aiayn.model.projection import serving_precision
left = [n for n in conftest.SERVER_SETTINGS if n in os.environ]
assert left == [], left
assert serving_precision(None, {{}}) == "float32"
print("clean")
"""


def test_server_settings_of_the_shell_do_not_reach_the_tests():
    """A shell exporting ``AIAYN_SERVE_PROJECTION=int8`` (and the other server settings) runs the tests as a clean
    one does: once the tests' conftest is imported none of the variables is set and a model serves float32."""
    shell = dict(os.environ, AIAYN_SERVE_PROJECTION="int8", AIAYN_TORCH_THREADS="7", AIAYN_MAX_BATCH="3",
                 AIAYN_GATHER_MS="5", AIAYN_CHECKPOINTS="/nowhere", AIAYN_BENCH_CLASSROOM="opus_shape")
    probe = [sys.executable, "-c", PROBE.format(tests=str(TESTS))]
    done = subprocess.run(probe, env=shell, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "clean", done.stderr[-2000:]
    # the probe can fail: without the conftest's clean-up the shell's int8 is what a model would serve
    raw = subprocess.run([sys.executable, "-c", "from aiayn.model.projection import serving_precision;"
                          "print(serving_precision(None, {}))"], env=shell, capture_output=True, text=True, timeout=300)
    assert raw.stdout.strip() == "int8", raw.stderr[-2000:]
