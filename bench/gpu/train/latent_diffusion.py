"""The diffusion workload's models, in plain PyTorch, laid out as Stable Diffusion's are: a latent
U-Net conditioned on text (residual blocks with the timestep's embedding, self- and
cross-attention transformer blocks at the lower resolutions, skip connections from every block of
the way down to the way up) and the encoder half of its VAE (full-resolution images down to 4
latent channels at 1/8 of the side, one attention over every latent pixel in its middle). Imported
only by workloads.LatentDiffusionTraining, so the other workloads need none of it.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


def _norm(channels):
    return nn.GroupNorm(32, channels, eps=1e-6)


class ResBlock(nn.Module):
    """Two 3x3 convolutions after GroupNorm and SiLU, the timestep's embedding added between them
    (none in the VAE), a 1x1 convolution on the residual where the channels change."""

    def __init__(self, channels, out_channels, time_dim=None):
        super().__init__()
        self.norm1, self.conv1 = _norm(channels), nn.Conv2d(channels, out_channels, 3, padding=1)
        self.time = nn.Linear(time_dim, out_channels) if time_dim else None
        self.norm2, self.conv2 = _norm(out_channels), nn.Conv2d(out_channels, out_channels, 3, padding=1)
        self.skip = nn.Conv2d(channels, out_channels, 1) if channels != out_channels else nn.Identity()

    def forward(self, x, time=None):
        h = self.conv1(F.silu(self.norm1(x)))
        if self.time is not None:
            h = h + self.time(F.silu(time))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return self.skip(x) + h


class Attention(nn.Module):
    """Multi-head attention of `dim`-wide tokens over `context` (itself where none is given)."""

    def __init__(self, dim, heads, context_dim=None):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(context_dim or dim, dim, bias=False)
        self.v = nn.Linear(context_dim or dim, dim, bias=False)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, context=None):
        context = x if context is None else context
        batch, tokens, dim = x.shape

        def split(t):
            return t.reshape(batch, -1, self.heads, dim // self.heads).transpose(1, 2)

        h = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(context)), split(self.v(context)))
        return self.out(h.transpose(1, 2).reshape(batch, tokens, dim))


class TransformerBlock(nn.Module):
    """Self-attention, cross-attention to the text and a GEGLU feed-forward, each after a LayerNorm
    and residual."""

    def __init__(self, dim, heads, context_dim):
        super().__init__()
        self.norm1, self.self_attention = nn.LayerNorm(dim), Attention(dim, heads)
        self.norm2, self.cross_attention = nn.LayerNorm(dim), Attention(dim, heads, context_dim)
        self.norm3 = nn.LayerNorm(dim)
        self.ff_in, self.ff_out = nn.Linear(dim, 8 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x, context):
        x = x + self.self_attention(self.norm1(x))
        x = x + self.cross_attention(self.norm2(x), context)
        value, gate = self.ff_in(self.norm3(x)).chunk(2, dim=-1)
        return x + self.ff_out(value * F.gelu(gate))


class SpatialTransformer(nn.Module):
    """A transformer block over every pixel of a feature map: GroupNorm, 1x1 in, the block, 1x1 out,
    residual."""

    def __init__(self, channels, heads, context_dim):
        super().__init__()
        self.norm = _norm(channels)
        self.proj_in, self.proj_out = nn.Conv2d(channels, channels, 1), nn.Conv2d(channels, channels, 1)
        self.block = TransformerBlock(channels, heads, context_dim)

    def forward(self, x, context):
        batch, channels, height, width = x.shape
        h = self.proj_in(self.norm(x)).flatten(2).transpose(1, 2)
        h = self.block(h, context)
        return x + self.proj_out(h.transpose(1, 2).reshape(batch, channels, height, width))


def timestep_embedding(timesteps, dim):
    """The sinusoidal embedding of each step's diffusion timestep (`dim` wide)."""
    half = dim // 2
    frequencies = torch.exp(-math.log(10000) * torch.arange(half, device=timesteps.device) / half)
    angles = timesteps.float()[:, None] * frequencies[None, :]
    return torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)


