"""A few training steps of a small transformer; prints the losses and a hash of the weights.
Argument: "tidepool" (allocations routed to tidepool) or "default" (PyTorch's own allocator)."""

import sys

import torch

from common import emit, weights_digest

allocator = sys.argv[1]
if allocator == "tidepool":
    import tidepool

    tidepool.torch.use()

torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
# The math attention kernels: the fused ones' backward passes may use atomics.
torch.backends.cuda.enable_flash_sdp(False)
torch.backends.cuda.enable_mem_efficient_sdp(False)
torch.backends.cuda.enable_math_sdp(True)

vocab, width, length, batch = 1000, 128, 64, 16


class TinyTransformer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        layer = torch.nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=4 * width,
                                                 dropout=0.1, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = torch.nn.Linear(width, vocab)

    def forward(self, tokens):
        mask = torch.nn.Transformer.generate_square_subsequent_mask(tokens.shape[1], device=tokens.device)
        return self.head(self.encoder(self.embed(tokens), mask=mask, is_causal=True))


model = TinyTransformer().cuda()
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
