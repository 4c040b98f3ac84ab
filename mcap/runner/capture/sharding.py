"""How a hybrid stage's layers become data- or tensor-parallel on their device: DDP over the
stage's sub-group with a summing comm hook, or ``nn.Linear``s sharded over its DeviceMesh
(the rules are in :mod:`mcap.runner.capture.device`'s docstring)."""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from mcap.runner.capture.settling import _sum_hook, ddp_settles

# Parameter-free element-wise modules that may sit between the two Linears of a Megatron
# pair: they act on each column shard alone. Dropout is not one of them: its mask on a
# shard would differ from the mask on the whole tensor.
ELEMENTWISE = (nn.ReLU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.Identity)



def tensor_parallel(layers: nn.Module, mesh) -> tuple[str, ...]:
    """Shard ``layers`` in place over ``group`` (module docstring); returns the names of
    the Linears left replicated because the degree does not divide their sharded size."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import (
        ColwiseParallel, RowwiseParallel, parallelize_module,
    )

    k = mesh.size()
    plan: dict = {}
    paired: set = set()
    for prefix, mod in layers.named_modules():
        if not isinstance(mod, nn.Sequential):
            continue
        kids = list(mod.named_children())
        for i, (name, child) in enumerate(kids):
            if not isinstance(child, nn.Linear) or f"{prefix}.{name}" in paired:
                continue
            j = i + 1
            while j < len(kids) and isinstance(kids[j][1], ELEMENTWISE):
                j += 1
            if j < len(kids) and isinstance(kids[j][1], nn.Linear) \
                    and child.out_features % k == 0:
                first, second = (f"{prefix}.{name}".lstrip("."),
                                 f"{prefix}.{kids[j][0]}".lstrip("."))
                plan[first], plan[second] = ColwiseParallel(), RowwiseParallel()
                paired |= {f"{prefix}.{name}", f"{prefix}.{kids[j][0]}"}
    replicated = []
    for name, mod in layers.named_modules():
        if isinstance(mod, nn.Linear) and name not in plan:
            if mod.out_features % k == 0:
                plan[name] = ColwiseParallel(output_layouts=Replicate())
            else:
                replicated.append(name)
    if plan:
        # Every device cloned its layers from the same resident model, so each takes its
        # shard of a weight from its own copy (src_data_rank None) instead of device 0
        # scattering or broadcasting it: the same shards, no traffic, and no collective
        # buffers for gloo's worker thread to free after the measured window opened
        # (traced: 64-256 KiB weight chunks freed there in about 1 run in 8).
        parallelize_module(layers, mesh, plan, src_data_rank=None)
    return tuple(replicated)


def data_parallel(stage_mod: nn.Module, layers: nn.Module, group,
                  device: torch.device) -> Optional[nn.Module]:
    """``stage_mod`` wrapped in DDP over the stage's sub-group, summing gradients
    (:func:`mcap.runner.capture.settling._sum_hook`); None for a stage of parameter-free
    layers (VGG's ReLU or pooling alone), which has no gradient to all-reduce (DDP refuses
    such a module): its devices just take their rows."""
    if not any(p.requires_grad for p in layers.parameters()):
        return None
    from torch.nn.parallel import DistributedDataParallel
    # init_sync=False: no shape check and no broadcast of the parameters from
    # device 0 at construction. Every device cloned its layers from the same
    # resident model, so they start identical without it (as tensor_parallel's
    # src_data_rank=None), and the broadcast's flat copy of the stage's weights
    # was freed by gloo's worker thread whenever it got there: inside the measured
    # window in 55 of 440 device runs of a small GPT under load (on the peak
    # whenever the peak came first).
    ddp = DistributedDataParallel(
        stage_mod, process_group=group, init_sync=False,
        device_ids=[device.index] if device.type == "cuda" else None)
    ddp.register_comm_hook(group, _sum_hook)
    if device.type == "cpu":
        ddp_settles(ddp, stage_mod)
    return ddp
