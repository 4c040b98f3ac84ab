"""Building models (torch): the built-in ones and user models; see ``mcap.models``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import nn
from torch.nn import functional as F

from mcap.models.spec import KNOWN_MODELS, ModelKind, ModelParam, normalise_spec, parse_spec
from mcap.core.types import Layer, ModelInfo

__all__ = ["BuiltModel", "build_model", "parse_spec", "normalise_spec", "KNOWN_MODELS",
           "ModelKind", "ModelParam", "model_info", "count_parameters"]


@dataclass(frozen=True)
class BuiltModel:
    module: nn.Sequential
    example_batch: Callable[..., tuple]  # (batch_size, seed=0) -> (inputs, targets)
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    info: ModelInfo


def _generator(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def _image_batch(image_size: int, classes: int) -> Callable[..., tuple]:
    """Random images and labels, like the paper's randomly generated 224x224 data (4.1)."""
    def example_batch(batch_size: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        g = _generator(seed)
        x = torch.randn(batch_size, 3, image_size, image_size, generator=g)
        return x, torch.randint(0, classes, (batch_size,), generator=g)
    return example_batch


def _token_batch(vocab: int, seq: int) -> Callable[..., tuple]:
    def example_batch(batch_size: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        g = _generator(seed)
        ids = torch.randint(0, vocab, (batch_size, seq), generator=g)
        return ids, torch.randint(0, vocab, (batch_size, seq), generator=g)
    return example_batch


def _build(name: str, params: dict) -> tuple[nn.Sequential, Callable, Callable]:
    if name == "vgg11":
        from mcap.models.vgg import vgg11
        return (vgg11(**params), _image_batch(params["image_size"], params["classes"]),
                F.cross_entropy)
    if name == "amoebanet-d":
        from mcap.models.amoebanet import amoebanet_d
        return (amoebanet_d(**params), _image_batch(params["image_size"], params["classes"]),
                F.cross_entropy)
    if name == "gpt":
        from mcap.models.gpt import gpt, lm_loss
        return gpt(**params), _token_batch(params["vocab"], params["seq"]), lm_loss
    from mcap.models.user import load_user_model
    return load_user_model(name, params)


def model_info(spec: str, module: nn.Sequential) -> ModelInfo:
    layers = tuple(
        Layer(name, sum(p.numel() * p.element_size() for p in child.parameters()),
              type(child).__name__)
        for name, child in module.named_children())
    return ModelInfo(spec=spec, layers=layers)


def build_model(spec: str, device: Optional[str] = None, seed: int = 0) -> BuiltModel:
    """Build the model a spec names. ``device="meta"`` builds shapes only (no memory),
    for counting parameters of models too large to allocate. Weights are seeded so every
    stage process builds identical layers; the caller's RNG state is left untouched."""
    name, params = parse_spec(spec)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if device is not None:
            with torch.device(device):
                module, example_batch, loss = _build(name, params)
        else:
            module, example_batch, loss = _build(name, params)
    return BuiltModel(module, example_batch, loss, model_info(normalise_spec(spec), module))


def count_parameters(spec: str) -> int:
    """Trainable parameters of a spec, counted on the meta device (allocates nothing)."""
    module = build_model(spec, device="meta").module
    return sum(p.numel() for p in module.parameters() if p.requires_grad)
