"""The ``time`` baseline: torchgpipe's own throughput-oriented partitioner.

The paper compares mCAP against TorchGPipe's ``balance_by_time`` (4.3): it times each
layer's forward and backward on a sample micro-batch and splits the layers so each stage
gets about the same time. This module calls the real torchgpipe function; :func:`timer`
hands it to the ``time`` search method (``mcap.core.search.time``), whose pick then gets
the predictor's peaks like every other method's.
"""
from __future__ import annotations

import copy
from typing import Optional

from mcap.core.errors import McapError

DEFAULT_TIMEOUT = 1.0


def _without_inplace(module):
    """A copy whose in-place ops (VGG's ReLU(inplace=True)) write to new tensors.

    ``balance_by_time`` detaches each layer's input into a leaf that requires grad, and
    autograd refuses an in-place op on such a leaf. Timing is all that is measured here,
    so an out-of-place copy gives the same split without touching the real model."""
    clone = copy.deepcopy(module)
    for sub in clone.modules():
        if getattr(sub, "inplace", False) is True:
            sub.inplace = False
    return clone


def check_device(device: str) -> None:
    """Refuse (``NoDevice``, an McapError) a device this machine does not have, before the
    model is built: a CUDA profile on a machine without CUDA is left out, never timed on
    the CPU instead (``mcap.core.search.time.no_device_note``)."""
    import torch

    from mcap.core.search.time import NoDevice, no_device_note
    kind = str(device).split(":")[0]
    if kind == "cuda" and not torch.cuda.is_available():
        raise NoDevice(no_device_note(kind))
    if kind not in ("cpu", "cuda"):
        raise McapError(f"time: device {device!r} is not one mcap times on (cpu, cuda)")


def check_fits(spec: str, micro_batch: int, layers: Optional[int] = None) -> None:
    """Refuse (``TooLarge``, an McapError naming the sizes) timing ``spec`` on a micro-batch
    whose parameters and activations, counted on the meta device before anything is
    allocated (``mcap.models.footprint``), exceed the memory available now (issue 38: a
    profile of batch size 2^20 asked torch for 64 GiB); with ``layers``, refuse a spec that
    builds another number of layers than the file that names it lists."""
    from mcap.models.footprint import timing_bytes
    from mcap.models.limits import check_allocation
    from mcap.models.spec import shown
    counted = timing_bytes(spec, micro_batch)
    if counted is None:
        return
    need, built = counted
    if layers is not None and built != layers:
        raise McapError(f"the profile is inconsistent: its model spec {shown(spec)} builds "
                        f"{built} layers but its layer list has {layers}; it cannot be timed")
    check_allocation(f"timing {shown(spec)} on a micro-batch of {micro_batch:,} (its "
                     "parameters and its largest layer's activations, forward and backward, "
                     "counted on the meta device)", need)


def time_balance(spec: str, stages: int, micro_batch: int, *, timeout: float = DEFAULT_TIMEOUT,
                 device: str = "cpu", seed: int = 0) -> tuple[int, ...]:
    """torchgpipe's ``balance_by_time`` for a model spec, on a sample micro-batch; refused
    before anything is allocated when it cannot fit (:func:`check_fits`)."""
    import torch
    from torchgpipe.balance import balance_by_time

    from mcap.models import build_model

    check_device(device)
    if micro_batch < 1:
        raise McapError(f"time: micro-batch size must be >= 1, got {micro_batch}")
    check_fits(spec, micro_batch)
    built = build_model(spec, seed=seed)
    if not 1 <= stages <= built.info.num_layers:
        raise McapError(f"time: cannot split {built.info.num_layers} layers into {stages} stages")
    if micro_batch < 1:
        raise McapError(f"time: micro-batch size must be >= 1, got {micro_batch}")
    module = _without_inplace(built.module).to(device)
    inputs, _ = built.example_batch(micro_batch, seed=seed)
    sample = inputs.to(device) if isinstance(inputs, torch.Tensor) else inputs
    with torch.random.fork_rng(devices=[]):
        balance = balance_by_time(stages, module, sample, timeout=timeout,
                                  device=torch.device(device))
    return tuple(int(n) for n in balance)


def timer(*, device: str = "cpu", timeout: float = DEFAULT_TIMEOUT):
    """The ``time`` method's model timer (``mcap.core.search.time``): pass it in the
    ``SearchContext`` of ``recommend`` where mcap may build the model."""
    def run(spec: str, stages: int, micro_batch: int) -> tuple[int, ...]:
        return time_balance(spec, stages, micro_batch, timeout=timeout, device=device)
    return run


def layer_times(spec: str, micro_batch: int, *, timeout: float = DEFAULT_TIMEOUT,
                device: str = "cpu", seed: int = 0, threads: int = 1) -> tuple[int, ...]:
    """Each layer's forward + backward time on one micro-batch, summed over ``timeout``
    seconds of repeats (torchgpipe's ``profile_times``, what ``balance_by_time`` splits):
    relative costs, in microseconds. ``threads``: the intra-op threads a stage process uses."""
    import torch
    from torchgpipe.balance.profile import profile_times

    from mcap.models import build_model

    if micro_batch < 1:
        raise McapError(f"layer times: micro-batch size must be >= 1, got {micro_batch}")
    check_device(device)
    check_fits(spec, micro_batch)
    built = build_model(spec, seed=seed)
    module = _without_inplace(built.module).to(device)
    inputs, _ = built.example_batch(micro_batch, seed=seed)
    sample = inputs.to(device) if isinstance(inputs, torch.Tensor) else inputs
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.random.fork_rng(devices=[]):
            # One pass first: a layer's first call pays one-off costs (oneDNN kernel
            # creation, lazy thread pools) that would swamp the first layer's share.
            profile_times(module, sample, 1e-9, torch.device(device))
            for p in module.parameters():
                p.grad = None
            times = profile_times(module, sample, timeout, torch.device(device))
    finally:
        torch.set_num_threads(before)
    return tuple(int(t) for t in times)
