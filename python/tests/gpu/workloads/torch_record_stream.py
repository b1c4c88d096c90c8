"""Tensor.record_stream under tidepool.torch.use(): a tensor made on the current stream is read by
a side stream behind a long kernel (torch.cuda._sleep), recorded there and dropped at once; the
next tensor of the same size on the current stream is written before the side stream reads. With
the call reaching tidepool the new tensor gets other memory and the side stream reads the values it
was given; without it (`mode` "unrecorded": the same program with no record_stream call, the
hazard record_stream exists for) it would reuse the dropped tensor's memory at once. Prints the
figures as JSON. `mode`: "recorded" (default) or "unrecorded"."""

import sys

import torch

import tidepool
from common import MiB, emit

mode = sys.argv[1] if len(sys.argv) > 1 else "recorded"
tidepool.torch.use()
side = torch.cuda.Stream()
elements = 64 * MiB // 4
source = torch.full((elements,), 1.0, device="cuda")
torch.cuda.synchronize()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    torch.cuda._sleep(500_000_000)  # about a quarter of a second of GPU time before the read
    copied = source * 1
if mode == "recorded":
    source.record_stream(side)
source_address = source.data_ptr()
del source  # freed on the current stream while the side stream has yet to read it
overwriting = torch.full((elements,), 7.0, device="cuda")
reused = overwriting.data_ptr() == source_address
torch.cuda.synchronize()
emit({"mode": mode, "reused_at_once": reused,
      "side_stream_read_what_it_was_given": bool((copied == 1.0).all().item())})
