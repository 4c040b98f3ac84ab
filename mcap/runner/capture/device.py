"""Engine ``hybrid``: one device of a hybrid plan (CAPTURE III) in this process.

A plan's stages each have a kind and a degree (``mcap.core.capture.plan``); device d runs stage
``plan.device_stage()[d]``. Every device process holds an uncounted copy of the whole model
(``mcap.runner.pipelining.build_resident``), clones its stage's layers for each run and
trains them for ``ITERATIONS`` iterations with its own GPipe schedule (all forwards, then all
backwards in reverse; mCAP 3.5's fill-drain) over point-to-point sends between the stages:

- a **pipeline** stage (degree 1) is one process, as in engine ``pipelining``;
- a **data-parallel** stage of degree k is k processes wrapping the layers in
  ``DistributedDataParallel`` over the stage's sub-group; device j computes rows
  [j*m/k, (j+1)*m/k) of every micro-batch of m rows. Gradients accumulate locally over the
  micro-batches (``no_sync``) and DDP all-reduces them once, in the last backward, as
  ``torch.distributed.pipelining`` drives a DDP stage (a stage without parameters has
  nothing to reduce and runs without DDP). The loss gradient reaching a stage
  is already that of the whole batch's mean, so DDP sums (a comm hook) instead of averaging.
  DDP starts without broadcasting the weights (every device clones the same layers), and
  on the CPU each forward and gradient sum goes on only once gloo has freed DDP's
  collective buffers (:func:`ddp_settles`, :func:`_sum_hook`), so the peak repeats;
- a **tensor-parallel** stage of degree k is k processes sharding the stage's
  ``nn.Linear`` layers with ``torch.distributed.tensor.parallel`` over the sub-group's
  ``DeviceMesh``: a Linear followed (through parameter-free element-wise activations only)
  by another Linear in the same ``nn.Sequential`` is a Megatron pair, ``ColwiseParallel``
  then ``RowwiseParallel`` (no communication between them, one all-reduce after); every other
  Linear is ``ColwiseParallel`` with its output all-gathered (replicated). Convolutions,
  normalisations, embeddings and Linears whose sharded dimension the degree does not divide
  stay replicated (:func:`tensor_parallel` lists them). Every device of the stage computes
  on the whole micro-batch.

Activations between stages of different kinds and degrees (:func:`mcap.core.capture.plan.holder_rows`):
a data-parallel device sends its rows, a pipeline or tensor stage sends all rows from its
device 0; each receiving device gets the rows it computes (its share for dp, all rows for
pp/tp). Gradients go back the same way: the holder of each row sends its gradient to the
device that sent the row; a tensor stage's device 0 then broadcasts the whole gradient to
its stage's other devices. Each device's peak is measured with ``mcap.runner.train.Window``
(the same history-free rules as every engine). Runs seed the RNG the same way every time,
so dropout masks, and the loss, repeat.

Devices together or alone (issue 25): with the devices together (isolation ``pipeline``)
every device is its own process in one gloo (CPU) or NCCL (CUDA) group, and the data flows.
Alone (isolation ``stage``, the default) a process runs one device at a time over torch's
``fake`` backend as that rank (:func:`run_device`'s ``alone``; :mod:`mcap.runner.alone`):
the same code, the same tensors allocated and held, nothing moved. On the CPU both read
the same bytes on every device (tests/runner/capture/test_alone.py;
bench/log/2026-11-26-hybrid-ranks-alone.md). The gloo settling
(:mod:`mcap.runner.capture.settling`) exists for the devices
together only: gloo finishes a collective on a worker thread.

The parts: where a device sits and its groups (:mod:`~mcap.runner.capture.groups`), how its
layers become dp or tp (:mod:`~mcap.runner.capture.sharding`), its traffic with the
neighbour stages (:mod:`~mcap.runner.capture.links`), the gloo settling; this module trains
them (:func:`run_device`, :class:`_Stage`).
"""
from __future__ import annotations

import contextlib
import gc
import time
from typing import Optional

import torch
import torch.distributed as dist
from torch import nn

