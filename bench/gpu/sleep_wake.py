"""Sleep and wake on a GPU (issue 13): time per GiB, with and without contents, the bytes NVML sees
go, beside doing the same by hand with plain PyTorch (copy to pinned host memory, free,
empty_cache, then copy back).

    TIDEPOOL_LIBRARY=build/src/libtidepool.so PYTHONPATH=python python3 bench/gpu/sleep_wake.py \\
        [--sizes 1 8 32] [--json out.json]

For each size, tensors of 256 MiB filling that many GiB are made:
  - tidepool: in a torch.cuda.MemPool over tag "bench-<size>g" (tidepool.torch.mem_pool), PyTorch's
    own allocator elsewhere; sleep (keep contents, then keep nothing) and wake are timed, NVML read
    before and after each, and the contents checked after wake (a checksum of every tensor).
  - torch: the same tensors from PyTorch's caching allocator; "sleep" is pinned host buffers made,
    each tensor copied to its buffer, the tensors dropped and empty_cache(); "wake" is each buffer
    copied to a new device tensor (new addresses: CUDA graphs over the old ones are invalid). The
    pinning and the copy are timed apart too: the copy alone is the link's bandwidth.
Every timing ends with torch.cuda.synchronize(). One line per (size, allocator, keep), and JSON.
"""

import argparse
import json
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

import tidepool  # noqa: E402

GiB = 1 << 30
MiB = 1 << 20
CHUNK = 256 * MiB


class ProcessMemory:
    """This process's device memory on CUDA device 0 by NVML (what nvidia-smi shows)."""

    def __init__(self):
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()
        props = torch.cuda.get_device_properties(0)
        bus = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
        try:
            self.handle = pynvml.nvmlDeviceGetHandleByPciBusId(bus)
        except (TypeError, AttributeError):
            self.handle = pynvml.nvmlDeviceGetHandleByPciBusId(bus.encode())

    def bytes(self):
        processes = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
        mine = [p for p in processes if p.pid == os.getpid()] or (processes if len(processes) == 1 else [])
        return int(mine[0].usedGpuMemory) if mine and mine[0].usedGpuMemory is not None else -1


def timed(f):
    torch.cuda.synchronize()
    start = time.perf_counter()
    result = f()
    torch.cuda.synchronize()
    return time.perf_counter() - start, result


def make_tensors(size_gib):
    tensors = []
    for _ in range(size_gib * GiB // CHUNK):
        t = torch.empty(CHUNK // 4, dtype=torch.int32, device="cuda")
        t.random_(-(2 ** 31), 2 ** 31 - 1)
        tensors.append(t)
    return tensors


def checksum(tensors):
    return [int(t.sum(dtype=torch.int64)) for t in tensors]


def line(row):
    keep = row["keep"] + (" #2" if row.get("cycle") == 2 else "")
    print(f"{row['size_gib']:>4} GiB  {row['allocator']:<8} {keep:<11}  sleep {row['sleep_s'] * 1e3:9.1f} ms "
          f"({row['sleep_s'] * 1e3 / row['size_gib']:7.1f} ms/GiB)  wake {row['wake_s'] * 1e3:9.1f} ms "
          f"({row['wake_s'] * 1e3 / row['size_gib']:7.1f} ms/GiB)  NVML -{row['nvml_drop'] / GiB:6.2f} GiB "
          f"+{row['nvml_back'] / GiB:6.2f} GiB  returned {row['returned'] / GiB:6.2f} GiB"
          + (f"  contents {'ok' if row['contents_ok'] else 'DIFFER'}" if row["contents_ok"] is not None else "")
          + "".join(f"  {k} {row[k] * 1e3:.1f} ms" for k in ("pin_s", "copy_out_s", "copy_in_s") if k in row),
          flush=True)


def bench_tidepool(size_gib, nvml):
    rows = []
    tag = f"bench-{size_gib}g"
    pool = tidepool.torch.mem_pool(tag)
    with torch.cuda.use_mem_pool(pool):
        tensors = make_tensors(size_gib)
    addresses = [t.data_ptr() for t in tensors]
    sums = checksum(tensors)
    # The second sleep with contents reuses the pinned buffer the first one made (a trainer that
    # sleeps every step pays the pinning once).
    for keep, cycle in (("contents", 1), ("contents", 2), ("nothing", 1)):
        before = nvml.bytes()
        sleep_s, returned = timed(lambda: tidepool.sleep(tag, keep=keep))
        asleep = nvml.bytes()
        wake_s, _ = timed(lambda: tidepool.wake(tag))
        awake = nvml.bytes()
        ok = None
        if keep == "contents":
            ok = checksum(tensors) == sums and addresses == [t.data_ptr() for t in tensors]
        rows.append({"size_gib": size_gib, "allocator": "tidepool", "keep": keep, "cycle": cycle, "sleep_s": sleep_s,
                     "wake_s": wake_s, "nvml_drop": before - asleep, "nvml_back": awake - asleep,
                     "returned": returned, "contents_ok": ok})
        line(rows[-1])
    del tensors
    del pool
    torch.cuda.empty_cache()
    tidepool.release_cached_memory()
    return rows


def bench_torch(size_gib, nvml):
    rows = []
    for keep in ("contents", "nothing"):
        tensors = make_tensors(size_gib)
        sums = checksum(tensors)
        before = nvml.bytes()
        row = {"size_gib": size_gib, "allocator": "torch", "keep": keep}
        host = []

        def sleep():
            nonlocal tensors
            if keep == "contents":
                row["pin_s"], _ = timed(lambda: host.extend(torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
                                                            for t in tensors))
                row["copy_out_s"], _ = timed(lambda: [h.copy_(t, non_blocking=True) for h, t in zip(host, tensors)])
            shapes = [t.shape for t in tensors]
            tensors = None
            torch.cuda.empty_cache()
            return shapes

        sleep_s, shapes = timed(sleep)
        asleep = nvml.bytes()

        def wake():
            if keep == "contents":
                return [h.to("cuda", non_blocking=True) for h in host]
            return [torch.empty(s, dtype=torch.int32, device="cuda") for s in shapes]

        wake_s, tensors = timed(wake)
        if keep == "contents":
            row["copy_in_s"] = wake_s
        awake = nvml.bytes()
        row.update({"sleep_s": sleep_s, "wake_s": wake_s, "nvml_drop": before - asleep, "nvml_back": awake - asleep,
                    "returned": before - asleep, "contents_ok": checksum(tensors) == sums if keep == "contents" else None})
        rows.append(row)
        line(row)
        del tensors, host
        torch.cuda.empty_cache()
        if hasattr(torch._C, "_host_emptyCache"):
            torch._C._host_emptyCache()  # PyTorch's pinned host cache, so sizes do not add up in host memory
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 8, 32], help="GiB of tensors per run")
    parser.add_argument("--json", help="write every row here")
    args = parser.parse_args()
    torch.cuda.init()
    torch.empty(1, device="cuda")
    nvml = ProcessMemory()
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, tidepool {tidepool.version()}; "
          f"tensors of {CHUNK // MiB} MiB", flush=True)
    rows = []
    for size in args.sizes:
        rows += bench_tidepool(size, nvml)
        rows += bench_torch(size, nvml)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)
    if any(r["contents_ok"] is False for r in rows):
        print("contents differ after wake", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
