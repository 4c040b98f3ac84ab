"""What every stage process keeps between runs, uncounted (engine ``pipelining``): the whole
model on the meta device, one example batch, and each layer's output for one micro-batch on
the meta device (:class:`Resident`). Built once per process, or once by the zygote before
it forks (:func:`prebuild`), under ``memtrack.suspended()``; the model and the boundaries
follow ``Setup.precision`` (``mcap.runner.precision``).

Only the layers of the stage being measured are ever materialised, on its device
(:meth:`Resident.stage_layers`, ``mcap.models.stage.materialise``; issue 41, item 2): an 8B
model's stage of one block is built on one GPU while the whole model exists only as meta
tensors, in neither host nor device memory. A user model (``package.module:function``) that
cannot be built on the meta device is built whole on the host and sliced, as before."""
from __future__ import annotations

import contextlib
import copy
import dataclasses
from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import nn

from mcap.core.types import Setup
from mcap.runner import memtrack, precision


@dataclass
class Resident:
    """What a stage process keeps between runs, none of it counted: the whole model, one
    example batch, and each layer's output on the meta device for one micro-batch."""
    module: nn.Sequential
    loss: Callable
    inputs: torch.Tensor
    targets: torch.Tensor
    shapes: list  # shapes[i]: meta tensor(s) layer i outputs; shapes[-1] is the input
    meta: bool = False  # module on the meta device: stage_layers materialises a stage's layers

    def stage_layers(self, first: int, last: int, device) -> nn.Sequential:
        """Layers ``first..last`` on ``device``, the stage's own copy: materialised from the
        meta model (nothing else of the model is allocated anywhere), or deep-copied from
        the whole model built on the host (a user model)."""
        if self.meta:
            from mcap.models.stage import materialise
            return materialise(self.module, first, last, str(device))
        return copy.deepcopy(self.module[first:last + 1]).to(device)


def tensor_shapes(module: nn.Sequential, micro_inputs: torch.Tensor,
                  autocast_device: Optional[str] = None) -> list:
    """Each layer's output as meta tensors (no memory, no compute), input last.

    ``autocast_device``: the forward runs under bf16 autocast on that device type, whose
    rules decide each output's dtype (CPU autocast leaves a LayerNorm's output in bf16,
    CUDA's in float32). Meta tensors ignore autocast, so the layers then run on fake
    tensors of that device (``FakeTensorMode``: shapes and dtypes, no memory)."""
    meta = copy.deepcopy(module).to("meta")
    outs = []
    # Grad mode on: an activation's requires_grad tells the receiving stage to send its
    # gradient back; without it the earlier stages would silently never train.
    if autocast_device is None:
        x = micro_inputs.to("meta")
        with torch.enable_grad():
            for layer in meta:
                x = layer(x)
                outs.append(_detached(x))
        return outs + [micro_inputs.to("meta")]
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode(allow_non_fake_inputs=True), torch.enable_grad():
        fake = meta.to_empty(device=autocast_device)
        x = torch.empty(micro_inputs.shape, dtype=micro_inputs.dtype, device=autocast_device)
        if micro_inputs.is_floating_point():
            x.normal_()
        else:
            x.zero_()
        with torch.autocast(device_type=autocast_device, dtype=torch.bfloat16):
            for layer in fake:
                x = layer(x)
                outs.append(_as_meta(x))
    return outs + [micro_inputs.to("meta")]


def _as_meta(x):
    if isinstance(x, (tuple, list)):
        return tuple(_as_meta(t) for t in x)
    return torch.empty(x.shape, dtype=x.dtype, device="meta").requires_grad_(x.requires_grad)


def _detached(x):
    """Layers may pass tuples (AmoebaNet's cells pass (state, skip)); keep the structure."""
    if isinstance(x, (tuple, list)):
        return tuple(_detached(t) for t in x)
    return x.detach().requires_grad_(x.requires_grad)


# (spec, batch size, chunks) -> (Resident, ModelInfo) or the exception building raised: built
# by the zygote before it forks (mcap.runner.zygote), so every forked stage shares one copy.
_prebuilt: Optional[tuple[tuple, object]] = None


def prebuild(spec: str, setup: Setup) -> None:
    """Build the resident model before forking the stage processes; :func:`build_resident`
    then returns it in every child. It is built on one intra-op thread, so no OpenMP pool
    exists to be broken by the fork, and before memtrack is installed, so it is uncounted
    as it is when a stage process builds it itself (under ``memtrack.suspended()``)."""
    global _prebuilt
    torch.set_num_threads(1)
    key = _resident_key(spec, setup)
    try:
        _prebuilt = (key, build_resident(spec, setup))
    except Exception as exc:  # re-raised in each child, which reports it in its Hello
        _prebuilt = (key, exc)


def _resident_key(spec: str, setup: Setup) -> tuple:
    return spec, setup.batch_size, setup.chunks, setup.precision


def build_resident(spec: str, setup: Setup) -> tuple[Resident, "object"]:
    """Build the model once per process, uncounted; returns it and its ModelInfo."""
    if _prebuilt is not None and _prebuilt[0] == _resident_key(spec, setup):
        if isinstance(_prebuilt[1], Exception):
            raise _prebuilt[1]
        return _prebuilt[1]

    with memtrack.suspended() if memtrack.installed() else contextlib.nullcontext():
        built, meta = _built(spec)
        module = precision.cast_module(built.module, setup)
        inputs, targets = built.example_batch(setup.batch_size)
        micro = inputs[: max(1, setup.batch_size // setup.chunks)]
        micro = precision.batch_on(micro, setup, micro.device)
        shapes = tensor_shapes(module, micro, "cuda" if setup.device == "cuda" else "cpu") \
            if setup.precision == "bf16-autocast" else tensor_shapes(module, micro)
    # each layer's output bytes per micro-batch: what crosses a boundary after it, which
    # the schedules' memory model (mcap.core.schedules.memory) needs
    info = dataclasses.replace(built.info, layers=tuple(
        dataclasses.replace(layer, out_bytes=nbytes(shapes[i]))
        for i, layer in enumerate(built.info.layers)))
    return Resident(module, built.loss, inputs, targets, shapes, meta), info


def _built(spec: str):
    """(the model, whether it is on the meta device): a built-in model on meta (no memory),
    a user model as it builds (it may not build on meta)."""
    from mcap.models import build_model
    from mcap.models.build import BuiltModel
    from mcap.models.spec import is_user_spec
    from mcap.models.stage import meta_model
    if is_user_spec(str(spec).strip()):
        return build_model(spec), False
    module, example_batch, loss, info = meta_model(spec)
    return BuiltModel(module, example_batch, loss, info), True


def nbytes(meta) -> int:
    """Bytes of one micro-batch's activation (a meta tensor or a tuple of them)."""
    metas = meta if isinstance(meta, (tuple, list)) else (meta,)
    return sum(m.numel() * m.element_size() for m in metas)
