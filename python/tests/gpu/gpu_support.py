"""Helpers of the GPU tests of the Python package: each scenario runs in a child interpreter on the real GPU
(the CUDA driver, not sim), because a framework's allocator can be chosen only once per process.
Every test skips (never fails) where PyTorch, CuPy, pynvml or a GPU is missing.

Run on a GPU machine, from the repository root, with a Python that has torch, cupy and pynvml:
    TIDEPOOL_LIBRARY=$PWD/build/src/libtidepool.so PYTHONPATH=$PWD/python \\
        python3 -m pytest -q -s python/tests/gpu
"""

import functools
import importlib.util
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = os.path.join(HERE, "workloads")
PYTHON_ROOT = os.path.dirname(os.path.dirname(HERE))
REPO_ROOT = os.path.dirname(PYTHON_ROOT)


def gpu_environment(**variables):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEPOOL_SIM")}
    env.pop("TIDEPOOL_DEVICE", None)  # the real GPU
    env["PYTHONPATH"] = PYTHON_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"  # deterministic cuBLAS
    env.update({k: str(v) for k, v in variables.items()})
    return env


def run_workload(script, *args, timeout=600, **variables):
    """Runs workloads/<script> in a fresh interpreter; returns the JSON it prints last."""
    result = subprocess.run([sys.executable, os.path.join(WORKLOADS, script), *map(str, args)],
                            env=gpu_environment(**variables), capture_output=True, text=True,
                            timeout=timeout)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    assert result.returncode == 0, f"{script} {args} failed:\n{result.stdout}\n{result.stderr}"
    return json.loads(result.stdout.strip().splitlines()[-1])


@functools.lru_cache(maxsize=None)
def _gpu_reason(*modules):
    for module in modules:
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed"
    probe = ("import tidepool, sys\n"
             "n = tidepool.device_count()\n"
             "sys.exit(0 if n > 0 else 3)\n")
    result = subprocess.run([sys.executable, "-c", probe], env=gpu_environment(),
                            capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        return "no GPU or no CUDA driver: " + (result.stderr.strip().splitlines() or ["?"])[-1]
    return ""


def require(*modules):
    """Skips the test unless the modules, the tidepool library and a GPU are all present."""
    reason = _gpu_reason(*modules)
    if reason:
        pytest.skip(reason)
