"""Training steps of a small transformer whose weights, gradients and AdamW state live in tag
"train" (the backward pass's too, through region(all_threads=True)); in mode "sleep" the tag sleeps (contents kept) and wakes between steps, while another
engine fills the freed memory with garbage. Prints the losses, a hash of the weights and, in mode
"sleep", NVML's figures around each sleep. Modes: "default" (PyTorch's allocator), "tidepool"
(routed to tidepool, no sleep), "sleep"."""

import sys

import torch

from common import GiB, emit, torch_memory, weights_digest
from tiny_transformer import TinyTransformer, make_deterministic

mode = sys.argv[1]
if mode != "default":
    import tidepool

    tidepool.torch.use()

make_deterministic()

vocab, width, length, batch = 1000, 256, 64, 16

class tagged:
    """tidepool.region("train") when routed to tidepool, else nothing."""

    def __enter__(self):
        # all_threads: the backward pass runs on PyTorch's autograd thread; its gradients carry the tag too.
        self.region = tidepool.region("train", all_threads=True) if mode != "default" else None
        if self.region is not None:
            self.region.__enter__()

    def __exit__(self, *exc):
        if self.region is not None:
            self.region.__exit__(*exc)


with tagged():
    model = TinyTransformer(vocab, width, layers=4).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
generator = torch.Generator().manual_seed(1)
losses = []
sleeps = []
addresses = [p.data_ptr() for p in model.parameters()]
nvml = torch_memory() if mode == "sleep" else None
for step in range(8):
    tokens = torch.randint(0, vocab, (batch, length - 4 * (step % 3) + 1), generator=generator).cuda()
    with tagged():
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=False)  # gradients stay live across the sleep too
        loss.backward()
        optimizer.step()
    losses.append(loss.item().hex())
    if mode == "sleep":
        del logits, loss
        before = nvml.bytes()
        back = tidepool.sleep("train", keep="contents")
        asleep = nvml.bytes()
        # The other engine: untagged memory over what the tag gave back, filled with garbage.
        other = torch.full((GiB // 4,), float("nan"), device="cuda")
        torch.cuda.synchronize()
        del other
        tidepool.release_cached_memory()
        tidepool.wake("train")
        sleeps.append({"nvml_before": before, "nvml_asleep": asleep, "nvml_awake": nvml.bytes(), "returned": back,
                       "woken": tidepool.tag_stats("train").mapped_bytes})
torch.cuda.synchronize()
result = {"losses": losses, "weights": weights_digest(model),
          "same_addresses": addresses == [p.data_ptr() for p in model.parameters()]}
if mode == "sleep":
    result["sleeps"] = sleeps
    result["train_tag_live"] = tidepool.tag_stats("train").live_allocations
    result["parameters"] = len(list(model.parameters()))
emit(result)
