"""A few steps of PyTorch DistributedDataParallel over NCCL, one process per GPU (issue 6).

    ddp_training.py <default|tidepool> <world_size>

Run like that, it is the launcher: it imports no torch (so it opens no GPU), starts one process
per rank (this same file, TIDEPOOL_DDP_RANK/RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT in its environment, rank r on
GPU r), and prints one JSON line: {"world_size", "allocator", "ranks": [each rank's result]}.

Each rank trains a small model from a fixed seed on its own data for a few steps, with
tidepool.torch.use() first when asked, and reports its losses (float.hex, so equal means
bit-identical), a hash of its final weights, its pid and its GPU's PCI bus id, and NVML's view of
every GPU while all ranks still hold their memory: which pids hold how many bytes, by PCI bus id.
"""

import json
import os
import socket
import subprocess
import sys

STEPS = 6
RANK_TIMEOUT_S = 540


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(allocator, world_size):
    """Starts one process per rank and gathers their results; fails if any rank fails."""
    port = free_port()
    ranks = []
    for rank in range(world_size):
        env = dict(os.environ, TIDEPOOL_DDP_RANK=str(rank), RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        # stderr passes through (NCCL's and PyTorch's warnings); stdout carries the JSON only.
        ranks.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), allocator, str(world_size)],
                                      env=env, stdout=subprocess.PIPE, text=True))
    results = []
    try:
        for rank, process in enumerate(ranks):
            out, _ = process.communicate(timeout=RANK_TIMEOUT_S)
            if process.returncode != 0:
                raise SystemExit(f"rank {rank} exited with {process.returncode}:\n{out}")
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for process in ranks:  # a rank left waiting on a failed peer would hang forever
            if process.poll() is None:
                process.kill()
                process.wait()
    print(json.dumps({"world_size": world_size, "allocator": allocator, "ranks": results}))


def nvml_view():
    """Every GPU's compute processes by NVML: {pci_bus_id: {pid: bytes}} (bytes None if hidden)."""
    import pynvml

    pynvml.nvmlInit()
    view = {}
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        pci = pynvml.nvmlDeviceGetPciInfo(handle).busId
        pci = pci.decode() if isinstance(pci, bytes) else pci
        processes = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        view[normal_pci(pci)] = {str(p.pid): p.usedGpuMemory for p in processes}
    pynvml.nvmlShutdown()
    return view


def normal_pci(bus_id):
    """A PCI bus id as '0000:3b:00.0' (NVML writes 8 domain digits, CUDA 4 or 8)."""
    domain, rest = bus_id.lower().split(":", 1)
    return f"{int(domain, 16):04x}:{rest}"


def train(allocator, rank, world_size):
    import torch
    import torch.distributed as dist

    from common import weights_digest  # this script's folder is on sys.path

    if allocator == "tidepool":
        import tidepool

        tidepool.torch.use()  # before the first CUDA allocation, in every rank
    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=world_size)

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 10)).to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(100 + rank)  # each rank its own data
    losses = []
    for step in range(STEPS):
        batch = 64 + 32 * (step % 3)  # varying sizes, so blocks are freed and reused
        inputs = torch.randn(batch, 256, generator=generator).to(device)
        labels = torch.randint(0, 10, (batch,), generator=generator).to(device)
        loss = torch.nn.functional.cross_entropy(ddp(inputs), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # gradients all-reduced over NCCL
        optimizer.step()
        losses.append(loss.item().hex())
    torch.cuda.synchronize()
    props = torch.cuda.get_device_properties(rank)
    result = {"rank": rank, "pid": os.getpid(), "losses": losses, "weights": weights_digest(model),
              "pci_bus_id": normal_pci(f"{props.pci_domain_id:x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0")}
    if allocator == "tidepool":
        result["tidepool_allocations"] = tidepool.stats(rank).allocations
    # Every rank holds its model, optimizer state and NCCL buffers now: NVML's view is taken
    # between two barriers, so no rank has exited (and given its memory back) yet.
    dist.barrier()
    result["nvml"] = nvml_view()
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    print(json.dumps(result))


if __name__ == "__main__":
    allocator, world_size = sys.argv[1], int(sys.argv[2])
    if allocator not in ("default", "tidepool"):
        raise SystemExit(f"allocator must be default or tidepool, not {allocator!r}")
    if "TIDEPOOL_DDP_RANK" in os.environ:  # set by the launcher, for its ranks only
        train(allocator, int(os.environ["TIDEPOOL_DDP_RANK"]), world_size)
    else:
        launch(allocator, world_size)
