"""Probe: CUDA graph capture with PyTorch routed to tidepool (not committed)."""
import json, sys, traceback
import torch
mode = sys.argv[1]; err_mode = sys.argv[2] if len(sys.argv) > 2 else "global"
if mode == "tidepool":
    import tidepool
    tidepool.torch.use()
out = {"mode": mode, "capture_error_mode": err_mode}
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda()
static_in = torch.randn(256, 1024, device="cuda")
side = torch.cuda.Stream(); side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for _ in range(3):
        model(static_in)
torch.cuda.current_stream().wait_stream(side)
g = torch.cuda.CUDAGraph()
try:
    with torch.cuda.graph(g, capture_error_mode=err_mode):
        h = model[0](static_in)
        h_ptr = h.data_ptr()
        a = model[1](h)
        a_ptr = a.data_ptr()
        del h
        static_out = model[2](a)
        del a
    out["capture"] = "ok"
except Exception as e:
    out["capture"] = "failed: " + repr(e)[:400]
    print(json.dumps(out)); sys.exit(0)
eager = [torch.full((256, 4096), float(i + 1), device="cuda") for i in range(8)]
out["eager_overlaps_intermediate"] = [t.data_ptr() in (h_ptr, a_ptr) for t in eager]
for _ in range(3):
    g.replay()
torch.cuda.synchronize()
out["eager_intact"] = all(bool((t == i + 1).all()) for i, t in enumerate(eager))
ref = model(static_in)
out["graph_output_correct"] = bool(torch.allclose(ref, static_out, atol=1e-3))
if mode == "tidepool":
    import tidepool
    s = tidepool.stats()
    out["stats"] = str(s)[:300]
del g
torch.cuda.synchronize()
print(json.dumps(out))
