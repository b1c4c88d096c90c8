"""torch.cuda.set_per_process_memory_fraction under PyTorch's allocator or tidepool.torch.use():
with the fraction of the GPU that is about 6 GiB allowed (a fixed fraction allowed less than 4 GiB
on smaller cards), 4 GiB is allocated, 4 GiB more is refused with PyTorch's out-of-memory error
(the first 4 GiB kept), get_per_process_memory_fraction reads the fraction back, and after 1.0 the
second 4 GiB goes through. `mode`: "default" (PyTorch's allocator) or "tidepool". Prints the
figures as JSON."""

import sys

import torch

from common import GiB, emit

mode = sys.argv[1] if len(sys.argv) > 1 else "tidepool"
if mode == "tidepool":
    import tidepool

    tidepool.torch.use()
fraction = round(6 * GiB / torch.cuda.get_device_properties(0).total_memory, 4)
torch.cuda.set_per_process_memory_fraction(fraction)
result = {"mode": mode, "fraction": fraction, "read_back": torch.cuda.get_per_process_memory_fraction()}
first = torch.ones(4 * GiB, dtype=torch.uint8, device="cuda")
try:
    second = torch.ones(4 * GiB, dtype=torch.uint8, device="cuda")
    result["second_within_the_fraction"] = "allocated"
    del second
except RuntimeError as error:
    result["second_within_the_fraction"] = str(error).split("\n")[0][:80]
result["first_intact"] = int(first.min().item()) == 1  # a reduction: no 4 GiB temporary
torch.cuda.set_per_process_memory_fraction(1.0)
second = torch.ones(4 * GiB, dtype=torch.uint8, device="cuda")
result["second_after_lifting"] = int(second.min().item()) == 1
result["read_back_after_lifting"] = torch.cuda.get_per_process_memory_fraction()
if mode == "tidepool":
    result["byte_cap"] = tidepool.byte_cap(0)
emit(result)
