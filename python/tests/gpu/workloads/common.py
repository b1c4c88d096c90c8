"""Helpers shared by the GPU workloads: the process's device memory by NVML, and JSON output."""

import json
import os
import sys


class ProcessMemory:
    """This process's device memory on CUDA device 0 as NVML reports it (what nvidia-smi shows)."""

    def __init__(self, pci_bus_id):
        import pynvml

        self._nvml = pynvml
        pynvml.nvmlInit()
        try:
            self._handle = pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
        except (TypeError, AttributeError):  # older pynvml takes bytes
            self._handle = pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id.encode())

    def bytes(self):
        processes = self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle)
        mine = [p for p in processes if p.pid == os.getpid()]
        if not mine and len(processes) == 1:
            mine = processes  # a PID namespace (container): NVML shows host PIDs
        if not mine:
            raise RuntimeError("NVML does not list this process (PID namespace with other GPU users)")
        if mine[0].usedGpuMemory is None:
            raise RuntimeError("NVML does not report per-process memory here")
        return int(mine[0].usedGpuMemory)


def _pci_bus_id_of_device_0():
    """The PCI bus id of CUDA device 0 (as CUDA numbers it, after CUDA_VISIBLE_DEVICES)."""
    try:
        import cupy

        return cupy.cuda.runtime.deviceGetPCIBusId(0)
    except ImportError:
        pass
    import torch

    props = torch.cuda.get_device_properties(0)
    return f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"


def torch_memory():
    return ProcessMemory(_pci_bus_id_of_device_0())


def cupy_memory():
    return ProcessMemory(_pci_bus_id_of_device_0())


def graphs_kept_after_waiting(tidepool):
    """The graphs tidepool still keeps memory for, after waiting up to a second for the driver to
    tell it of destroyed ones (it does so on a thread of its own, a moment after the last
    reference goes)."""
    import time

    for _ in range(1000):
        if tidepool.stats().graphs == 0:
            break
        time.sleep(0.001)
    return tidepool.stats().graphs


def held_by_allocator(uses_tidepool):
    """The device memory the program's allocator holds: tidepool's mapped bytes, else PyTorch's
    reserved bytes."""
    if uses_tidepool:
        import tidepool

        return tidepool.stats().mapped_bytes
    import torch

    return torch.cuda.memory_reserved()


def drop_allocator_cache(uses_tidepool):
    """Hands back what the program's allocator caches: every cache of the process under tidepool,
    else PyTorch's."""
    if uses_tidepool:
        import tidepool

        tidepool.release_cached_memory()
    else:
        import torch

        torch.cuda.empty_cache()


def emit(result):
    """Prints the workload's result as the last line (read by the test)."""
    sys.stdout.flush()
    print(json.dumps(result))


GiB = 1 << 30
MiB = 1 << 20


def touched_granule_bytes(tensors):
    """The bytes of the 2 MiB granules the tensors touch, each as the pool placed it (its size
    rounded up to 512 bytes): what compact() leaves held."""
    granules = set()
    for t in tensors:
        start = t.data_ptr()
        end = start + (t.numel() * t.element_size() + 511) // 512 * 512
        granules.update(range(start // (2 * MiB), (end - 1) // (2 * MiB) + 1))
    return len(granules) * 2 * MiB


def weights_digest(model):
    """SHA-256 of a model's parameters as stored: equal digests mean bit-identical weights."""
    import hashlib

    digest = hashlib.sha256()
    for parameter in model.parameters():
        digest.update(parameter.detach().cpu().numpy().tobytes())
    return digest.hexdigest()


def residual_mlp(width, layers):
    """A stack of `layers` residual blocks, each LayerNorm then a width -> 4 width -> width MLP
    with GELU (the graph workloads' model), on the CPU in fp32."""
    import torch

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(width)
            self.up = torch.nn.Linear(width, 4 * width)
            self.down = torch.nn.Linear(4 * width, width)

        def forward(self, x):
            return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))

    return torch.nn.Sequential(*[Block() for _ in range(layers)])
