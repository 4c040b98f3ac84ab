"""Engine ``pipelining``: one stage of ``torch.distributed.pipelining`` in this process.

Every stage process holds an uncounted copy of the whole model (built once, under
``memtrack.suspended()``), clones its own layers for each run, and trains them for
``ITERATIONS`` iterations with ``ScheduleGPipe`` (fill-drain) or ``Schedule1F1B``;
activations and their gradients cross to the neighbour processes through the process
group (gloo on CPU, NCCL when every stage has its own GPU); stages that share a GPU pass
only a token per micro-batch through gloo and the tensors on the device
(:mod:`mcap.runner.exchange`; ``MCAP_EXCHANGE=host`` keeps the earlier copies through host
memory).

Stage shapes are given to ``PipelineStage`` up front (``input_args``/``output_args``,
computed on the meta device), so the schedule does not run its dynamic shape inference,
which would execute an extra real forward in the first iteration and inflate its peak.
"""
from __future__ import annotations

import contextlib
import copy
import gc
import time
from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import nn

from mcap.runner import alone as alone_mod
from mcap.runner import exchange, memtrack
from mcap.runner.protocol import StageResult
from mcap.runner.train import (
    ITERATIONS, Recomputed, Window, classify, make_optimizer, tag_weights_and_gradients,
)
from mcap.core.types import Partitioning, Setup


@dataclass
class Resident:
    """What a stage process keeps between runs, none of it counted: the whole model, one
    example batch, and each layer's output on the meta device for one micro-batch."""
    module: nn.Sequential
    loss: Callable
    inputs: torch.Tensor
    targets: torch.Tensor
    shapes: list  # shapes[i]: meta tensor(s) layer i outputs; shapes[-1] is the input


def tensor_shapes(module: nn.Sequential, micro_inputs: torch.Tensor) -> list:
    """Each layer's output as meta tensors (no memory, no compute), input last."""
    x = micro_inputs.to("meta")
    meta = copy.deepcopy(module).to("meta")
    outs = []
    # Grad mode on: an activation's requires_grad tells the receiving stage to send its
    # gradient back; without it the earlier stages would silently never train.
    with torch.enable_grad():
        for layer in meta:
            x = layer(x)
            outs.append(_detached(x))
    return outs + [micro_inputs.to("meta")]


def _detached(x):
    """Layers may pass tuples (AmoebaNet's cells pass (state, skip)); keep the structure."""
    if isinstance(x, (tuple, list)):
        return tuple(_detached(t) for t in x)
    return x.detach().requires_grad_(x.requires_grad)


def stage_device(setup: Setup, rank: int, local_device: Optional[int] = None) -> torch.device:
    """Stage i's device: GPU i, wrapping round when stages share GPUs; under torchrun the
    rank's LOCAL_RANK GPU."""
    if setup.device == "cuda":
        index = local_device if local_device is not None else rank
        return torch.device("cuda", index % torch.cuda.device_count())
    return torch.device("cpu")


def shares_gpu(setup: Setup) -> bool:
    return setup.device == "cuda" and torch.cuda.device_count() < setup.stages


class HostStaged(nn.Module):
    """For GPU stages that share a GPU: gloo sends only host tensors, so activations arrive
    in host memory, move to the GPU for compute, and go back to the host to be sent on.
    Autograd moves their gradients the same way."""

    def __init__(self, inner: nn.Module, device: torch.device, last: bool):
        super().__init__()
        self.inner, self.device, self.last = inner, device, last

    def forward(self, *args):
        out = self.inner(*(a.to(self.device) for a in args))
        if isinstance(out, tuple):
            return out if self.last else tuple(t.to("cpu") for t in out)
        return out if self.last else out.to("cpu")


