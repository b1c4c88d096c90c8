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
        self._handle = pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)

    def bytes(self):
        processes = self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle)
        mine = [p for p in processes if p.pid == os.getpid()]
        if not mine and len(processes) == 1:
            mine = processes  # a PID namespace (container): NVML shows host PIDs
        if not mine:
            raise RuntimeError("NVML does not list this process (PID namespace with other GPU users)")
        return int(mine[0].usedGpuMemory)


def torch_memory():
    import torch

    props = torch.cuda.get_device_properties(0)
    return ProcessMemory(f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0")


def cupy_memory():
    import cupy

    return ProcessMemory(cupy.cuda.Device(0).pci_bus_id)


def emit(result):
    """Prints the workload's result as the last line (read by the test)."""
    sys.stdout.flush()
    print(json.dumps(result))


GiB = 1 << 30
MiB = 1 << 20
