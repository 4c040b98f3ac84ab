"""Engine ``pipelining``: one rank of ``torch.distributed.pipelining`` in this process.

Every stage process holds an uncounted copy of the whole model (built once, under
``memtrack.suspended()``), clones its own layers for each run, and trains them for
``ITERATIONS`` iterations with the setup's schedule, torch's own class
(``mcap.core.schedules``: GPipe, 1F1B, and the multi-stage ones, where the rank holds
several chunks, each its own ``PipelineStage``, driven by one ``PipelineScheduleMulti``);
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
import gc
import time
from typing import Callable, Optional

import torch
from torch import nn

from mcap.core import schedules
from mcap.core.errors import McapError
from mcap.core.setup import checkpoint_modes
from mcap.runner import alone as alone_mod
from mcap.runner import exchange, memtrack, precision
from mcap.runner.protocol import StageResult
from mcap.runner.resident import (  # noqa: F401  (re-exported: the engines build it here)
    Resident, build_resident, nbytes, prebuild, tensor_shapes,
)
from mcap.runner.train import (
    ITERATIONS, Recomputed, Window, classify, make_optimizer, tag_weights_and_gradients,
)
from mcap.core.types import Partitioning, Setup


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


def rank_chunks(setup: Setup, balance: tuple[int, ...], rank: int
                ) -> tuple[tuple[int, int, int], ...]:
    """The chunks rank ``rank`` holds under the setup's schedule: (torch's stage index,
    first layer, last layer) each, in stage order. One chunk, the rank's own, for GPipe
    and 1F1B."""
    bounds = Partitioning(balance).bounds()
    placement = schedules.get(setup.schedule).placement(setup.stages, setup.virtual_stages)
    return tuple((c, *bounds[c]) for c in placement[rank])


def boundary_bytes(res: Resident, setup: Setup, chunks) -> tuple[int, int]:
    """Bytes of one micro-batch the rank receives from and sends to other ranks (a chunk
    whose neighbour is on the same rank passes its tensor without a copy)."""
    n = setup.num_chunks
    mine = {c for c, _, _ in chunks}
    recv = sum(_nbytes(res.shapes[first - 1]) for c, first, _ in chunks
               if c > 0 and c - 1 not in mine)
    send = sum(_nbytes(res.shapes[last]) for c, _, last in chunks
               if c < n - 1 and c + 1 not in mine)
    return recv, send


def run_stage(res: Resident, setup: Setup, balance: tuple[int, ...], rank: int,
              local_device: Optional[int] = None, press=None, alone: bool = False
              ) -> StageResult:
    """Train rank ``rank`` of ``balance`` (its chunks, :func:`rank_chunks`) for 2
    iterations; its peak over that window. ``press``: an MPress plan to apply
    (``mcap.runner.press.apply.PressJob``), or None. ``alone``: run it alone over the fake
    process group (:mod:`mcap.runner.alone`; then ``local_device`` is the GPU this process
    uses), recording its per-micro-batch times."""
    chunks = rank_chunks(setup, balance, rank)
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
        stage.build(chunks, press, alone)
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
        recv, send = boundary_bytes(res, setup, chunks)
        return StageResult(rank, "ok", window.peaks()[0], window.breakdowns()[0], seconds,
                           iteration_peaks=tuple(p[0] for p in window.iteration_peaks),
                           held_before=window.held_before, cpu_seconds=cpu,
                           times=timer.record() if timer is not None else None,
                           recv_bytes=recv, send_bytes=send)
    except Exception as exc:  # a run's failure is data (ARCHITECTURE.md, Records)
        window.stop()
        status, message = classify(exc)
        where = _where(rank, chunks)
        return StageResult(rank, status, error=f"{where}: {message}")
    finally:
        if stage is not None and stage.links is not None:
            stage.links.close()
        gc.collect()


def _where(rank: int, chunks) -> str:
    """The rank's layers, as its messages name them."""
    if len(chunks) == 1:
        return f"stage {rank} (layers {chunks[0][1]}..{chunks[0][2]})"
    return f"rank {rank} (chunks " + ", ".join(f"{c}: layers {a}..{z}"
                                               for c, a, z in chunks) + ")"