from mcap.core.capture.plan import as_plan, check_micro_batches
from mcap.core.types import Setup
from mcap.runner import memtrack
from mcap.runner.capture.groups import Place, device_mesh, join_world, places, stage_group
from mcap.runner.capture.links import Links
from mcap.runner.capture.settling import references, released, synchronous_collectives
from mcap.runner.capture.sharding import data_parallel, tensor_parallel
from mcap.runner.pipelining import Resident, stage_device
from mcap.runner.protocol import StageResult
from mcap.runner.train import ITERATIONS, Recomputed, Window, classify, make_optimizer

SEED = 0


def run_device(res: Resident, setup: Setup, plan, rank: int, groups: dict,
               local_device: Optional[int] = None, alone: bool = False) -> StageResult:
    """Train device ``rank``'s part of ``plan`` for 2 iterations; its peak over that window
    (``losses``: the whole batch's loss per iteration, on the last stage's device 0).

    ``alone``: this process runs device ``rank`` alone (:mod:`mcap.runner.alone`, issue 25):
    it joins a fake default group of the plan's devices as that rank and builds the same
    sub-groups and DeviceMesh over it, so DDP's buckets, the TP shards and every
    collective's output are allocated and held as in a real run while nothing moves;
    receives (activations, gradients, a tp stage's broadcast gradients) are filled as the
    arriving data would fill them. ``local_device`` is then the GPU of this process's slot.
    Such a device computes on data no other device produced, so its loss means nothing:
    ``losses`` is empty on every device of an alone run (check training with the devices
    together, isolation ``pipeline``)."""
    plan = as_plan(plan)
    if alone:
        join_world(groups, plan, rank)
    place = places(plan)[rank]
    device = stage_device(setup, rank, local_device)
    group = stage_group(groups, plan, place.stage, None)  # None: the world's backend
    micro = check_micro_batches(plan, setup.batch_size, setup.chunks)
    links = Links(plan, rank, micro, device, res, alone=alone)
    mesh = None
    if place.config.parallel == "tp":
        synchronous_collectives()
        mesh = device_mesh(groups, group, device.type)
    window = Window([device], setup.capacity_bytes)  # from a clean slate (train.clean_slate)
    try:
        window.limit()
        stage = _Stage(res, setup, place, links, device, group, mesh)
        losses: list[float] = []
        gc.collect()
        window.start()
        start = time.perf_counter()
        for _ in range(ITERATIONS):
            losses.append(stage.iteration())
            window.mark_iteration()
        seconds = time.perf_counter() - start
        window.stop()
        if stage.is_last and place.config.parallel == "dp" and not alone:
            losses = _summed(losses, group)
        keep = stage.is_last and place.local == 0 and not alone
        note = f"tp replicated {', '.join(stage.replicated)}" if stage.replicated else None
        return StageResult(rank, "ok", window.peaks()[0], window.breakdowns()[0], seconds,
                           iteration_peaks=tuple(p[0] for p in window.iteration_peaks),
                           held_before=window.held_before,
                           losses=tuple(losses) if keep else (), note=note)
    except Exception as exc:  # a run's failure is data (ARCHITECTURE.md, Records)
        window.stop()
        status, message = classify(exc)
        where = (f"device {rank} (stage {place.stage}, {place.config.text}, layers "
                 f"{links.first_layer}..{links.last_layer})")
        return StageResult(rank, status, error=f"{where}: {message}")
    finally:
        gc.collect()


