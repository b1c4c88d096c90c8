"""Tensor.record_stream under tidepool.torch.use(): a tensor made on the current stream is read by
a side stream behind a long kernel (torch.cuda._sleep), recorded there and dropped at once; the
next tensor of the same size on the current stream is written while the side stream has yet to
read. With the call reaching tidepool the new tensor gets other memory and the side stream reads
the values it was given; without it (`mode` "unrecorded": the same program with no record_stream
call, the hazard record_stream exists for) it reuses the dropped tensor's memory at once and the
side stream reads the new values. Every kernel runs once before (CUDA loads kernels lazily, and a
first launch can take longer than the sleep), and `side_busy_at_reuse` says whether the side
stream's read was still queued when the new tensor was written: without it the program proves
nothing. Prints the figures as JSON. `mode`: "recorded" (default) or "unrecorded"."""

import sys

import torch

import tidepool
from common import MiB, emit

mode = sys.argv[1] if len(sys.argv) > 1 else "recorded"
tidepool.torch.use()
side = torch.cuda.Stream()
elements = 64 * MiB // 4
read_done = torch.cuda.Event()


def round_trip(record):
    source = torch.full((elements,), 1.0, device="cuda")
    torch.cuda.synchronize()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(2_000_000_000)  # about a second of GPU time before the read
        copied = source * 1
        read_done.record()
    if record:
        source.record_stream(side)
    source_address = source.data_ptr()
    del source  # freed on the current stream while the side stream has yet to read it
    overwriting = torch.full((elements,), 7.0, device="cuda")
    busy = not read_done.query()
    reused = overwriting.data_ptr() == source_address
    torch.cuda.synchronize()
    return reused, busy, bool((copied == 1.0).all().item())


with torch.cuda.stream(side):
    torch.cuda._sleep(1)
round_trip(record=False)  # loads every kernel; its figures are not the test's
torch.cuda.synchronize()
reused, busy, read_right = round_trip(record=(mode == "recorded"))
emit({"mode": mode, "reused_at_once": reused, "side_busy_at_reuse": busy,
      "side_stream_read_what_it_was_given": read_right})
