"""Engine ``torchgpipe``: the paper's system (mCAP 3.5), ``torchgpipe.GPipe`` over G CUDA
devices in one worker process, each device's peak read with ``max_memory_allocated``.

torchgpipe runs only the fill-drain schedule, with its own checkpoint modes (the same three
names mcap uses).
"""
from __future__ import annotations

import copy
import gc
import time
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from mcap.core.errors import McapError
from mcap.runner.protocol import StageResult
from mcap.runner.train import ITERATIONS, Window, classify, make_optimizer
from mcap.core.types import Setup


@dataclass
class Resident:
    module: nn.Sequential  # on the host; each run copies it onto the devices
    loss: Callable
    inputs: torch.Tensor
    targets: torch.Tensor


def check_devices(setup: Setup, found: int) -> None:
    """torchgpipe puts stage i on GPU i: it needs G GPUs and the fill-drain schedule."""
    if setup.device != "cuda":
        raise McapError("engine torchgpipe runs on CUDA devices only; use engine pipelining "
                        "on the CPU")
    if found < setup.stages:
        raise McapError(f"engine torchgpipe needs {setup.stages} CUDA devices (one per stage) "
                        f"but found {found}; use engine pipelining, whose stage processes can "
                        "share a GPU")
    if setup.schedule != "gpipe":
        raise McapError(f"engine torchgpipe runs only the gpipe schedule, not {setup.schedule!r}")


def build_resident(spec: str, setup: Setup):
    from mcap.models import build_model

    check_devices(setup, torch.cuda.device_count())
    built = build_model(spec)
    inputs, targets = built.example_batch(setup.batch_size)
    return Resident(built.module, built.loss, inputs, targets), built.info


def run(res: Resident, setup: Setup, balance: tuple[int, ...]) -> tuple[StageResult, ...]:
    from torchgpipe import GPipe

    devices = [torch.device("cuda", i) for i in range(setup.stages)]
    window = Window(devices, setup.capacity_bytes)
    objects: list = []
    try:
        window.limit()
        model = GPipe(copy.deepcopy(res.module), list(balance), devices=devices,
                      chunks=setup.chunks, checkpoint=setup.checkpoint)
        optimizer = make_optimizer(setup, model.parameters())
        objects += [model, optimizer]
        gc.collect()
        window.start()
        start = time.perf_counter()
        for _ in range(ITERATIONS):
            optimizer.zero_grad(set_to_none=True)
            inputs = res.inputs.to(devices[0])
            targets = res.targets.to(devices[-1])
            res.loss(model(inputs), targets).backward()
            optimizer.step()
            del inputs, targets
        seconds = time.perf_counter() - start
        window.stop()
        return tuple(StageResult(i, "ok", peak, None, seconds)
                     for i, peak in enumerate(window.peaks()))
    except Exception as exc:
        window.stop()
        status, message = classify(exc)
        return tuple(StageResult(i, status, error=message) for i in range(setup.stages))
    finally:
        objects.clear()
        gc.collect()
        torch.cuda.empty_cache()
