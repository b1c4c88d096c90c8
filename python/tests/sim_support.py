"""Helpers of the sim tests: tests that need a machine of their own (capacity, device count) run a
script in a fresh interpreter on sim through run_script()."""

import os
import subprocess
import sys
import textwrap

PYTHON_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if PYTHON_ROOT not in sys.path:
    sys.path.insert(0, PYTHON_ROOT)

MiB = 1 << 20
GiB = 1 << 30


def sim_environment(**variables):
    """The environment of a child process on sim, with TIDEPOOL_SIM_* and others set."""
    env = dict(os.environ)
    env["TIDEPOOL_DEVICE"] = "sim"
    env["PYTHONPATH"] = PYTHON_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update({k: str(v) for k, v in variables.items()})
    return env


# wait_for(condition), for the programs the tests run: true once condition() is, false after 5 s.
WAIT_FOR_SOURCE = """
import time

def wait_for(condition):
    for _ in range(500):
        if condition():
            return True
        time.sleep(0.01)
    return False
"""


def run_program(tmp_path, source, **variables):
    """Runs `source` (after WAIT_FOR_SOURCE) as a script file, so multiprocessing can spawn
    children from it, on sim with the TIDEPOOL_SIM_* and other `variables` given; returns the
    JSON of its last line. Fails the test with the program's output if it exits non-zero."""
    import json

    script = tmp_path / "program.py"
    script.write_text(WAIT_FOR_SOURCE + source)
    result = subprocess.run([sys.executable, str(script)], env=sim_environment(**variables),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"program failed:\n{result.stdout}\n{result.stderr}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def run_script(source, **variables):
    """Runs `source` in a fresh interpreter on sim; returns its stdout. Fails the test with the
    child's output if it exits non-zero."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(source)],
                            env=sim_environment(**variables), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, f"child failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def tool_path():
    """The `tidepool` command line of the build under test ($TIDEPOOL_BUILD_DIR, build/, or next
    to $TIDEPOOL_LIBRARY), or None."""
    root = os.path.dirname(PYTHON_ROOT)
    candidates = [os.path.join(root, build, "tools", "tidepool")
                  for build in (os.environ.get("TIDEPOOL_BUILD_DIR", ""), "build") if build]
    library = os.environ.get("TIDEPOOL_LIBRARY", "")
    if library:  # $BUILD/src/libtidepool.so -> $BUILD/tools/tidepool
        candidates.insert(0, os.path.join(os.path.dirname(os.path.dirname(library)), "tools", "tidepool"))
    for path in candidates:
        if os.access(path, os.X_OK):
            return path
    return None
