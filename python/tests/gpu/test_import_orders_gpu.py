"""tidepool, PyTorch and CuPy imported in every order, each in a fresh interpreter, allocating on
each framework through tidepool and exiting cleanly (issue 9, item 1: loading the library before
torch aborted the process while libtidepool.so exported its internals and pulled libfmt in)."""

import itertools

import pytest

from gpu_support import require, run_workload

ORDERS = [("tidepool", "torch"), ("torch", "tidepool"), ("tidepool", "cupy"), ("cupy", "tidepool")]
ORDERS += list(itertools.permutations(("tidepool", "torch", "cupy")))


@pytest.mark.parametrize("order", ORDERS, ids=["-".join(o) for o in ORDERS])
def test_every_import_order_allocates_on_each_framework(order):
    require(*[name for name in order if name != "tidepool"])
    r = run_workload("import_order.py", *order)  # asserts a clean exit, code 0
    assert r["order"] == list(order)
    assert r["growth_slack"] == 0.05  # set before the first allocation, and taken
    if "torch" in order:
        assert r["torch_sum"] == 2000
    if "cupy" in order:
        assert r["cupy_sum"] == 3000
    assert r["allocations"] >= ("torch" in order) + ("cupy" in order)  # through tidepool
