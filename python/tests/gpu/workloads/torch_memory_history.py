"""PyTorch's documented memory-debugging workflow, unchanged, on tidepool.torch.use(): record the
history, train a few steps of a small MLP, torch.cuda.memory._dump_snapshot(), turn the history
off; then torch.cuda._memory_viz draws the dump. PyTorch refuses each of these calls under its
pluggable allocator interface; use() answers them from tidepool. Argument: the folder to write
the dump and its pages to. Prints the figures as JSON."""

import os
import pickle
import sys

import torch
from torch.cuda import _memory_viz

import tidepool
from common import emit

out = sys.argv[1]
tidepool.torch.use()
torch.cuda.memory._record_memory_history(max_entries=100000)
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                            torch.nn.Linear(4096, 1024)).cuda()
optimizer = torch.optim.AdamW(model.parameters())
for step in range(5):
    x = torch.randn(64 * (1 + step), 1024, device="cuda")
    model(x).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
torch.cuda.synchronize()
path = os.path.join(out, "history.pickle")
torch.cuda.memory._dump_snapshot(path)
torch.cuda.memory._record_memory_history(enabled=None)
with open(path, "rb") as f:
    snapshot = pickle.load(f)
pages = {"trace_plot": _memory_viz.trace_plot(snapshot),
         "segment_plot": _memory_viz.segment_plot(snapshot)}
for name, page in pages.items():
    with open(os.path.join(out, name + ".html"), "w") as f:
        f.write(page)
emit({"events": len(snapshot["device_traces"][0]),
      "actions": sorted({e["action"] for e in snapshot["device_traces"][0]}),
      "segments": len(torch.cuda.memory_snapshot()),
      "live_blocks": sum(1 for s in snapshot["segments"] for b in s["blocks"]
                         if b["state"] == "active_allocated"),
      "pages": {k: len(v) for k, v in pages.items()},
      "recording_after_off": tidepool.recording_path()})
