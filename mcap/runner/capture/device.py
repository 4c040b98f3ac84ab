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
the same bytes on every device (tests/runner/capture/test_alone.py; BENCHMARKS.md, "Hybrid ranks
alone"). The gloo settling below (:func:`released` and its callers) exists for the
devices together only: gloo finishes a collective on a worker thread.
"""
from __future__ import annotations

import contextlib
import copy
import gc
import itertools
import os
import sys
import time
from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist
from torch import nn

from mcap.core.capture.plan import (
    HybridPlan, StageConfig, as_plan, check_micro_batches, holder_rows, need_rows,
)
from mcap.core.types import Setup
from mcap.runner import alone as alone_mod
from mcap.runner import memtrack
from mcap.runner.pipelining import Resident, stage_device
from mcap.runner.protocol import StageResult
from mcap.runner.train import ITERATIONS, Recomputed, Window, classify, make_optimizer

SEED = 0
# Parameter-free element-wise modules that may sit between the two Linears of a Megatron
# pair: they act on each column shard alone. Dropout is not one of them: its mask on a
# shard would differ from the mask on the whole tensor.
ELEMENTWISE = (nn.ReLU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.Identity)


@dataclass(frozen=True)
class Place:
    """Where device ``rank`` sits in a plan."""
    stage: int
    local: int      # index of this device within its stage
    start: int      # global rank of the stage's device 0
    config: StageConfig


def places(plan: HybridPlan) -> list[Place]:
    out, start = [], 0
    for i, s in enumerate(plan.stages):
        out += [Place(i, j, start, s) for j in range(s.degree)]
        start += s.degree
    return out


def stage_group(groups: dict, plan: HybridPlan, stage: int, backend: Optional[str]):
    """The sub-group of a stage's devices (None for one device). ``new_group`` is
    collective over the whole world, so every rank creates every stage's group, in stage
    order; groups are kept for later runs (a group costs a rendezvous, no tensor memory)."""
    mine = None
    start = 0
    for i, s in enumerate(plan.stages):
        ranks = tuple(range(start, start + s.degree))
        start += s.degree
        if s.degree == 1:
            continue
        if ranks not in groups:
            groups[ranks] = dist.new_group(list(ranks), backend=backend)
        if i == stage:
            mine = groups[ranks]
    return mine


def join_groups(groups: dict, plan) -> None:
    """Create every stage sub-group of ``plan`` from a rank that runs none of its devices
    (under torchrun a plan may use fewer devices than there are ranks,
    ``mcap.runner.spmdrunner``): ``new_group`` is collective over the whole world."""
    stage_group(groups, as_plan(plan), -1, None)


def device_mesh(groups: dict, group, device_type: str):
    """The stage's DeviceMesh, made once per sub-group, kept and uncounted (as the process
    group is): it holds a small tensor (8 bytes seen) that would otherwise count in every
    later run of this process, whatever stage it runs.

    A process that runs devices alone joins a new fake world for each rank it runs
    (:func:`run_device`), and its sub-groups are made again with new names. DTensor caches
    sharding decisions per mesh for the process's life (sharding propagation,
    redistribution plans), and meshes compare equal by their ranks, layout, device type,
    dimension names and thread, not by their groups: a mesh of the same ranks in the next
    world was served the cached mesh of the last, whose group name no longer existed
    ("Could not resolve the process group registered under the name 2", on one slot
    running ``2:tp2,2:tp2`` then ``1,1,2:tp2``), or could have named another group of
    another size. So each world's meshes get a dimension name of their own
    (``groups["world_id"]``, set where a world is joined); a name changes no tensor."""
    from torch.distributed.device_mesh import DeviceMesh
    key = ("mesh", id(group), device_type)
    if key not in groups:
        world = groups.get("world_id")
        names = None if world is None else (f"world{world}",)
        with memtrack.suspended() if memtrack.installed() else contextlib.nullcontext():
            groups[key] = DeviceMesh.from_group(group, device_type, mesh_dim_names=names)
    return groups[key]


_WORLDS = itertools.count()  # fake worlds this process joined (device_mesh)

RELEASE_TIMEOUT_S = 10.0  # a finished collective's worker lets go within microseconds of CPU
AMBIGUOUS_WAIT_S = 0.05   # see _wait_released


def references(tensor: torch.Tensor) -> tuple[int, int, int]:
    """Who holds ``tensor``: (C++ references to the tensor, tensors and views holding its
    storage, Python references to it). The last one counts the caller's own references and
    this call's, so compare only readings taken at the same place."""
    return (tensor._use_count(), memtrack.storage_use_count(tensor),
            sys.getrefcount(tensor) - 2)  # -2: this call's argument and getrefcount's


def no_worker() -> bool:
    """Whether this process runs a device alone (:mod:`mcap.runner.alone`): its default
    group is torch's ``fake`` backend, whose collectives and point-to-point ops complete in
    the calling thread before they return and keep no tensor. There is no worker thread to
    wait for, so the gloo settling below (:func:`released`, :func:`_wait_released`,
    :func:`settled`, :func:`ddp_settles`) returns at once: every buffer is freed where the
    program drops it already."""
    return dist.is_initialized() and dist.get_backend() == alone_mod.BACKEND


def released(tensor: torch.Tensor, want: tuple[int, int, int],
             patience: Optional[float] = None) -> bool:
    """Wait until ``tensor``'s :func:`references`, as the caller reads them, are down to
    ``want``, i.e. until gloo's worker thread has let go of the finished collective that
    used it; True when they are (False only when ``patience`` seconds ran out first).

    A gloo collective runs on one of the process group's worker threads, and its Work keeps
    the collective's tensors (and views of them). ``wait()`` returns when the Work is
    marked complete; the worker thread drops its references only after that, when the OS
    schedules it again, and the last C++ reference to a tensor that has a Python object
    also gives back the reference the C++ side holds on that object (torch's "PyObject
    preservation"), which needs the GIL. Either way, a buffer the main thread had already
    let go of was freed on the worker thread whenever it got there: in about one tp run in
    seven on the 2-core VM after the main thread had allocated the next tensors, so the
    same run's peak held a gathered-logits buffer and its input shard more (+0.5 to +1.5
    MiB on an 8-layer GPT head; found with a per-thread log of the CPU tracker's
    allocations and frees, BENCHMARKS.md, "Repeatability"). Waiting here until all three
    counts are back makes each buffer free where the program drops it, at the same point in
    every run. Nothing is hidden: the bytes count for exactly as long as the program holds
    them, as for every other tensor. The wait yields the CPU and the GIL, which the worker
    may need.

    Only the Work's references go away by themselves; if they are not gone within
    :data:`RELEASE_TIMEOUT_S`, something else keeps the tensor and the run fails rather than
    measure a timing-dependent peak. Only CPU tensors are waited for: on CUDA, NCCL's
    watchdog releases finished Works on its own period and the peak is
    ``max_memory_allocated``."""
    if tensor.device.type != "cpu" or no_worker():
        return True
    start = time.monotonic()
    while True:
        cxx, storage, python = references(tensor)
        got = (cxx, storage, python - 1)  # -1: this call's own argument, as the caller reads it
        if all(g <= w for g, w in zip(got, want)):
            return True
        waited = time.monotonic() - start
        if patience is not None and waited > patience:
            return False
        if waited > RELEASE_TIMEOUT_S:
            raise RuntimeError(f"a collective's tensor is still held {got} (tensor, storage, "
                               f"Python) times, expected {want}, {RELEASE_TIMEOUT_S:.0f} s "
                               f"after the collective finished")
        os.sched_yield()  # releases the GIL as well


def _wait_released(tensor: torch.Tensor) -> torch.Tensor:
    """``funcol._maybe_wrap_tensor`` for :func:`synchronous_collectives`: wait for the
    functional collective that produced ``tensor``, a fresh output only the caller holds,
    then for gloo's worker thread to let go of it (:func:`released`).

    Whether the C++ side holds one reference on the output's Python object is known only
    while the Work still holds the tensor (in every one of several thousand collectives
    traced, since the other devices take part): then it does, and Python alone holds one
    less. When the Work had already let go before this call, the worker may or may not
    still owe that reference; it is given :data:`AMBIGUOUS_WAIT_S` to pay it."""
    from torch.distributed import _functional_collectives as funcol
    if tensor.device.type != "cpu" or no_worker():
        return funcol.wait_tensor(tensor)
    cxx, _, python = references(tensor)
    held = cxx > 1
    funcol.wait_tensor(tensor)
    if not released(tensor, (1, 1, python - 1), None if held else AMBIGUOUS_WAIT_S):
        released(tensor, (1, 1, python))
    return tensor