class _Stage:
    """One device's layers as they train in one run (cloned from the resident model, made
    tensor- or data-parallel, checkpointed as the setup says) and the GPipe iteration over
    them: every micro-batch's forward, then every backward in reverse, then the step."""

    def __init__(self, res: Resident, setup: Setup, place: Place, links: Links,
                 device: torch.device, group, mesh):
        self.res, self.setup, self.links, self.device, self.group = \
            res, setup, links, device, group
        self.is_first = place.stage == 0
        self.is_last = place.stage == len(links.plan.stages) - 1
        torch.manual_seed(SEED)
        layers = res.stage_layers(links.first_layer, links.last_layer, device)
        self.replicated: tuple = ()
        if place.config.parallel == "tp":
            self.replicated = tensor_parallel(layers, mesh)
        if device.type == "cpu":
            _tag(layers)
        self.recomputed = Recomputed(layers, setup.checkpoint, setup.chunks)
        self.ddp = data_parallel(self.recomputed, layers, group, device) \
            if place.config.parallel == "dp" else None
        self.module: nn.Module = self.ddp if self.ddp is not None else self.recomputed
        self.optimizer = make_optimizer(setup, layers.parameters())
        self.layers = layers

    def _no_sync(self):
        """DDP's ``no_sync`` (gradients accumulate locally); nothing for other stages."""
        return self.ddp.no_sync() if self.ddp is not None else contextlib.nullcontext()

    def iteration(self) -> float:
        """One iteration; returns this device's share of the batch's loss (0 off the last
        stage)."""
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)
        self.recomputed.new_step()
        saved, loss_sum = self.forwards()
        self.backwards(saved)
        if self.optimizer is not None:
            with memtrack.tagged(memtrack.OPTIMIZER) if self.device.type == "cpu" \
                    else contextlib.nullcontext():
                self.optimizer.step()
        return loss_sum

    def forwards(self) -> tuple[list, float]:
        """Every micro-batch's forward on this device's rows: (what each backward needs,
        in micro-batch order; the loss summed on the last stage)."""
        links, setup, micro = self.links, self.setup, self.links.micro
        a, b = links.need
        saved, loss_sum = [], 0.0
        for mb in range(setup.chunks):
            rows = slice(mb * micro + a, mb * micro + b)
            if self.is_first:
                x, parts = self.res.inputs[rows].to(self.device, copy=True), []
            else:
                x, parts = links.forward_recv(mb)
            with self._no_sync():
                out = self.module(x)
            if self.is_last:
                target = self.res.targets[rows].to(self.device, copy=True)
                # The gradient of the whole batch's mean loss: this device's rows are
                # (b - a) of the m rows of one of C micro-batches.
                loss = self.res.loss(out, target) * ((b - a) / micro / setup.chunks)
                loss_sum += float(loss.detach())
                saved.append((x, parts, loss, None))
                del target, out
            else:
                links.forward_send(out, mb)
                saved.append((x, parts, None, out))
            del x, parts
        return saved, loss_sum

    def backwards(self, saved: list) -> None:
        """Every micro-batch's backward, last first, emptying ``saved``; DDP all-reduces
        the accumulated gradients in the last one."""
        ddp = self.ddp
        for mb in reversed(range(self.setup.chunks)):
            x, parts, loss, out = saved.pop()
            last_backward = mb == 0
            if ddp is not None and last_backward:
                # As torch.distributed.pipelining does for a DDP stage: forwards ran
                # under no_sync, so the reducer is armed by hand for the last backward.
                ddp.reducer.prepare_for_backward([])
            ctx = self._no_sync() if ddp is not None and not last_backward \
                else contextlib.nullcontext()
            with ctx:
                if self.is_last:
                    loss.backward()
                else:
                    outs, grads = self.links.backward_recv(out, mb, self.group)
                    pairs = [(o, g) for o, g in zip(outs, grads) if g is not None]
                    torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
                    del outs, grads, pairs
            if not self.is_first:
                self.links.backward_send(x, parts, mb)
            del x, parts, loss, out


def _summed(losses: list[float], group) -> list[float]:
    """A dp last stage's loss per iteration summed over its devices (each holds its rows'
    share): the whole batch's loss."""
    total = torch.tensor(losses, dtype=torch.float64)
    before = references(total)
    dist.all_reduce(total, group=group)
    released(total, before)  # freed here, not in the next run's window
    losses = total.tolist()
    del total
    return losses


def _tag(module: nn.Module) -> None:
    """Weights/gradients categories of the CPU breakdown; DTensor parameters are tagged by
    their local shard."""
    def local(t):
        return t.to_local() if hasattr(t, "to_local") else t

    for t in list(module.parameters()) + list(module.buffers()):
        memtrack.retag(local(t), memtrack.WEIGHTS)

    def hook(param):
        memtrack.retag(local(param.grad), memtrack.GRADIENTS)

    for p in module.parameters():
        if p.requires_grad:
            p.register_post_accumulate_grad_hook(hook)
