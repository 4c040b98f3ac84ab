"""Mixed precision in a stage process (issue 39, item 4): ``Setup.precision``.

- ``fp32``: everything in float32 (the paper's setting).
- ``bf16-autocast``: float32 parameters, gradients and optimizer state; each forward (and
  the loss) runs under ``torch.autocast(dtype=torch.bfloat16)``, so matmul-like ops compute
  and save their activations in bf16 while the parameters stay float32 (autocast's cached
  bf16 copies of the weights live as long as the forward's graph needs them).
- ``bf16``: bf16 parameters and activations with float32 master weights and optimizer
  state, as torchtitan keeps them (FSDP2's ``MixedPrecisionPolicy(param_dtype=bf16,
  reduce_dtype=fp32)``: the sharded float32 parameters are the master copy, the unsharded
  bf16 copy computes, gradients are reduced and kept in float32). Without FSDP the same
  memory is held this way: the stage's layers are cast to bf16 (the working copy), a
  float32 master copy of every parameter is kept beside them, and after the schedule's step
  each bf16 gradient becomes the master's float32 gradient before the optimizer steps the
  master and the result is copied back into the bf16 parameters.
"""
from __future__ import annotations

import contextlib
from typing import Iterable

import torch
from torch import nn

from mcap.core.types import Setup
from mcap.runner import memtrack


def dtype(setup: Setup) -> torch.dtype:
    """The dtype activations cross the stage boundaries in."""
    return torch.bfloat16 if setup.precision == "bf16" else torch.float32


def autocast(setup: Setup, device: torch.device):
    """The context each forward and loss runs in."""
    if setup.precision == "bf16-autocast":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def cast_module(module: nn.Module, setup: Setup) -> nn.Module:
    """The working copy of a model or stage: bf16 under ``bf16`` (floating tensors only)."""
    if setup.precision == "bf16":
        return module.to(torch.bfloat16)
    return module


def batch_on(t: torch.Tensor, setup: Setup, device: torch.device) -> torch.Tensor:
    """A fresh copy of a batch on ``device`` as the first stage takes it: floating inputs in
    bf16 under ``bf16`` (token ids stay integers), in one copy."""
    if setup.precision == "bf16" and t.is_floating_point():
        return t.to(device, dtype=torch.bfloat16, copy=True)
    return t.to(device, copy=True)


class Master:
    """Float32 master weights of a bf16 stage (module docstring); a no-op otherwise."""

    def __init__(self, setup: Setup, params: Iterable[torch.Tensor], track: bool):
        self.on = setup.precision == "bf16"
        self.params = [p for p in params if p.requires_grad]
        self.master: list[torch.Tensor] = []
        if not self.on:
            return
        for p in self.params:
            m = p.detach().to(torch.float32).requires_grad_(True)
            if track:
                memtrack.retag(m, memtrack.WEIGHTS)
            self.master.append(m)

    def optimizer_params(self) -> list:
        return self.master if self.on else self.params

    def to_master(self, track: bool) -> None:
        """After the schedule's step: each bf16 gradient becomes the master's float32 one
        (the bf16 one is let go as it is copied, as a reduce-scatter into float32 would)."""
        if not self.on:
            return
        for p, m in zip(self.params, self.master):
            if p.grad is None:
                m.grad = None
                continue
            m.grad = p.grad.to(torch.float32)
            if track:
                memtrack.retag(m.grad, memtrack.GRADIENTS)
            p.grad = None

    def from_master(self) -> None:
        """After the optimizer's step: the working copy takes the new master weights."""
        if not self.on:
            return
        with torch.no_grad():
            for p, m in zip(self.params, self.master):
                p.copy_(m)

    def zero_grad(self) -> None:
        for m in self.master:
            m.grad = None