def _inputs_released(collective):
    """Wrap a functional collective so that it returns once gloo's worker thread has let go
    of its input as well (the Work keeps the input too, e.g. the shard an all-gather
    gathers): the input's :func:`references` are back to what they were before the call."""
    if getattr(collective, "_mcap_inputs_released", False):
        return collective

    def call(tensor, *args, **kwargs):
        if not isinstance(tensor, torch.Tensor) or tensor.device.type != "cpu" \
                or no_worker():
            return collective(tensor, *args, **kwargs)
        before = references(tensor)
        out = collective(tensor, *args, **kwargs)
        released(tensor, before)
        return out

    call._mcap_inputs_released = True
    call.__name__ = collective.__name__
    call.__doc__ = collective.__doc__
    return call


# The functional collectives DTensor's redistributions call (``funcol.<name>`` looked up
# at each call, so patching the module attribute reaches them).
COLLECTIVES = ("all_reduce", "all_gather_tensor", "all_gather_single", "reduce_scatter_tensor",
               "reduce_scatter_single", "all_to_all_single")


def synchronous_collectives() -> None:
    """DTensor's collectives return AsyncCollectiveTensors in eager mode: gloo completes
    them on its own thread and their buffers are freed whenever the consumer happens to
    wait, so the same run's peak varied by a few KiB from run to run. Waiting at once (what
    the functional collectives do under tracing), and until gloo's worker thread has let
    go of the collective's output and input (:func:`released`; +0.5 to +1.5 MiB in some
    runs otherwise), makes the peak repeat; the traffic and the buffers are the same."""
    from torch.distributed import _functional_collectives as funcol
    memtrack.load()  # references() reads storage counts through the extension
    funcol._maybe_wrap_tensor = _wait_released
    for name in COLLECTIVES:
        if hasattr(funcol, name):
            setattr(funcol, name, _inputs_released(getattr(funcol, name)))


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


def settled(held: int) -> None:
    """Wait until the CPU tracker's bytes are back to ``held`` (or below), i.e. until gloo's
    worker thread has freed the buffers of collectives the main thread has finished with
    but has no handle to (DDP's own, :func:`ddp_settles`); the same wait and limit as
    :func:`released`."""
    if no_worker():
        return
    start = time.monotonic()
    while memtrack.current() > held:
        if time.monotonic() - start > RELEASE_TIMEOUT_S:
            raise RuntimeError(f"{memtrack.current() - held} bytes a collective used are "
                               f"still held {RELEASE_TIMEOUT_S:.0f} s after it finished")
        os.sched_yield()  # releases the GIL as well


def ddp_settles(ddp: nn.Module, inner: nn.Module) -> None:
    """Make each of ``ddp``'s forwards start the computation once gloo has freed what DDP's
    own pre-forward collectives used (CPU stages; ``inner`` is the module DDP wraps).

    Before every forward, ``DistributedDataParallel`` may run collectives of its own, on
    tensors only its C++ side holds: once, at the first forward after the first gradient
    all-reduce, it rebuilds its buckets in gradient order and broadcasts the new bucket
    layout (``sync_bucket_indices``: a 4-byte bucket count and 4 bytes a parameter), and it
    broadcasts the module's buffers (BatchNorm's statistics) when it syncs them. As for
    tensor parallelism (:func:`released`), gloo's worker thread keeps a finished broadcast's
    tensors until the OS schedules it again, and the bucket rebuild drops the old buckets
    while the worker may still hold them from the previous iteration's all-reduce
    (:func:`_sum_hook` now waits for that one): a per-thread log of the tracker saw these
    freed on the worker during the next forward or backward, which moved the peak of a
    small GPT's dp stages in 14 of 240 runs under load (+4 to +216 bytes, or +76 to +170
    KB while an old bucket was still held; BENCHMARKS.md, "Repeatability").

    What DDP's pre-forward keeps is what it dropped: the rebuilt buckets are as big as the
    old ones, and buffers are synced in place. So the held bytes after it are those before
    it once the worker has let go, and the forward waits for that (:func:`settled`) between
    DDP's pre-forward and the module's own forward (a pre-hook on each). Nothing a real DDP
    process holds is hidden: the new buckets and the broadcasts' tensors are counted while
    DDP holds them (the rebuild allocates the new buckets before dropping the old ones, as a
    GPU's allocator would count it), and each is freed where DDP drops it, in every run."""
    if not memtrack.installed():
        return
    held: list[int] = []

    def before(module, args):
        held.append(memtrack.current())

    def after(module, args):
        if held:
            settled(held.pop())

    ddp.register_forward_pre_hook(before)
    inner.register_forward_pre_hook(after)


