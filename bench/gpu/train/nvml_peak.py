"""The peak device memory of this process as NVML reports it (what nvidia-smi shows), sampled by a
background thread every few milliseconds while a workload runs.

NVML lists processes by host PID: inside a PID namespace (a container) this process's PID may not
be listed. Then, if NVML lists exactly one process, that one is taken (the launcher runs one
workload at a time); otherwise the device's whole used memory is sampled. `source` says which.
"""

import os
import threading


def pci_bus_id_of_current_device(torch):
    """NVML's PCI bus id ("00000000:19:00.0") of torch's current CUDA device (after CUDA_VISIBLE_DEVICES)."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"


class NvmlPeak:
    """start() takes the baseline and starts sampling; stop() ends it. Then `baseline`, `peak`
    (bytes), `samples`, `source` ("pid", "only-process" or "device") and `error` (None, or why
    sampling stopped early)."""

    def __init__(self, pci_bus_id, interval_s=0.005):
        import pynvml

        self._nvml = pynvml
        pynvml.nvmlInit()
        try:
            self._handle = pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
        except (TypeError, AttributeError):  # older pynvml takes bytes
            self._handle = pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id.encode())
        self._pid = os.getpid()
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread = None
        self.source = None
        self.baseline = self.peak = None
        self.samples = 0
        self.error = None

    def _process_bytes(self):
        processes = self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle)
        mine = [p for p in processes if p.pid == self._pid]
        source = "pid"
        if not mine and len(processes) == 1:
            mine, source = list(processes), "only-process"
        if not mine or mine[0].usedGpuMemory is None:
            return None, None
        return int(mine[0].usedGpuMemory), source

    def _read(self):
        if self.source == "device":
            return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)
        value, _ = self._process_bytes()
        return value

    def start(self):
        value, source = self._process_bytes()
        if value is None:
            source, value = "device", int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)
        self.source, self.baseline, self.peak = source, value, value
        self._thread = threading.Thread(target=self._run, name="nvml-peak", daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                value = self._read()
            except self._nvml.NVMLError as e:
                self.error = f"NVML: {e}"
                return
            if value is not None:  # the process may be missing from one listing
                self.peak = max(self.peak, value)
                self.samples += 1
            self._stop.wait(self._interval)

    def stop(self):
        """Stops sampling after one last sample."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.error is None:
            try:
                value = self._read()
            except self._nvml.NVMLError as e:
                self.error, value = f"NVML: {e}", None
            if value is not None:
                self.peak = max(self.peak, value)
                self.samples += 1
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass
