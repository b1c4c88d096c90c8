"""Measures what one cudaMalloc (cuMemAlloc) of each size holds on a GPU: for each size, N
allocations, the drop in cuMemGetInfo's free memory divided by N, then frees them. The figures
behind the rule the `exact` and `cupy` baselines follow (modelled in the simulated driver,
src/device/sim/cuda_malloc_rule.hpp; docs/RESULTS.md, section 5).

    python3 tools/measure_cudamalloc_footprint.py      # on a machine with a GPU; ctypes only

Free memory moves in 2 MiB pages, so each line is (pages taken) x 2 MiB / N: sizes up to 1 MiB
show how many allocations share a page.
"""

import ctypes

KiB = 1024
MiB = 1 << 20
SIZES = [512, 4 * KiB, 8 * KiB, 32 * KiB, 33 * KiB, 36 * KiB, 37 * KiB, 39.5 * KiB, 40 * KiB, 41 * KiB,
         64 * KiB, 128 * KiB, 256 * KiB, 500 * KiB, 540 * KiB, 600 * KiB, 640 * KiB, 660 * KiB, 680 * KiB,
         700 * KiB, 1000 * KiB, 1 * MiB, 1 * MiB + 512, 1.03 * MiB, 1.2e6, 2 * MiB, 2 * MiB + 512, 4.7e6,
         63 * MiB, 70 * MiB, 77 * MiB + 512]


def main():
    cu = ctypes.CDLL("libcuda.so.1")

    def check(status, what):
        if status != 0:
            raise SystemExit(f"{what} failed: CUDA error {status}")

    check(cu.cuInit(0), "cuInit")
    device = ctypes.c_int()
    check(cu.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
    context = ctypes.c_void_p()
    check(cu.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
    check(cu.cuCtxSetCurrent(context), "cuCtxSetCurrent")

    def free_bytes():
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        check(cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
        return free.value

    for size in SIZES:
        size = int(size) // 512 * 512
        count = 1000 if size <= 64 * KiB else (300 if size <= 2 * MiB else 30)
        before = free_bytes()
        pointers = []
        for _ in range(count):
            pointer = ctypes.c_uint64()
            check(cu.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(size)), "cuMemAlloc")
            pointers.append(pointer)
        taken = before - free_bytes()
        for pointer in pointers:
            check(cu.cuMemFree_v2(pointer), "cuMemFree")
        print(f"{size:>10} B x {count:>4}: {taken / count:>12.1f} B each ({taken / MiB:.0f} MiB in all)")


if __name__ == "__main__":
    main()