def _sum_hook(group, bucket):
    """DDP comm hook: sum the bucket over the stage's devices (module docstring).

    On the CPU the sum is done before the hook returns, and the hook returns only once
    gloo's worker thread has let go of the bucket (:func:`released`): otherwise the worker
    could still hold it when DDP rebuilds its buckets at the next forward
    (:func:`ddp_settles`) and drops the old ones, and the old bucket (as big as the stage's
    weights) was then freed whenever the worker got there (seen during the next backward).
    The bucket is summed in place either way, so no bytes change, only where the old
    bucket is freed; the reducer waits for every bucket's result at the end of the
    backward anyway."""
    buffer = bucket.buffer()
    if no_worker():
        # Alone: the sum moves nothing and completes here; the bucket, summed in place in
        # a real run, is the result either way (the fake work's future holds no value).
        dist.all_reduce(buffer, group=group)
        done = torch.futures.Future(
            devices=[buffer.device] if buffer.device.type == "cuda" else None)
        done.set_result(buffer)
        return done
    if buffer.device.type != "cpu":
        work = dist.all_reduce(buffer, group=group, async_op=True)
        return work.get_future().then(lambda fut: fut.value()[0])
    before = references(buffer)
    dist.all_reduce(buffer, group=group)
    released(buffer, before)
    done = torch.futures.Future()
    done.set_result(buffer)
    return done


def _tensors(x) -> list:
    return list(x) if isinstance(x, (tuple, list)) else [x]


def _plain(t: torch.Tensor) -> torch.Tensor:
    """A tensor-parallel output may be an AsyncCollectiveTensor; wait for it."""
    wait = getattr(t, "wait", None)
    return wait() if callable(wait) and not isinstance(t, nn.Parameter) else t


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


