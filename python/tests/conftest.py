"""Shared setup of the Python tests: they run on the simulated GPU (TIDEPOOL_DEVICE=sim) against
the library at $TIDEPOOL_LIBRARY (scripts/test.sh sets both); sim_support.py has their helpers.
The GPU tests (gpu/) run their own child processes on the real GPU."""

import os
import sys

import pytest

PYTHON_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if PYTHON_ROOT not in sys.path:
    sys.path.insert(0, PYTHON_ROOT)


@pytest.fixture(scope="session", autouse=True)
def _on_sim():
    if os.environ.get("TIDEPOOL_DEVICE") != "sim":
        os.environ["TIDEPOOL_DEVICE"] = "sim"
    yield


@pytest.fixture
def tp():
    import tidepool

    return tidepool


@pytest.fixture
def lib(tp):
    """The loaded ctypes library, with prototypes."""
    from tidepool import _library

    return _library.load()
