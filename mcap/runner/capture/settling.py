"""Gloo settling for hybrid devices run together on the CPU: gloo finishes a collective on a
worker thread, which lets go of the collective's tensors whenever the OS schedules it
again; every wait here makes each buffer free where the program drops it, so a device's
peak repeats from run to run (bench/log/2026-11-24-hybrid-plans-measured.md, Repeatability).
Under torch's ``fake``
backend (a device alone, :mod:`mcap.runner.alone`) there is no worker thread and each of
these returns at once (:func:`no_worker`)."""
from __future__ import annotations

import os
import sys
import time
from typing import Optional

import torch
import torch.distributed as dist
from torch import nn

from mcap.runner import alone as alone_mod
from mcap.runner import memtrack

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
    allocations and frees, bench/log/2026-11-24-hybrid-plans-measured.md, Repeatability).
    Waiting here until all three
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
    KB while an old bucket was still held; bench/log/2026-11-24-hybrid-plans-measured.md,
    Repeatability).

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
