"""A GPT-style decoder: token+position embedding, N pre-norm decoder blocks, head.

Each block is one top-level layer (layers + 2 in all), so a partitioning splits between
blocks as pipeline systems for transformers do.
"""
from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn
from torch.nn import functional as F

from mcap.core.errors import McapError


class Embedding(nn.Module):
    def __init__(self, vocab: int, hidden: int, seq: int):
        super().__init__()
        self.tokens = nn.Embedding(vocab, hidden)
        self.positions = nn.Embedding(seq, hidden)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        return self.tokens(ids) + self.positions(pos)


class Block(nn.Module):
    """Pre-norm causal self-attention + 4x MLP, each with a residual."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(),
                                 nn.Linear(4 * hidden, hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
        q, k, v = (z.view(b, t, self.heads, h // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, h))
        return x + self.mlp(self.ln2(x))


class Head(nn.Module):
    def __init__(self, hidden: int, vocab: int):
        super().__init__()
        self.ln = nn.LayerNorm(hidden)
        self.out = nn.Linear(hidden, vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.ln(x))


def gpt(layers: int, hidden: int, heads: int, vocab: int, seq: int) -> nn.Sequential:
    if min(layers, hidden, heads, vocab, seq) < 1:
        raise McapError(f"gpt: layers, hidden, heads, vocab, seq must be >= 1, got "
                        f"{layers}, {hidden}, {heads}, {vocab}, {seq}")
    if hidden % heads:
        raise McapError(f"gpt: heads={heads} must divide hidden={hidden}")
    mods: OrderedDict[str, nn.Module] = OrderedDict()
    mods["embed"] = Embedding(vocab, hidden, seq)
    for i in range(layers):
        mods[f"block{i + 1}"] = Block(hidden, heads)
    mods["head"] = Head(hidden, vocab)
    return nn.Sequential(mods)


def lm_loss(output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(output.reshape(-1, output.shape[-1]), targets.reshape(-1))