class _Stage:
    """One rank's run: its chunks' layers (cloned from the resident model; checkpointed per
    chunk, or pressed by an MPress plan; exchanged as the setup's devices need), a
    ``PipelineStage`` per chunk, the schedule (torch's class for ``Setup.schedule``), and one
    training iteration over them."""

    def __init__(self, res: Resident, setup: Setup, rank: int, device: torch.device,
                 how: Optional[str], timer):
        self.res, self.setup, self.rank, self.device, self.how, self.timer = \
            res, setup, rank, device, how, timer
        self.comm_device = torch.device("cpu") if how is not None else device
        self.links = None  # MPress d2d: this stage's server and channels (mcap.runner.press.d2d)
        self.track = device.type == "cpu"

    def build(self, chunks, press, alone: bool) -> None:
        """The chunks' layers, modules, stages, the schedule and the optimizer."""
        from torch.distributed.pipelining import PipelineStage

        from mcap.runner.orders import torch_class
        setup, device = self.setup, self.device
        spec = schedules.get(setup.schedule)
        n = setup.num_chunks
        ids = [c for c, _, _ in chunks]
        self.is_first, self.is_last = 0 in ids, n - 1 in ids
        if len(chunks) > 1 and (press is not None or self.how is not None):
            raise McapError(f"schedule {setup.schedule} holds {len(chunks)} stages per rank: "
                            "measure it with stages alone (isolation stage), without an "
                            "MPress plan")
        modes = checkpoint_modes(setup.checkpoint, n)
        self.layers, self.modules, self.stages = [], [], []
        for c, first, last in chunks:
            layers = self.res.stage_layers(first, last, device)
            if self.track:
                tag_weights_and_gradients(layers)
            if press is None:
                module: nn.Module = Recomputed(layers, modes[c], setup.chunks,
                                               precision.autocast(setup, device))
            else:
                from mcap.runner.press.apply import press_stage
                module, self.links = press_stage(layers, press, setup, self.rank, device)
            module, in_meta, out_meta = self._exchanged(module, c, first, last)
            self.layers.append(layers)
            self.modules.append(module)
            self.stages.append(PipelineStage(module, c, n, self.comm_device,
                                             input_args=in_meta, output_args=out_meta))
        self.module = self.modules[0]  # one chunk: the module (exchange.finish, press)
        self.stage = self.stages[0]
        cls = torch_class(setup.schedule)
        # Every rank gets the loss: a schedule without one runs forward only, so the earlier
        # stages would never run backward (only the last stage calls it).
        loss_fn = _loss_on_output_device(self.res.loss, precision.autocast(setup, device))
        self.schedule = cls(self.stages if spec.multi else self.stages[0], setup.chunks,
                            loss_fn=loss_fn)
        if alone:
            alone_mod.set_vote(self.schedule, self.stage)
        if self.timer is not None:
            for st in self.stages:
                self.timer.wrap(st, chunk=st.stage_index if spec.multi else None)
        if isinstance(self.module, exchange.Exchanged):
            self.module.hold_through_backward(self.stage)
        params = [p for layers in self.layers for p in layers.parameters()]
        self.master = precision.Master(setup, params, self.track)
        self.optimizer = make_optimizer(setup, self.master.optimizer_params())

    def _exchanged(self, module: nn.Module, chunk: int, first: int, last: int):
        """``module`` as the exchange between the stages needs it (host-staged, or tokens
        through the group and tensors through the link), with the meta tensors the stage
        receives and sends."""
        shapes = self.res.shapes
        in_meta = shapes[first - 1] if first > 0 else shapes[-1]
        out_meta = shapes[last]
        is_last = chunk == self.setup.num_chunks - 1
        if self.how == "host":
            module = HostStaged(module, self.device, is_last)
        elif self.how is not None:  # tokens through the group, tensors through the link
            link = exchange.Link(self.how, self.device, chunks=self.setup.chunks)
            module = exchange.Exchanged(module, link, self.rank, chunk == 0, is_last)
            if chunk != 0:
                in_meta = exchange.token_meta(_requires_grad(in_meta))
            if not is_last:
                out_meta = exchange.token_meta(_requires_grad(out_meta))
        return module, in_meta, out_meta

    def iteration(self) -> None:
        """One training iteration: the schedule's step, then the optimizer's."""
        timer, optimizer, comm_device = self.timer, self.optimizer, self.comm_device
        if timer is not None:
            timer.new_iteration()
        if optimizer is not None:
            optimizer.zero_grad(set_to_none=True)
        for module in self.modules:
            _recomputed(module).new_step()
        # The batch lands on the first stage's device and the labels on the last's, each
        # iteration, as a training loop would place them.
        args = (precision.batch_on(self.res.inputs, self.setup, comm_device),) \
            if self.is_first else ()
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
            with memtrack.tagged(memtrack.OPTIMIZER) if self.track \
                    else contextlib.nullcontext():
                self.master.to_master(self.track)
                if timer is not None:
                    timer.timed_step(optimizer.step)
                else:
                    optimizer.step()
                self.master.from_master()
        elif timer is not None:
            timer.step.append(0.0)


def _loss_on_output_device(loss: Callable, autocast=None) -> Callable:
    """Labels arrive where the schedule receives (the host, for GPU stages sharing a GPU);
    the loss runs where the last stage's output is, under the forward's autocast."""
    def loss_fn(output, targets):
        with autocast if autocast is not None else contextlib.nullcontext():
            return loss(output, targets.to(output.device))
    return loss_fn


def _recomputed(mod: nn.Module) -> Recomputed:
    return mod.inner if isinstance(mod, (HostStaged, exchange.Exchanged)) else mod


_nbytes = nbytes


def _requires_grad(meta) -> bool:
    metas = meta if isinstance(meta, (tuple, list)) else (meta,)
    return any(m.requires_grad for m in metas)
