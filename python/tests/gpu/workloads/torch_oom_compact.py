"""The out-of-memory path's compaction on a GPU (pool_options::compact_on_out_of_memory), under
tidepool.torch.use(): tensors of many sizes, half of them freed, the cache emptied, then a byte cap
just above what the pool holds and a request that only the granules the live tensors leave
untouched could serve. argv[1] "on" or "off" sets the option. Prints whether the request was
served, the pool's figures, and whether every live tensor kept its values at its address. JSON."""

import random
import sys

import torch

import tidepool
from common import MiB, emit, touched_granule_bytes

tidepool.set_pool_options(compact_on_out_of_memory=sys.argv[1] == "on")
tidepool.torch.use()
rng = random.Random(11)
device = torch.cuda.current_device()

tensors = []
for i in range(160):
    numel = int(2 ** rng.uniform(8, 22.6))
    t = torch.empty(numel, dtype=torch.float32, device="cuda")
    t.copy_(torch.arange(numel, dtype=torch.float32, device="cuda") * 0.5 + i)
    tensors.append(t)
rng.shuffle(tensors)
live = tensors[80:]
del tensors
expected = [t.cpu() for t in live]
addresses = [t.data_ptr() for t in live]
torch.cuda.synchronize()
torch.cuda.empty_cache()

touched = touched_granule_bytes(live)
held = tidepool.stats(device).mapped_bytes
cap = held + 16 * MiB
tidepool.set_byte_cap(cap, device)
request = cap - touched - 4 * MiB
served = False
try:
    big = torch.ones(request // 4, dtype=torch.float32, device="cuda")
    served = bool(big[-1].item() == 1.0)
    del big
except RuntimeError as error:  # the pluggable allocator's failure reaches Python as RuntimeError
    if "out of memory" not in str(error):
        raise
torch.cuda.synchronize()
after = tidepool.stats(device)
emit({"served": served,
      "held_after_release": held,
      "touched_granule_bytes": touched,
      "byte_cap": cap,
      "request": request,
      "recoveries": after.out_of_memory_recoveries,
      "held_at_end": after.mapped_bytes,
      "same_addresses": [t.data_ptr() for t in live] == addresses,
      "values_kept": all(torch.equal(t.cpu(), e) for t, e in zip(live, expected))})