class _Links:
    """The point-to-point traffic of one device with its neighbour stages."""

    def __init__(self, plan: HybridPlan, rank: int, micro: int, device, res: Resident,
                 alone: bool = False):
        self.plan, self.rank, self.micro, self.device = plan, rank, micro, device
        self.alone = alone  # receives are filled by mcap.runner.alone; broadcasts here
        self.all = places(plan)
        self.me = self.all[rank]
        s = self.me.stage
        first, last = plan_bounds(plan)[s]
        self.first_layer, self.last_layer = first, last
        self.in_meta = _tensors(res.shapes[first - 1] if first > 0 else res.shapes[-1])
        self.out_meta = _tensors(res.shapes[last])
        self.need = need_rows(self.me.config, micro, self.me.local)

    def _devices(self, stage: int) -> list[Place]:
        return [p for p in self.all if p.stage == stage]

    def _holders(self, stage: int) -> list[tuple[int, tuple[int, int]]]:
        ps = self._devices(stage)
        rows = holder_rows(ps[0].config, self.micro)
        return [(p.start + p.local, r) for p, r in zip(ps, rows) if r[1] > r[0]]

    @staticmethod
    def _overlap(a, b):
        lo, hi = max(a[0], b[0]), min(a[1], b[1])
        return (lo, hi) if hi > lo else None

    def _exchange(self, sends, recvs):
        """sends: [(dst, tensor, tag)], recvs: [(src, buffer, tag)]; all complete on return."""
        ops = [dist.P2POp(dist.isend, t, dst, tag=tag) for dst, t, tag in sends]
        ops += [dist.P2POp(dist.irecv, b, src, tag=tag) for src, b, tag in recvs]
        if ops:
            for work in dist.batch_isend_irecv(ops):
                work.wait()

    def forward_send(self, out, mb: int) -> None:
        """Send the rows this device holds to every device of the next stage needing them."""
        s = self.me.stage
        mine = dict(self._holders(s)).get(self.rank)
        if mine is None:
            return
        my_need = self.need
        sends = []
        for p in self._devices(s + 1):
            want = need_rows(p.config, self.micro, p.local)
            part = self._overlap(mine, want)
            if part:
                a, b = part[0] - my_need[0], part[1] - my_need[0]
                for i, t in enumerate(_tensors(out)):
                    sends.append((p.start + p.local, _plain(t.detach())[a:b].contiguous(),
                                  _tag_of(mb, i, False)))
        self._exchange(sends, [])

    def forward_recv(self, mb: int):
        """This device's input rows from the previous stage, as a leaf that requires grad
        where the activation does; and the parts' (src, rows) for sending gradients back."""
        parts = []
        recvs = []
        for src, rows in self._holders(self.me.stage - 1):
            part = self._overlap(rows, self.need)
            if part:
                bufs = [torch.empty((part[1] - part[0],) + tuple(m.shape[1:]), dtype=m.dtype,
                                    device=self.device) for m in self.in_meta]
                parts.append((src, part, bufs))
                recvs += [(src, b, _tag_of(mb, i, False)) for i, b in enumerate(bufs)]
        self._exchange([], recvs)
        xs = []
        for i, m in enumerate(self.in_meta):
            t = torch.cat([p[2][i] for p in parts]) if len(parts) > 1 else parts[0][2][i]
            xs.append(t.requires_grad_(m.requires_grad and t.is_floating_point()))
        del recvs
        return (tuple(xs) if len(xs) > 1 else xs[0]), [(src, part) for src, part, _ in parts]

    def backward_send(self, x, parts, mb: int) -> None:
        """The gradients of this device's input rows, to the devices that sent them; only
        the holders of the rows send (device 0 of a pp/tp stage, every dp device)."""
        if self.rank not in dict(self._holders(self.me.stage)):
            return
        sends = []
        for src, part in parts:
            a, b = part[0] - self.need[0], part[1] - self.need[0]
            for i, t in enumerate(_tensors(x)):
                if t.grad is not None:
                    sends.append((src, t.grad[a:b].contiguous(), _tag_of(mb, i, True)))
        self._exchange(sends, [])

    def backward_recv(self, out, mb: int, group):
        """The gradients of this device's output rows (None for outputs without grad);
        on a pp/tp stage device 0 receives them all and broadcasts them in the stage."""
        outs = _tensors(out)
        grads = [torch.empty_like(_plain(t.detach())) if t.requires_grad else None
                 for t in outs]
        mine = dict(self._holders(self.me.stage)).get(self.rank)
        if mine is not None:
            recvs = []
            for holder, rows in self._holders(self.me.stage + 1):
                part = self._overlap(mine, rows)
                if part:
                    a, b = part[0] - self.need[0], part[1] - self.need[0]
                    recvs += [(holder, g[a:b], _tag_of(mb, i, True))
                              for i, g in enumerate(grads) if g is not None]
            # Slices of the gradient are views; gloo receives into contiguous buffers
            # only, so receive into fresh ones and copy.
            bufs = [(src, torch.empty_like(v), tag, v) for src, v, tag in recvs]
            self._exchange([], [(src, b, tag) for src, b, tag, _ in bufs])
            for _, b, _, v in bufs:
                v.copy_(b)
            del bufs
        if self.me.config.parallel != "dp" and self.me.config.degree > 1:
            for g in grads:
                if g is not None:
                    before = references(g)
                    dist.broadcast(g, src=self.me.start, group=group)
                    released(g, before)  # gloo's worker lets go of g here, not later
                    if self.alone and mine is None:  # what device 0 would have sent
                        alone_mod.arrive(g)
        return outs, grads


def _tag_of(mb: int, i: int, backward: bool) -> int:
    return (2 * mb + int(backward)) * 64 + i


