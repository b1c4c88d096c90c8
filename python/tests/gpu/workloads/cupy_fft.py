"""CuPy FFT and elementwise work; prints hashes of the results.
Argument: "tidepool" (allocations routed to tidepool) or "default" (CuPy's own pool)."""

import hashlib
import sys

import cupy

from common import emit

allocator = sys.argv[1]
if allocator == "tidepool":
    import tidepool

    tidepool.cupy.use()

state = cupy.random.RandomState(0)
digests = []
for size in (256, 384, 512, 1000):
    a = state.standard_normal((size, size), dtype=cupy.float32)
    b = state.standard_normal((size, size), dtype=cupy.float32)
    spectrum = cupy.fft.fft2(a + 1j * b)
    filtered = cupy.fft.ifft2(spectrum * cupy.exp(-cupy.abs(spectrum) / size))
    mixed = cupy.sin(a) * b + cupy.sqrt(cupy.abs(filtered.real)) - cupy.tanh(filtered.imag)
    rfft = cupy.fft.irfft(cupy.fft.rfft(mixed, axis=1), n=size, axis=1)
    total = (mixed * rfft).sum(axis=0)
    for array in (spectrum, filtered, mixed, rfft, total):
        digests.append(hashlib.sha256(cupy.asnumpy(array).tobytes()).hexdigest())
# The same on a stream of its own: tidepool must allocate (and free) on it, following CuPy's
# current stream.
side = cupy.cuda.Stream(non_blocking=True)
with side:
    for size in (300, 700):
        a = state.standard_normal((size, size), dtype=cupy.float32)
        spectrum = cupy.fft.fft2(a.astype(cupy.complex64))
        back = cupy.fft.ifft2(spectrum * 0.5).real + cupy.cos(a)
        digests.append(hashlib.sha256(cupy.asnumpy(back, stream=side).tobytes()).hexdigest())
        del a, spectrum, back
side.synchronize()
cupy.cuda.Device().synchronize()
result = {"digests": digests}
if allocator == "tidepool":
    result["tidepool_allocations"] = tidepool.stats(0).allocations
emit(result)
