"""A few AdamW steps of a small transformer under tidepool.torch.use() with
tidepool.torch.persistent_optimizer_state: prints where the optimizer's state, the weights and a
gradient were placed (persistent or scratch blocks), and the thread's hint after the steps."""

import bisect

import torch

import tidepool
from common import emit
from tiny_transformer import TinyTransformer, make_deterministic

tidepool.torch.use()
make_deterministic()

vocab, width, length, batch = 1000, 256, 64, 16
model = TinyTransformer(vocab, width, layers=2).cuda()
optimizer = tidepool.torch.persistent_optimizer_state(torch.optim.AdamW(model.parameters(), lr=1e-3))
generator = torch.Generator().manual_seed(1)
for step in range(3):
    tokens = torch.randint(0, vocab, (batch, length - 8 * step + 1), generator=generator).cuda()
    logits = model(tokens[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if step == 2:
        gradient = next(model.parameters()).grad.data_ptr()
    optimizer.step()
torch.cuda.synchronize()

live = sorted((b["address"], b["size"], b["persistent"]) for b in tidepool.describe(0)["blocks"]
              if b["state"] == "live")


def placed(ptr):
    """Whether the live block holding `ptr` is persistent (None: no live block holds it)."""
    i = bisect.bisect_right(live, (ptr, float("inf"), True)) - 1
    if i < 0 or not live[i][0] <= ptr < live[i][0] + live[i][1]:
        return None
    return live[i][2]


state = [t.data_ptr() for s in optimizer.state.values() for t in s.values()
         if torch.is_tensor(t) and t.is_cuda and t.numel() > 0]
emit({"state_tensors": len(state),
      "state_persistent": [placed(p) for p in state],
      "weights_persistent": [placed(p.data_ptr()) for p in model.parameters()],
      "gradient_persistent": placed(gradient),
      "hint_after": tidepool.allocating_persistent()})