def run_stage(res: Resident, setup: Setup, balance: tuple[int, ...], rank: int,
              local_device: Optional[int] = None, press=None, alone: bool = False
              ) -> StageResult:
    """Train stage ``rank`` of ``balance`` for 2 iterations; its peak over that window.
    ``press``: an MPress plan to apply (``mcap.runner.press.apply.PressJob``), or None.
    ``alone``: run it alone over the fake process group (:mod:`mcap.runner.alone`; then
    ``local_device`` is the GPU this process uses), recording its per-micro-batch times."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    first, last = Partitioning(balance).bounds()[rank]
    is_first, is_last = rank == 0, rank == setup.stages - 1
    device = stage_device(setup, rank, local_device)
    window = Window([device], setup.capacity_bytes)  # from a clean slate (train.clean_slate)
    objects: list = []  # everything the run allocates, dropped in `finally`
    links = None  # MPress d2d: this stage's server and channels (mcap.runner.press.d2d)
    # Stages run together on the CPU time themselves too (the clocks cost nothing there):
    # the same per-micro-batch figures under the contention of a real run, what the
    # estimate from stages alone is checked against (bench/bench_stage_times.py); on CUDA
    # the timer's synchronisations would change a concurrent run, so only stages alone.
    timer = alone_mod.StageTimer(device, setup.threads) \
        if alone or device.type == "cpu" else None
    try:
        if alone:
            alone_mod.join(rank, setup.stages)
        how = None if alone else exchange.mode(shares_gpu(setup) and local_device is None)
        comm_device = torch.device("cpu") if how is not None else device
        window.limit()
        layers = copy.deepcopy(res.module[first:last + 1]).to(device)
        if device.type == "cpu":
            tag_weights_and_gradients(layers)
        if press is None:
            stage_mod: nn.Module = Recomputed(layers, setup.checkpoint, setup.chunks)
        else:
            from mcap.runner.press.apply import press_stage
            stage_mod, links = press_stage(layers, press, setup, rank, device)
        in_meta = res.shapes[first - 1] if first > 0 else res.shapes[-1]
        out_meta = res.shapes[last]
        if how == "host":
            stage_mod = HostStaged(stage_mod, device, is_last)
        elif how is not None:  # tokens through the group, tensors through the link
            link = exchange.Link(how, device, chunks=setup.chunks)
            stage_mod = exchange.Exchanged(stage_mod, link, rank, is_first, is_last)
            if not is_first:
                in_meta = exchange.token_meta(_requires_grad(in_meta))
            if not is_last:
                out_meta = exchange.token_meta(_requires_grad(out_meta))
        stage = PipelineStage(stage_mod, rank, setup.stages, comm_device,
                              input_args=in_meta, output_args=out_meta)
        schedule_cls = Schedule1F1B if setup.schedule == "1f1b" else ScheduleGPipe
        # Every rank gets the loss: a schedule without one runs forward only, so the earlier
        # stages would never run backward (only the last stage calls it).
        schedule = schedule_cls(stage, setup.chunks, loss_fn=_loss_on_output_device(res.loss))
        if alone:
            alone_mod.set_vote(schedule, stage)
        if timer is not None:
            timer.wrap(stage)
        if isinstance(stage_mod, exchange.Exchanged):
            stage_mod.hold_through_backward(stage)
        optimizer = make_optimizer(setup, layers.parameters())
        objects += [layers, stage_mod, stage, schedule, optimizer]
        gc.collect()
        if not alone and torch.distributed.is_initialized():
            # Stages run together start their window together: one built sooner would
            # otherwise count its wait for the others in the run's time.
            torch.distributed.barrier()
        window.start()
        if timer is not None:
            timer.begin(window)
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(ITERATIONS):
            if timer is not None:
                timer.new_iteration()
            if optimizer is not None:
                optimizer.zero_grad(set_to_none=True)
            _recomputed(stage_mod).new_step()
            # The batch lands on the first stage's device and the labels on the last's, each
            # iteration, as a training loop would place them.
            args = (res.inputs.to(comm_device, copy=True),) if is_first else ()
            kwargs = {"target": res.targets.to(comm_device, copy=True)} if is_last else {}
            if timer is not None:
                timer.timed_schedule(lambda: schedule.step(*args, return_outputs=False,
                                                           **kwargs))
            else:
                schedule.step(*args, return_outputs=False, **kwargs)
            del args, kwargs
            if how == "ipc":  # the step's sends are let go of: free what peers released
                exchange.collect()
            if optimizer is not None:
                with memtrack.tagged(memtrack.OPTIMIZER) if device.type == "cpu" \
                        else contextlib.nullcontext():
                    if timer is not None:
                        timer.timed_step(optimizer.step)
                    else:
                        optimizer.step()
            elif timer is not None:
                timer.step.append(0.0)
            window.mark_iteration()
        if timer is not None:
            timer.close()
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        if isinstance(stage_mod, exchange.Exchanged):  # the neighbours' copies are made
            stage_mod.finish()
        window.stop()
        if links is not None:  # peers may still fetch what this stage holds for them
            links.finish()
        return StageResult(rank, "ok", window.peaks()[0], window.breakdowns()[0], seconds,
                           iteration_peaks=tuple(p[0] for p in window.iteration_peaks),
                           held_before=window.held_before, cpu_seconds=cpu,
                           times=timer.record() if timer is not None else None,
                           recv_bytes=0 if is_first else _nbytes(res.shapes[first - 1]),
                           send_bytes=0 if is_last else _nbytes(res.shapes[last]))
    except Exception as exc:  # a run's failure is data (ARCHITECTURE.md, Records)
        window.stop()
        status, message = classify(exc)
        where = f"stage {rank} (layers {first}..{last})"
        return StageResult(rank, status, error=f"{where}: {message}")
    finally:
        if links is not None:
            links.close()
        objects.clear()
        gc.collect()


def _loss_on_output_device(loss: Callable) -> Callable:
    """Labels arrive where the schedule receives (the host, for GPU stages sharing a GPU);
    the loss runs where the last stage's output is."""
    def loss_fn(output, targets):
        return loss(output, targets.to(output.device))
    return loss_fn


def _recomputed(mod: nn.Module) -> Recomputed:
    return mod.inner if isinstance(mod, (HostStaged, exchange.Exchanged)) else mod


def _nbytes(meta) -> int:
    """Bytes of one micro-batch's activation (a meta tensor or a tuple of them)."""
    metas = meta if isinstance(meta, (tuple, list)) else (meta,)
    return sum(m.numel() * m.element_size() for m in metas)


def _requires_grad(meta) -> bool:
    metas = meta if isinstance(meta, (tuple, list)) else (meta,)
    return any(m.requires_grad for m in metas)


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
    return spec, setup.batch_size, setup.chunks


def build_resident(spec: str, setup: Setup) -> tuple[Resident, "object"]:
    """Build the model once per process, uncounted; returns it and its ModelInfo."""
    from mcap.models import build_model

    if _prebuilt is not None and _prebuilt[0] == _resident_key(spec, setup):
        if isinstance(_prebuilt[1], Exception):
            raise _prebuilt[1]
        return _prebuilt[1]

    with memtrack.suspended() if memtrack.installed() else contextlib.nullcontext():
        built = build_model(spec)
        inputs, targets = built.example_batch(setup.batch_size)
        micro = inputs[: max(1, setup.batch_size // setup.chunks)]
        shapes = tensor_shapes(built.module, micro)
    return Resident(built.module, built.loss, inputs, targets, shapes), built.info
