"""Whether a model can be partitioned onto a device at all (issue 41, bad input). Pure.

A stage holds at least one layer, and training it holds, at its optimizer step, the layer's
weights, their gradients and the optimizer's state (``mcap.runner.train``: SGD with
momentum keeps one buffer per parameter, Adam two). So a layer whose

    param_bytes x (2 + optimizer states)

exceeds a device's memory fits on no stage of any partitioning, whatever its activations:
refused before anything is built or measured, from the parameter bytes the meta device
counts (``mcap.models`` builds shapes only). A lower bound: activations, receive buffers and
workspaces come on top, so a layer that passes may still not fit; one that fails cannot.
"""
from __future__ import annotations

from dataclasses import dataclass

from mcap.core.errors import McapError
from mcap.core.types import ModelInfo
from mcap.core.units import fmt_bytes

# Per-parameter copies the optimizer step holds besides the weight: its gradient and the
# optimizer's state (mcap.runner.train.optimizer: SGD momentum 0.9, Adam's two moments).
STATE_COPIES = {"sgd": 1, "adam": 2}


class LayerTooLarge(McapError):
    """A layer whose training state alone exceeds the device's memory."""


@dataclass(frozen=True)
class LayerNeed:
    index: int
    name: str
    kind: str
    param_bytes: int
    need: int  # weights + gradients + optimizer state


def layer_needs(info: ModelInfo, optimizer: str = "sgd") -> tuple[LayerNeed, ...]:
    """Each layer's least training state (module docstring)."""
    if optimizer not in STATE_COPIES:
        raise McapError(f"unknown optimizer {optimizer!r}; expected one of {', '.join(STATE_COPIES)}")
    copies = 2 + STATE_COPIES[optimizer]
    return tuple(LayerNeed(i, l.name, l.kind, l.param_bytes, copies * l.param_bytes)
                 for i, l in enumerate(info.layers))


def check_layers_fit(info: ModelInfo, memory: int, where: str, optimizer: str = "sgd") -> None:
    """LayerTooLarge naming the largest layer, its bytes and ``where``'s ``memory`` when its
    training state exceeds the memory (module docstring); nothing otherwise."""
    if not info.layers:
        return
    worst = max(layer_needs(info, optimizer), key=lambda n: n.need)
    if worst.need <= memory:
        return
    kind = f" ({worst.kind})" if worst.kind else ""
    raise LayerTooLarge(
        f"{info.spec}: layer {worst.index} {worst.name!r}{kind} has {worst.param_bytes:,} bytes "
        f"of parameters ({fmt_bytes(worst.param_bytes)}); with its gradients and {optimizer}'s "
        f"state a stage holding it needs at least {worst.need:,} bytes ({fmt_bytes(worst.need)}), "
        f"more than the {memory:,} bytes ({fmt_bytes(memory)}) of {where}: no partitioning can "
        f"place it; choose a smaller configuration or a device with more memory")