def plan_bounds(plan: HybridPlan) -> list[tuple[int, int]]:
    out, first = [], 0
    for s in plan.stages:
        out.append((first, first + s.layers - 1))
        first += s.layers
    return out


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
        world = (rank, plan.devices)
        if groups.get("alone") != world:  # another fake world: its groups are gone with it
            groups.clear()
            groups["world_id"] = next(_WORLDS)  # its meshes' own name (device_mesh)
        alone_mod.join(rank, plan.devices)
        groups["alone"] = world
    pl = places(plan)[rank]
    s = pl.stage
    is_first, is_last = s == 0, s == len(plan.stages) - 1
    device = stage_device(setup, rank, local_device)
    group = stage_group(groups, plan, s, None)  # None: the world's backend
    micro = check_micro_batches(plan, setup.batch_size, setup.chunks)
    links = _Links(plan, rank, micro, device, res, alone=alone)
    mesh = None
    if pl.config.parallel == "tp":
        synchronous_collectives()
        mesh = device_mesh(groups, group, device.type)
    window = Window([device], setup.capacity_bytes)  # from a clean slate (train.clean_slate)
    objects: list = []
    first, last = links.first_layer, links.last_layer
    try:
        window.limit()
        torch.manual_seed(SEED)
        layers = copy.deepcopy(res.module[first:last + 1]).to(device)
        replicated: tuple = ()
        if pl.config.parallel == "tp":
            replicated = tensor_parallel(layers, mesh)
        if device.type == "cpu":
            _tag(layers)
        stage_mod: nn.Module = Recomputed(layers, setup.checkpoint, setup.chunks)
        recomputed = stage_mod
        ddp = None
        # A dp stage of parameter-free layers (VGG's ReLU or pooling alone) has no gradient
        # to all-reduce, and DDP refuses such a module: its devices just take their rows.
        if pl.config.parallel == "dp" and any(p.requires_grad for p in layers.parameters()):
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
            stage_mod = ddp
        optimizer = make_optimizer(setup, layers.parameters())
        objects += [layers, stage_mod, optimizer]
        a, b = links.need
        losses: list[float] = []
        gc.collect()
        window.start()
        start = time.perf_counter()
        for _ in range(ITERATIONS):
            if optimizer is not None:
                optimizer.zero_grad(set_to_none=True)
            recomputed.new_step()
            saved, loss_sum = [], 0.0
            no_sync = ddp.no_sync if ddp is not None else contextlib.nullcontext
            for mb in range(setup.chunks):
                rows = slice(mb * micro + a, mb * micro + b)
                if is_first:
                    x, parts = res.inputs[rows].to(device, copy=True), []
                else:
                    x, parts = links.forward_recv(mb)
                with no_sync():
                    out = stage_mod(x)
                if is_last:
                    target = res.targets[rows].to(device, copy=True)
                    # The gradient of the whole batch's mean loss: this device's rows are
                    # (b - a) of the m rows of one of C micro-batches.
                    loss = res.loss(out, target) * ((b - a) / micro / setup.chunks)
                    loss_sum += float(loss.detach())
                    saved.append((x, parts, loss, None))
                    del target, out
                else:
                    links.forward_send(out, mb)
                    saved.append((x, parts, None, out))
                del x, parts
            for mb in reversed(range(setup.chunks)):
                x, parts, loss, out = saved.pop()
                last_backward = mb == 0
                if ddp is not None and last_backward:
                    # As torch.distributed.pipelining does for a DDP stage: forwards ran
                    # under no_sync, so the reducer is armed by hand for the last backward.
                    ddp.reducer.prepare_for_backward([])
                ctx = no_sync() if ddp is not None and not last_backward \
                    else contextlib.nullcontext()
                with ctx:
                    if is_last:
                        loss.backward()
                    else:
                        outs, grads = links.backward_recv(out, mb, group)
                        pairs = [(o, g) for o, g in zip(outs, grads) if g is not None]
                        torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
                        del outs, grads, pairs
                if not is_first:
                    links.backward_send(x, parts, mb)
                del x, parts, loss, out
            if optimizer is not None:
                with memtrack.tagged(memtrack.OPTIMIZER) if device.type == "cpu" \
                        else contextlib.nullcontext():
                    optimizer.step()
            losses.append(loss_sum)
            window.mark_iteration()
        seconds = time.perf_counter() - start
        window.stop()
        if is_last and pl.config.parallel == "dp" and not alone:
            total = torch.tensor(losses, dtype=torch.float64)
            before = references(total)
            dist.all_reduce(total, group=group)
            released(total, before)  # freed here, not in the next run's window
            losses = total.tolist()
            del total
        keep = is_last and pl.local == 0 and not alone
        note = f"tp replicated {', '.join(replicated)}" if replicated else None
        return StageResult(rank, "ok", window.peaks()[0], window.breakdowns()[0], seconds,
                           iteration_peaks=tuple(p[0] for p in window.iteration_peaks),
                           held_before=window.held_before,
                           losses=tuple(losses) if keep else (), note=note)
    except Exception as exc:  # a run's failure is data (ARCHITECTURE.md, Records)
        window.stop()
        status, message = classify(exc)
        where = f"device {rank} (stage {s}, {pl.config.text}, layers {first}..{last})"
        return StageResult(rank, status, error=f"{where}: {message}")
    finally:
        objects.clear()
        gc.collect()
