"""A CUDA graph captured over tensors of a tidepool tag (a torch.cuda.MemPool over tag "graph";
PyTorch's own allocator elsewhere, as vLLM runs) replays correctly after the tag slept and woke:
the same addresses, the weights restored, new inputs copied in. Prints the checks as JSON."""

import torch

import tidepool
from common import GiB, emit, torch_memory

torch.manual_seed(0)
pool = tidepool.torch.mem_pool("graph")
with torch.cuda.use_mem_pool(pool):
    weight = torch.randn(2048, 2048, device="cuda")
    bias = torch.randn(2048, device="cuda")
    static_in = torch.zeros(64, 2048, device="cuda")
tagged = tidepool.tag_stats("graph")

# Warm up on a side stream, then capture (PyTorch's recipe).
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for _ in range(2):
        torch.relu(static_in @ weight + bias)
torch.cuda.current_stream().wait_stream(side)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    static_out = torch.relu(static_in @ weight + bias)

x1 = torch.randn(64, 2048, device="cuda")
static_in.copy_(x1)
graph.replay()
before = static_out.clone()
expected = torch.relu(x1 @ weight + bias)
addresses = [t.data_ptr() for t in (weight, bias, static_in)]

nvml = torch_memory()
torch.cuda.synchronize()
held = nvml.bytes()
returned = tidepool.sleep("graph", keep="contents")
asleep_nvml = nvml.bytes()
# Another engine scribbles over the memory the tag gave back.
other = torch.full((GiB // 2,), float("nan"), device="cuda")
torch.cuda.synchronize()
del other
torch.cuda.empty_cache()
tidepool.wake("graph")

graph.replay()
after_same_input = static_out.clone()
x2 = torch.randn(64, 2048, device="cuda")
static_in.copy_(x2)
graph.replay()
torch.cuda.synchronize()
emit({
    "tagged_mapped": tagged.mapped_bytes,
    "returned": returned,
    "nvml_drop": held - asleep_nvml,
    "same_addresses": addresses == [t.data_ptr() for t in (weight, bias, static_in)],
    "replay_matches_eager": bool(torch.equal(before, expected)),
    "replay_after_wake_same": bool(torch.equal(after_same_input, before)),
    "replay_new_input_matches_eager": bool(torch.equal(static_out, torch.relu(x2 @ weight + bias))),
})
