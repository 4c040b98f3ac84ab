"""What running a model costs, counted before anything is allocated (issue 38, item 2).

``recommend --method time`` built the file's model at the file's batch size: a profile with
``setup.batch_size`` 2^20, or a spec ``vgg11:image_size=4096``, asked torch for 32-64 GiB and
ended in a traceback. The parameters were counted on the meta device already
(``mcap.models.limits``), the activations were not. :func:`timing_bytes` counts them too: the
model is built on the meta device (shapes only, no memory) and each top-level layer runs
forward on a meta micro-batch while a dispatch mode adds up the bytes of every tensor an op
makes (views and in-place results left out). What torchgpipe's ``balance_by_time`` holds at
once (``torchgpipe.balance.profile.profile_times``: one layer at a time, its copy, its
forward and backward) is then

    2 x the model's parameters (the model and mcap's out-of-place copy)
    + the largest, over layers, of 3 x its parameters (its copy and their gradients)
      + 2 x (its input + what its forward makes) (the activations and their gradients),

an upper bound (a temporary freed inside a layer still counts), cheap to refuse with.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def _nbytes(t) -> int:
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


class _Made(TorchDispatchMode):
    """Adds up the bytes of the tensors the ops it sees make (not views, not in place)."""

    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {id(a) for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)}
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and not t._is_view() and id(t) not in inputs:
                self.bytes += _nbytes(t)
        return out


def _params(module) -> int:
    return sum(_nbytes(p) for p in module.parameters())


def timing_bytes(spec: str, micro_batch: int, *, allow_user_code: bool = False
                 ) -> Optional[tuple[int, int]]:
    """(bytes timing the model on one micro-batch needs, its number of layers), counted on
    the meta device (module docstring); None when the model cannot run there (a user model
    that needs real data): then only its parameters were checked."""
    from mcap.models.build import build_model
    built = build_model(spec, device="meta", allow_user_code=allow_user_code)
    try:
        with torch.device("meta"):
            x, _ = built.example_batch(micro_batch)
        largest = 0
        with torch.enable_grad():
            for layer in built.module:
                made = _Made()
                inputs = sum(_nbytes(t) for t in tree_flatten(x)[0])
                with made:
                    x = layer(*x) if isinstance(x, tuple) else layer(x)
                largest = max(largest, 3 * _params(layer) + 2 * (inputs + made.bytes))
    except Exception:  # noqa: BLE001 - a layer meta tensors cannot run: counted as built
        return None
    return 2 * _params(built.module) + largest, built.info.num_layers
