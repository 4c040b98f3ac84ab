"""User models that are not an nn.Sequential, for the tracer tests (no tests here). Loaded
by the stage processes as ``tests.models.traced_models:FUNCTION``: residual blocks in a ModuleDict
and a forward with a skip around all of them (issue 29)."""
import torch
from torch import nn
from torch.nn import functional as F


class Residual(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.ln(x))))


class SkipNet(nn.Module):
    """embed -> blocks (a dict) -> head, with the embedding added back before the head."""

    def __init__(self, d: int, blocks: int, classes: int = 10):
        super().__init__()
        self.embed = nn.Linear(16, d)
        self.blocks = nn.ModuleDict({f"b{i}": Residual(d) for i in range(blocks)})
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        h = self.embed(x)
        skip = h
        for block in self.blocks.values():
            h = block(h)
        return self.head(h + skip)


class DataDependent(Residual):
    def forward(self, x):
        if x.mean() > 0:  # control flow on a value: the tracer cannot capture it
            return x
        return super().forward(x)


def _batch(batch_size: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch_size, 16, generator=g), torch.randint(0, 10, (batch_size,), generator=g)


def skipnet(d: int = 32, blocks: int = 4):
    return SkipNet(d, blocks), _batch, F.cross_entropy


def skipnet_named(d: int = 32, blocks: int = 4):
    """The same model cut only where the user says: embed | b0..b1 | b2..b3 + head."""
    return SkipNet(d, blocks), _batch, F.cross_entropy, ["embed", "blocks.b0", "blocks.b2"]


def untraceable(d: int = 32, blocks: int = 4):
    model = SkipNet(d, blocks)
    model.blocks["b2"] = DataDependent(d)
    return model, _batch, F.cross_entropy