class UNet(nn.Module):
    """The latent U-Net: `channels` per level, `blocks` residual blocks a level on the way down and
    one more on the way up (each taking a skip connection), a transformer block after each residual
    block of the levels in `attention`, a middle of residual, transformer, residual."""

    def __init__(self, size):
        super().__init__()
        channels, blocks, head_dim = size.channels, size.blocks, size.head_dim
        self.time_dim = 4 * channels[0]
        self.time_in = nn.Sequential(nn.Linear(channels[0], self.time_dim), nn.SiLU(),
                                     nn.Linear(self.time_dim, self.time_dim))
        self.conv_in = nn.Conv2d(size.latent_channels, channels[0], 3, padding=1)
        self.down = nn.ModuleList()
        skip_channels = [channels[0]]
        current = channels[0]
        for level, width in enumerate(channels):
            for _ in range(blocks):
                self.down.append(self._stage(current, width, level in size.attention, width // head_dim, size))
                current = width
                skip_channels.append(current)
            if level < len(channels) - 1:
                self.down.append(nn.Conv2d(current, current, 3, stride=2, padding=1))
                skip_channels.append(current)
        self.middle = nn.ModuleList([ResBlock(current, current, self.time_dim),
                                     SpatialTransformer(current, current // head_dim, size.context_dim),
                                     ResBlock(current, current, self.time_dim)])
        self.up = nn.ModuleList()
        for level, width in reversed(list(enumerate(channels))):
            for _ in range(blocks + 1):
                self.up.append(self._stage(current + skip_channels.pop(), width, level in size.attention,
                                           width // head_dim, size))
                current = width
            if level > 0:
                self.up.append(nn.Conv2d(current, current, 3, padding=1))  # after a nearest-neighbour 2x
        self.norm_out = _norm(current)
        self.conv_out = nn.Conv2d(current, size.latent_channels, 3, padding=1)
        self.embedding_dim = channels[0]

    def _stage(self, channels, width, attention, heads, size):
        layers = [ResBlock(channels, width, self.time_dim)]
        if attention:
            layers.append(SpatialTransformer(width, heads, size.context_dim))
        return nn.ModuleList(layers)

    def _run_stage(self, stage, x, time, context):
        x = stage[0](x, time)
        return stage[1](x, context) if len(stage) > 1 else x

    def forward(self, latents, timesteps, context):
        time = self.time_in(timestep_embedding(timesteps, self.embedding_dim))
        x = self.conv_in(latents)
        skips = [x]
        for layer in self.down:
            x = layer(x) if isinstance(layer, nn.Conv2d) else self._run_stage(layer, x, time, context)
            skips.append(x)
        x = self.middle[2](self.middle[1](self.middle[0](x, time), context), time)
        for layer in self.up:
            if isinstance(layer, nn.Conv2d):
                x = layer(F.interpolate(x, scale_factor=2.0, mode="nearest"))
            else:
                x = self._run_stage(layer, torch.cat([x, skips.pop()], dim=1), time, context)
        return self.conv_out(F.silu(self.norm_out(x)))


class VAEEncoder(nn.Module):
    """The encoder half of Stable Diffusion's VAE: `channels` per level, two residual blocks a level,
    a stride-2 convolution between levels (three: 1/8 of the side), a middle with one attention over
    every latent pixel, then the latent distribution's mean and log-variance."""

    def __init__(self, size):
        super().__init__()
        channels = size.vae_channels
        self.conv_in = nn.Conv2d(3, channels[0], 3, padding=1)
        layers = []
        current = channels[0]
        for level, width in enumerate(channels):
            layers += [ResBlock(current, width), ResBlock(width, width)]
            current = width
            if level < len(channels) - 1:
                layers.append(nn.Conv2d(current, current, 3, stride=2, padding=0))  # padded (0, 1, 0, 1) first
        self.layers = nn.ModuleList(layers)
        self.middle = nn.ModuleList([ResBlock(current, current), ResBlock(current, current)])
        self.attention_norm = _norm(current)
        self.attention = Attention(current, 1)
        self.norm_out = _norm(current)
        self.conv_out = nn.Conv2d(current, 2 * size.latent_channels, 3, padding=1)

    def forward(self, images):
        x = self.conv_in(images)
        for layer in self.layers:
            x = layer(F.pad(x, (0, 1, 0, 1))) if isinstance(layer, nn.Conv2d) else layer(x)
        x = self.middle[0](x)
        batch, channels, height, width = x.shape
        h = self.attention(self.attention_norm(x).flatten(2).transpose(1, 2))
        x = self.middle[1](x + h.transpose(1, 2).reshape(batch, channels, height, width))
        return self.conv_out(F.silu(self.norm_out(x))).chunk(2, dim=1)  # mean, log-variance
