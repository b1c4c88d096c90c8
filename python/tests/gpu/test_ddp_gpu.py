"""PyTorch DistributedDataParallel over NCCL, one process per GPU, with and without tidepool
(issue 6): the losses and final weights are bit-identical between the two runs, every rank's
allocations went through tidepool, and each rank's process holds memory (NVML) on its own GPU
only. One rank per GPU of the machine (needs two GPUs at least), and a one-rank run that proves
the script on a one-GPU machine. Skipped where PyTorch, pynvml, NCCL or the GPUs are missing."""

import functools
import json
import subprocess
import sys

import pytest

from gpu_support import gpu_environment, require, run_workload


@functools.lru_cache(maxsize=None)
def torch_gpus_and_nccl():
    """(GPUs PyTorch sees, whether NCCL is built in), asked in a child so this process opens no GPU."""
    probe = ("import json, torch, torch.distributed as d\n"
             "print(json.dumps([torch.cuda.device_count(), d.is_available() and d.is_nccl_available()]))\n")
    result = subprocess.run([sys.executable, "-c", probe], env=gpu_environment(), capture_output=True,
                            text=True, timeout=120)
    if result.returncode != 0:
        pytest.fail(f"probing torch failed:\n{result.stderr}")
    gpus, nccl = json.loads(result.stdout.strip().splitlines()[-1])
    return gpus, nccl


def require_ddp(min_gpus):
    require("torch", "pynvml")
    gpus, nccl = torch_gpus_and_nccl()
    if not nccl:
        pytest.skip("this PyTorch has no NCCL backend")
    if gpus < min_gpus:
        pytest.skip(f"needs {min_gpus} GPUs, PyTorch sees {gpus}")
    return gpus


def assert_memory_only_on_own_gpu(run):
    """Each rank's pid holds memory on its own GPU and on no other, by NVML's view taken while
    every rank still held its memory. Where NVML shows host pids (a PID namespace) a rank cannot
    find itself: then each of the job's GPUs must list exactly one process, a different one each,
    seen on no other GPU (so no rank touched a peer's GPU; the machine must be this test's alone)."""
    ranks = run["ranks"]
    label = f"{run['allocator']} allocator"
    job_gpus = [r["pci_bus_id"] for r in ranks]
    assert len(set(job_gpus)) == len(ranks), f"{label}: ranks share a GPU: {job_gpus}"
    for r in ranks:
        view = r["nvml"]
        assert r["pci_bus_id"] in view, f"{label}: rank {r['rank']}'s GPU {r['pci_bus_id']} not in NVML's {sorted(view)}"
        pid = str(r["pid"])
        holding = {pci for pci, processes in view.items() if pid in processes}
        if holding:
            assert holding == {r["pci_bus_id"]}, (
                f"{label}: rank {r['rank']} (pid {pid}, GPU {r['pci_bus_id']}) holds memory on {sorted(holding)}")
            used = view[r["pci_bus_id"]][pid]
            assert used is None or used > 0, f"{label}: rank {r['rank']} holds 0 bytes on its GPU"
            print(f"{label}: rank {r['rank']} pid {pid} holds "
                  f"{'?' if used is None else f'{used / 2**20:.0f} MiB'} on {r['pci_bus_id']} only")
            continue
        print(f"{label}: rank {r['rank']}: NVML does not list pid {pid} (PID namespace); checking by count")
        listed = {pci: set(view[pci]) for pci in job_gpus}
        for pci, pids in listed.items():
            assert len(pids) == 1, f"{label}: GPU {pci} lists {len(pids)} processes {sorted(pids)}, expected its rank alone"
        owners = [next(iter(pids)) for pids in listed.values()]
        assert len(set(owners)) == len(ranks), f"{label}: one process on several of the job's GPUs: {listed}"
        for pci, processes in view.items():
            if pci not in listed:
                assert not set(processes) & set(owners), f"{label}: a rank's process also holds memory on {pci}"


def check_ddp(world_size):
    default = run_workload("ddp_training.py", "default", world_size)
    routed = run_workload("ddp_training.py", "tidepool", world_size)
    assert len(default["ranks"]) == len(routed["ranks"]) == world_size
    for d, t in zip(default["ranks"], routed["ranks"]):
        assert t["tidepool_allocations"] > 0, f"rank {t['rank']}: nothing went through tidepool"
        assert t["losses"] == d["losses"], f"rank {t['rank']}: losses differ"
        assert t["weights"] == d["weights"], f"rank {t['rank']}: final weights differ"
        print(f"rank {t['rank']}: {len(t['losses'])} losses bit-identical, last "
              f"{float.fromhex(t['losses'][-1]):.6f}; {t['tidepool_allocations']} tidepool allocations")
    # DDP keeps the replicas equal: every rank ends with the same weights (the all-reduce ran).
    assert len({r["weights"] for r in routed["ranks"]}) == 1
    for run in (default, routed):
        assert_memory_only_on_own_gpu(run)


def test_ddp_one_rank_per_gpu_is_bit_identical_with_tidepool():
    gpus = require_ddp(2)
    check_ddp(gpus)


def test_ddp_one_rank_on_one_gpu_is_bit_identical_with_tidepool():
    require_ddp(1)
    check_ddp(1)
