"""A few training steps of a small transformer; prints the losses and a hash of the weights.
Argument: "tidepool" (allocations routed to tidepool) or "default" (PyTorch's own allocator)."""

import sys

import torch

from common import emit, weights_digest
from tiny_transformer import TinyTransformer, make_deterministic

allocator = sys.argv[1]
if allocator == "tidepool":
    import tidepool

    tidepool.torch.use()

make_deterministic()

vocab, width, length, batch = 1000, 128, 64, 16

model = TinyTransformer(vocab, width, layers=2).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
generator = torch.Generator().manual_seed(1)
losses = []
for step in range(8):
    # A different sequence length each step, so blocks of many sizes are freed and reused.
    tokens = torch.randint(0, vocab, (batch, length - 4 * (step % 3) + 1), generator=generator).cuda()
    logits = model(tokens[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    losses.append(loss.item().hex())
torch.cuda.synchronize()
result = {"losses": losses, "weights": weights_digest(model)}
if allocator == "tidepool":
    result["tidepool_allocations"] = tidepool.stats(0).allocations
emit(result)
