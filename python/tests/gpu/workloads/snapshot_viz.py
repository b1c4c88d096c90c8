"""PyTorch on tidepool, recorded: a few training steps of a small MLP with recording on, then
tidepool.dump_snapshot() and every torch.cuda._memory_viz view of it (the HTML plots included).
Argument: the folder to write the snapshot, its HTML pages and the recording to."""

import os
import pickle
import sys

import torch
from torch.cuda import _memory_viz

import tidepool
from common import emit

out = sys.argv[1]
tidepool.torch.use()
tidepool.record(os.path.join(out, "run.csv.gz"))

model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda()
optimizer = torch.optim.AdamW(model.parameters())
for step in range(5):
    x = torch.randn(64 * (1 + step), 1024, device="cuda")
    loss = model(x).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
torch.cuda.synchronize()
del x, loss
torch.cuda.empty_cache()  # routed: tidepool hands back what is free

path = os.path.join(out, "snapshot.pickle")
snapshot = tidepool.dump_snapshot(path)
with open(path, "rb") as f:
    assert pickle.load(f) == snapshot
pages = {"trace_plot": _memory_viz.trace_plot(snapshot),
         "trace_plot_segments": _memory_viz.trace_plot(snapshot, plot_segments=True),
         "segment_plot": _memory_viz.segment_plot(snapshot)}
for name, page in pages.items():
    with open(os.path.join(out, name + ".html"), "w") as f:
        f.write(page)
stats = _memory_viz.segsum(snapshot)
text_trace = _memory_viz.trace(snapshot)
flame = _memory_viz.segments(snapshot, format_flamegraph=lambda lines: lines)
tidepool.stop_recording()
emit({"segments": len(snapshot["segments"]), "events": len(snapshot["device_traces"][0]),
      "pages": {k: len(v) for k, v in pages.items()}, "segsum_lines": len(stats.splitlines()),
      "trace_lines": len(text_trace.splitlines()), "flame_lines": len(flame.splitlines()),
      "live_blocks": sum(1 for s in snapshot["segments"] for b in s["blocks"] if b["state"] == "active_allocated")})
