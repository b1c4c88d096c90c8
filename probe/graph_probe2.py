"""Probe 2: hazards after capture (not committed)."""
import json, sys
import torch
mode, scenario = sys.argv[1], sys.argv[2]
if mode == "tidepool":
    import tidepool
    tidepool.torch.use()
out = {"mode": mode, "scenario": scenario}
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda()
static_in = torch.randn(256, 1024, device="cuda")
side = torch.cuda.Stream(); side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for _ in range(3):
        model(static_in)
torch.cuda.current_stream().wait_stream(side)
def release():
    if mode == "tidepool":
        import tidepool; out["released"] = tidepool.release_cached_memory()
    else:
        torch.cuda.empty_cache()
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    h = model[0](static_in); ptrs = [h.data_ptr()]
    a = model[1](h); ptrs.append(a.data_ptr()); del h
    static_out = model[2](a); del a
ptrs.append(static_out.data_ptr())
ref = model(static_in).clone()
if scenario == "release":
    torch.cuda.synchronize(); release()
elif scenario == "free_output":
    del static_out
    torch.cuda.synchronize()
elif scenario == "free_output_release":
    del static_out
    torch.cuda.synchronize(); release()
eager = [torch.full((256, 4096), float(i + 1), device="cuda") for i in range(8)]
eager += [torch.full((256, 1024), float(i + 1), device="cuda") for i in range(8)]
out["eager_on_graph_memory"] = sum(t.data_ptr() in ptrs for t in eager)
for _ in range(3):
    g.replay()
torch.cuda.synchronize()
vals = [i + 1 for i in range(8)] * 2
out["eager_intact"] = all(bool((t == v).all()) for v, t in zip(vals, eager))
if scenario not in ("free_output", "free_output_release"):
    out["graph_output_correct"] = bool(torch.allclose(ref, static_out, atol=1e-3))
if mode == "tidepool":
    import tidepool
    s = tidepool.stats()
    out["driver"] = str(getattr(s, "driver", ""))[:400]
print(json.dumps(out))
