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
    first, last = Partitioning(balance).bounds()[rank]
    device = stage_device(setup, rank, local_device)
    window = Window([device], setup.capacity_bytes)  # from a clean slate (train.clean_slate)
    # Stages run together on the CPU time themselves too (the clocks cost nothing there):
    # the same per-micro-batch figures under the contention of a real run, what the
    # estimate from stages alone is checked against (bench/bench_stage_times.py); on CUDA
    # the timer's synchronisations would change a concurrent run, so only stages alone.
    timer = alone_mod.StageTimer(device, setup.threads) \
        if alone or device.type == "cpu" else None
    stage = None
    try:
        if alone:
            alone_mod.join(rank, setup.stages)
        how = None if alone else exchange.mode(shares_gpu(setup) and local_device is None)
        window.limit()
        stage = _Stage(res, setup, rank, device, how, timer)
        stage.build(first, last, press, alone)
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
            stage.iteration()
            window.mark_iteration()
        if timer is not None:
            timer.close()
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        if isinstance(stage.module, exchange.Exchanged):  # the neighbours' copies are made
            stage.module.finish()
        window.stop()
        if stage.links is not None:  # peers may still fetch what this stage holds for them
            stage.links.finish()
        return StageResult(rank, "ok", window.peaks()[0], window.breakdowns()[0], seconds,
                           iteration_peaks=tuple(p[0] for p in window.iteration_peaks),
                           held_before=window.held_before, cpu_seconds=cpu,
                           times=timer.record() if timer is not None else None,
                           recv_bytes=0 if rank == 0 else _nbytes(res.shapes[first - 1]),
                           send_bytes=0 if rank == setup.stages - 1
                           else _nbytes(res.shapes[last]))
    except Exception as exc:  # a run's failure is data (ARCHITECTURE.md, Records)
        window.stop()
        status, message = classify(exc)
        where = f"stage {rank} (layers {first}..{last})"
        return StageResult(rank, status, error=f"{where}: {message}")
    finally:
        if stage is not None and stage.links is not None:
            stage.links.close()
        gc.collect()


class _Stage:
    """One stage's run: its layers (cloned from the resident model; checkpointed, or pressed
    by an MPress plan; exchanged as the setup's devices need), its ``PipelineStage`` and
    schedule, and one training iteration over them."""

    def __init__(self, res: Resident, setup: Setup, rank: int, device: torch.device,
                 how: Optional[str], timer):
        self.res, self.setup, self.rank, self.device, self.how, self.timer = \
            res, setup, rank, device, how, timer
        self.is_first, self.is_last = rank == 0, rank == setup.stages - 1
        self.comm_device = torch.device("cpu") if how is not None else device
        self.links = None  # MPress d2d: this stage's server and channels (mcap.runner.press.d2d)

    def build(self, first: int, last: int, press, alone: bool) -> None:
        """Layers ``first..last``, their module, stage, schedule and optimizer."""
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
        setup, device = self.setup, self.device
        self.layers = copy.deepcopy(self.res.module[first:last + 1]).to(device)
        if device.type == "cpu":
            tag_weights_and_gradients(self.layers)
        if press is None:
            module: nn.Module = Recomputed(self.layers, setup.checkpoint, setup.chunks)
        else:
            from mcap.runner.press.apply import press_stage
            module, self.links = press_stage(self.layers, press, setup, self.rank, device)
        self.module, in_meta, out_meta = self._exchanged(module, first, last)
        self.stage = PipelineStage(self.module, self.rank, setup.stages, self.comm_device,
                                   input_args=in_meta, output_args=out_meta)
        schedule_cls = Schedule1F1B if setup.schedule == "1f1b" else ScheduleGPipe
        # Every rank gets the loss: a schedule without one runs forward only, so the earlier
        # stages would never run backward (only the last stage calls it).
        self.schedule = schedule_cls(self.stage, setup.chunks,
                                     loss_fn=_loss_on_output_device(self.res.loss))
        if alone:
            alone_mod.set_vote(self.schedule, self.stage)
        if self.timer is not None:
            self.timer.wrap(self.stage)
        if isinstance(self.module, exchange.Exchanged):
            self.module.hold_through_backward(self.stage)
        self.optimizer = make_optimizer(setup, self.layers.parameters())

    def _exchanged(self, module: nn.Module, first: int, last: int):
        """``module`` as the exchange between the stages needs it (host-staged, or tokens
        through the group and tensors through the link), with the meta tensors the stage
        receives and sends."""
        shapes = self.res.shapes
        in_meta = shapes[first - 1] if first > 0 else shapes[-1]
        out_meta = shapes[last]
        if self.how == "host":
            module = HostStaged(module, self.device, self.is_last)
        elif self.how is not None:  # tokens through the group, tensors through the link
            link = exchange.Link(self.how, self.device, chunks=self.setup.chunks)
            module = exchange.Exchanged(module, link, self.rank, self.is_first, self.is_last)
            if not self.is_first:
                in_meta = exchange.token_meta(_requires_grad(in_meta))
            if not self.is_last:
                out_meta = exchange.token_meta(_requires_grad(out_meta))
        return module, in_meta, out_meta

    def iteration(self) -> None:
        """One training iteration: the schedule's step, then the optimizer's."""
        timer, optimizer, comm_device = self.timer, self.optimizer, self.comm_device
        if timer is not None:
            timer.new_iteration()
        if optimizer is not None:
            optimizer.zero_grad(set_to_none=True)
        _recomputed(self.module).new_step()
        # The batch lands on the first stage's device and the labels on the last's, each
        # iteration, as a training loop would place them.
        args = (self.res.inputs.to(comm_device, copy=True),) if self.is_first else ()
        kwargs = {"target": self.res.targets.to(comm_device, copy=True)} \
            if self.is_last else {}
        if timer is not None:
            timer.timed_schedule(lambda: self.schedule.step(*args, return_outputs=False,
                                                            **kwargs))
        else:
            self.schedule.step(*args, return_outputs=False, **kwargs)
        del args, kwargs
        if self.how == "ipc":  # the step's sends are let go of: free what peers released
            exchange.collect()
        if optimizer is not None:
            with memtrack.tagged(memtrack.OPTIMIZER) if self.device.type == "cpu" \
                    else contextlib.nullcontext():
                if timer is not None:
                    timer.timed_step(optimizer.step)
                else:
                    optimizer.step()
        elif timer is not None:
            timer.step.append(0.0)


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
