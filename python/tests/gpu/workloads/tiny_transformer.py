"""The small decoder-style transformer the PyTorch training workloads train, and the settings that
make its steps bit-reproducible (so two allocators, or a run with sleep and one without, can be
compared loss for loss)."""

import torch


def make_deterministic():
    """Seeds and kernel choices that make a training step give the same bits every run."""
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    # The math attention kernels: the fused ones' backward passes may use atomics.
    torch.backends.cuda.enable_flash_sdp(False)
    torch.backends.cuda.enable_mem_efficient_sdp(False)
    torch.backends.cuda.enable_math_sdp(True)


class TinyTransformer(torch.nn.Module):
    """Embedding, `layers` causal encoder layers of `width`, and a head over `vocab` tokens."""

    def __init__(self, vocab, width, layers):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        layer = torch.nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=4 * width,
                                                 dropout=0.1, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(width, vocab)

    def forward(self, tokens):
        mask = torch.nn.Transformer.generate_square_subsequent_mask(tokens.shape[1], device=tokens.device)
        return self.head(self.encoder(self.embed(tokens), mask=mask, is_causal=True))
