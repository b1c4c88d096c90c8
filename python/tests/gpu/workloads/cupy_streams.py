"""CuPy streams that come and go under tidepool: each round makes a stream, allocates on it, lets
CuPy destroy the stream (the Stream object is collected) while an array made there still lives,
then frees that array and allocates large arrays on other streams (cache misses). Before
tidepool.forget_stream existed, the first miss after a destroyed stream recorded an event on it
(a use after free in the driver). Prints the round count and tidepool's figures."""

import gc

import cupy
import tidepool

from common import emit

tidepool.cupy.use()
MiB = 1 << 20
survivors = []
for round_index in range(50):
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        kept = cupy.ones((8 * MiB // 4,), dtype=cupy.float32)
        scratch = cupy.ones((4 * MiB // 4,), dtype=cupy.float32) * 2
        del scratch
    stream.synchronize()
    del stream
    gc.collect()  # CuPy destroys the stream here; the library is told
    other = cupy.cuda.Stream(non_blocking=True)
    with other:
        big = cupy.zeros(((64 + round_index) * MiB // 4,), dtype=cupy.float32)  # a miss
        big += kept[:1].sum()
        del big
    other.synchronize()
    del kept  # freed after its stream was destroyed
    survivors.append(other)
    if len(survivors) > 4:
        survivors.pop(0)
    gc.collect()
cupy.cuda.Device().synchronize()
stats = tidepool.stats(0)
emit({"rounds": 50, "live_allocations": stats.live_allocations,
      "released": tidepool.release(0)})
