"""Build only a stage's layers (issue 41, item 2): a Llama-3.1-8B stage of one block is
about 0.9 GB, the whole model 32 GB of fp32 weights; torch's own stage "dry run" builds the
whole model first and runs out of memory at such sizes (pytorch issue 136226).

    from mcap.models.stage import build_stage, layer_sizes, materialise, meta_model
    stage = build_stage("hf:llama-3.1-8b", first=1, last=1, device="cuda:0")
    stage.module                 # nn.Sequential of layers 1..1 ("block0"), on cuda:0
    stage.info                   # the whole model's ModelInfo (parameter bytes per layer)
    stage.example_batch(2)       # (inputs, targets) of the whole model, as build_model's
    layer_sizes("hf:llama-3.1-8b", micro_batch=1)   # per layer: parameter bytes, and the
                                 # activation bytes one micro-batch saves for backward
    module, example_batch, loss, info = meta_model("hf:llama-3.1-8b")   # once, e.g. in a zygote
    layers = materialise(module, 1, 4, "cuda:0")   # then any stage's layers from it

How: the whole model is built on the meta device (shapes, no memory; ``mcap.models.build``),
the stage's slice ``module[first:last + 1]`` is materialised on ``device`` with
``Module.to_empty`` and then initialised layer by layer: a Hugging Face model with its own
``_init_weights`` (normal weights, unit norms, the rotary frequencies recomputed), the
built-in models with each submodule's ``reset_parameters``, under a seed of (``seed``,
layer index), so a layer is the same tensor values whichever stage builds it. Everything is
zero-filled first, so a parameter no initialiser touches is 0, never uninitialised memory.
A weight two layers share (a tied embedding and head) is one parameter when the stage holds
both, and a copy of its own when it holds one, as ``module[first:last + 1]`` deep-copied by
the runner gives (``mcap.models.hf``: Megatron-LM's placement). The values differ from
``build_model``'s whole-model initialisation; memory does not depend on them.

A user model (``package.module:function``) may not build on the meta device: it is built
whole on ``device`` and sliced, which needs the whole model's memory (said in ``whole``).

Host memory: ``build_stage`` allocates the stage's parameters and buffers on ``device``
only; the meta model costs Python objects (a few MB for 32 blocks), not tensors.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import nn

from mcap.core.errors import McapError
from mcap.core.types import ModelInfo
from mcap.models.build import _construct, model_info
from mcap.models.spec import check_trusted, is_user_spec, normalise_spec, parse_spec


@dataclass(frozen=True)
class StageLayers:
    """Layers ``first..last`` of a model, materialised on ``device``."""
    module: nn.Sequential          # the layers, named as in the whole model
    first: int
    last: int
    device: str
    info: ModelInfo                # the whole model's layers and parameter bytes
    example_batch: Callable[..., tuple]
    loss: Callable
    whole: bool = False            # True when the whole model had to be built (a user model)

    @property
    def param_bytes(self) -> int:
        """Bytes of the stage's parameters (a weight two of its layers share, once)."""
        return sum(p.numel() * p.element_size() for p in self.module.parameters())


@dataclass(frozen=True)
class LayerSize:
    """One layer as the meta device sees it: parameter bytes, and the bytes of the distinct
    storages its forward saves for backward for one micro-batch (an estimate of its
    activations: allocator rounding, recomputation and the stage's schedule are not in it)
    and of its output (what it sends when it ends a stage)."""
    index: int
    name: str
    kind: str
    param_bytes: int
    saved_bytes: int
    output_bytes: int


def _meta_model(spec: str, seed: int, allow_user_code: bool):
    if not allow_user_code:
        check_trusted(spec)
    name, params = parse_spec(spec)
    module, example_batch, loss = _construct(spec, name, params, "meta", seed)
    return module, example_batch, loss, model_info(normalise_spec(spec), module)


def build_stage(spec: str, first: int, last: int, device: str = "cpu", seed: int = 0, *,
                allow_user_code: bool = False) -> StageLayers:
    """Layers ``first..last`` of the model ``spec`` names, on ``device`` (module docstring)."""
    if is_user_spec(str(spec).strip()):
        return _whole_then_slice(spec, first, last, device, seed, allow_user_code)
    module, example_batch, loss, info = _meta_model(spec, seed, allow_user_code)
    if not (isinstance(first, int) and isinstance(last, int) and 0 <= first <= last < info.num_layers):
        raise McapError(f"layers {first}..{last} are not a stage of {info.spec!r}, which has "
                        f"layers 0..{info.num_layers - 1}")
    stage = materialise(module, first, last, device, seed, info.spec)
    return StageLayers(stage, first, last, str(device), info, example_batch, loss)


