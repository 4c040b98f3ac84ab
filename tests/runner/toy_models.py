"""User models for the runner tests (no tests here). Loaded by the stage processes as
``tests.runner.toy_models:exact``, the user-model contract of docs/models.md.

``exact``: ``layers`` layers, each one parameter of ``params`` float32 values used only
through its first ``width`` entries (``y = x * w[:width]``). A stage's memory is then
dominated by numbers known in advance: its weights (4 * params bytes per layer), their
gradients, SGD's momentum buffers, and one gradient-sized temporary (the slice's backward
builds a full-size gradient before it is added in).
"""
import torch
from torch import nn


class Scale(nn.Module):
    def __init__(self, width: int, params: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(params))
        self.width = width

    def forward(self, x):
        return x * self.weight[: self.width]


def exact(width: int = 8, params: int = 100_000, layers: int = 4):
    seq = nn.Sequential(*[Scale(width, params) for _ in range(layers)])

    def example_batch(batch_size: int, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        return torch.randn(batch_size, width, generator=g), torch.zeros(batch_size, width)

    def loss(output, targets):
        return (output - targets).pow(2).mean()

    return seq, example_batch, loss


def linear(width: int = 64, layers: int = 4, scales: int = 2):
    """``scales`` elementwise layers (no matmul) then Linear layers (matmuls, so cuBLAS
    workspaces on CUDA): a stage of only the first kind never needs a BLAS workspace."""
    seq = nn.Sequential(*[Scale(width, width) for _ in range(scales)],
                        *[nn.Linear(width, width) for _ in range(layers - scales)])

    def example_batch(batch_size: int, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        return torch.randn(batch_size, width, generator=g), torch.zeros(batch_size, width)

    def loss(output, targets):
        return (output - targets).pow(2).mean()

    return seq, example_batch, loss


def builtin_gpt(layers: int = 4, hidden: int = 32):
    """The built-in ``gpt:layers=L,hidden=H`` as a user model: built whole on the host and
    sliced by the runner (a user model may not build on the meta device), where the built-in
    spec's stages are materialised from the meta model (tests/runner/test_resident.py)."""
    from mcap.models import build_model
    built = build_model(f"gpt:layers={layers},hidden={hidden}")
    return built.module, built.example_batch, built.loss