def meta_model(spec: str, seed: int = 0, *, allow_user_code: bool = False):
    """(the whole model on the meta device, example_batch, loss, ModelInfo): built once, it
    can give every stage its layers (:func:`materialise`), e.g. in a process that forks
    stage processes. Its Python objects cost a few MB; its tensors nothing."""
    return _meta_model(spec, seed, allow_user_code)


def materialise(module: nn.Sequential, first: int, last: int, device: str = "cpu",
                seed: int = 0, name: str = "the model") -> nn.Sequential:
    """Layers ``first..last`` of a meta-device ``module`` (``meta_model``) on ``device``,
    initialised layer by layer (module docstring). The meta module is left as it was."""
    L = len(module)
    if not (isinstance(first, int) and isinstance(last, int) and 0 <= first <= last < L):
        raise McapError(f"layers {first}..{last} are not a stage of {name!r}, which has "
                        f"layers 0..{L - 1}")
    stage = copy.deepcopy(module[first:last + 1])  # meta tensors: Python objects only
    holders = _shared_holders(stage)
    stage.to_empty(device=device)
    _retie(stage, holders)
    init = getattr(module, "mcap_init", None)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        for index, layer in zip(range(first, last + 1), stage):
            torch.manual_seed(seed * 1_000_003 + index)
            _initialise(layer, init)
    return stage


def _whole_then_slice(spec, first, last, device, seed, allow_user_code) -> StageLayers:
    from mcap.models.build import build_model
    built = build_model(spec, device=device, seed=seed, allow_user_code=allow_user_code)
    L = built.info.num_layers
    if not 0 <= first <= last < L:
        raise McapError(f"layers {first}..{last} are not a stage of {built.info.spec!r}, which "
                        f"has layers 0..{L - 1}")
    return StageLayers(built.module[first:last + 1], first, last, str(device), built.info,
                       built.example_batch, built.loss, whole=True)


def _shared_holders(stage: nn.Module) -> list[list[tuple[nn.Module, str]]]:
    """Every (module, attribute) holding each parameter that two or more places hold."""
    by_id: dict[int, list] = {}
    for mod in stage.modules():
        for name, p in mod._parameters.items():
            if p is not None:
                by_id.setdefault(id(p), []).append((mod, name))
    return [h for h in by_id.values() if len(h) > 1]


def _retie(stage: nn.Module, holders) -> None:
    """``to_empty`` gives each holder its own tensor: one parameter again, as before."""
    for group in holders:
        mod, name = group[0]
        kept = mod._parameters[name]
        for other, other_name in group[1:]:
            other._parameters[other_name] = kept


def _initialise(layer: nn.Module, init: Optional[Callable]) -> None:
    for t in list(layer.parameters()) + list(layer.buffers()):
        t.zero_()
    for sub in layer.modules():
        if init is not None:
            init(sub)
        elif hasattr(sub, "reset_parameters"):
            sub.reset_parameters()


def layer_sizes(spec: str, micro_batch: int = 1, seed: int = 0, *,
                allow_user_code: bool = False) -> tuple[LayerSize, ...]:
    """Each layer's parameter bytes and meta-device activation estimate (``LayerSize``) for a
    micro-batch of ``micro_batch`` samples: one forward of the whole model on the meta
    device, nothing allocated."""
    module, example_batch, _, info = _meta_model(spec, seed, allow_user_code)
    inputs, _ = example_batch(micro_batch)
    x = _to_meta(inputs)
    out = []
    for index, (layer, desc) in enumerate(zip(module, info.layers)):
        seen: dict[int, int] = {}

        def pack(t):
            s = t.untyped_storage()
            seen[s._cdata] = s.nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            x = layer(*x) if isinstance(x, tuple) else layer(x)
        outs = x if isinstance(x, tuple) else (x,)
        sent = {o.untyped_storage()._cdata: o.untyped_storage().nbytes() for o in outs
                if isinstance(o, torch.Tensor)}
        out.append(LayerSize(index, desc.name, desc.kind, desc.param_bytes, sum(seen.values()),
                             sum(sent.values())))
    return tuple(out)


def _to_meta(value):
    if isinstance(value, torch.Tensor):
        return value.to("meta")
    if isinstance(value, tuple):
        return tuple(_to_meta(v) for v in value)
    return value
