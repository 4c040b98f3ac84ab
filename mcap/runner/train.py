"""What both engines share inside a worker: the optimizer, activation recomputation per
micro-batch, and reading a device's peak over the measured window."""
from __future__ import annotations

import contextlib
import gc
import traceback
from pathlib import Path
from typing import Optional, Sequence

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from mcap.runner import memtrack
from mcap.runner.heap import give_back_heap
from mcap.core.types import MemoryBreakdown, Setup

from mcap.runner.protocol import ITERATIONS  # noqa: F401  (re-exported for the engines)


def make_optimizer(setup: Setup, params) -> Optional[torch.optim.Optimizer]:
    """The paper's SGD (lr 0.1, momentum 0.9, weight decay 1e-4), or Adam. None for a stage
    without parameters (a lone ReLU or pooling layer), which has nothing to update."""
    params = [p for p in params if p.requires_grad]
    if not params:
        return None
    groups = _one_kind_per_group(params)
    if setup.optimizer == "adam":
        return torch.optim.Adam(groups, lr=1e-3)
    return torch.optim.SGD(groups, lr=0.1, momentum=0.9, weight_decay=1e-4)


def _one_kind_per_group(params: list) -> list:
    """A tensor-parallel stage holds DTensor shards beside plain replicated parameters
    (norms, embeddings). On CUDA ``torch.optim`` takes the foreach path, whose
    ``_foreach_*`` ops refuse a list mixing the two (the H200: "got mixed torch.Tensor and
    DTensor"), so each kind gets a parameter group of its own, with the same settings; a
    stage of one kind keeps one group (the CPU's per-tensor path is unchanged either way)."""
    def is_dtensor(p) -> bool:
        return type(p).__name__ == "DTensor" or type(getattr(p, "data", None)).__name__ == "DTensor"

    shards = [p for p in params if is_dtensor(p)]
    if not shards or len(shards) == len(params):
        return params
    plain = [p for p in params if not is_dtensor(p)]
    return [{"params": shards}, {"params": plain}]


class Recomputed(nn.Module):
    """A stage's layers with torchgpipe's checkpoint modes over micro-batches.

    torchgpipe recomputes in backward every micro-batch but the last under
    ``except_last`` (the last one's backward starts right away, so keeping its activations
    costs nothing extra), all of them under ``always``, none under ``never``. Forwards run
    in micro-batch order in both GPipe and 1F1B, so counting calls since :meth:`new_step`
    tells which micro-batch this is. Calls on meta tensors (shape inference) do not count.
    """

    def __init__(self, layers: nn.Module, mode: str, chunks: int, autocast=None):
        super().__init__()
        self.layers = layers
        self.mode = mode
        self.chunks = chunks
        self.calls = 0
        # the precision's forward context (mcap.runner.precision.autocast); checkpoint's
        # recomputation restores the same autocast state by itself
        self.autocast = autocast

    def new_step(self) -> None:
        self.calls = 0

    def forward(self, *args):
        # The schedule passes a tuple activation (AmoebaNet's (state, skip)) as several
        # arguments; nn.Sequential takes one input, so pack them back into the tuple.
        x = args[0] if len(args) == 1 else args
        if any(isinstance(a, torch.Tensor) and a.is_meta for a in args) \
                or not torch.is_grad_enabled():
            return self.layers(x)
        index, self.calls = self.calls, self.calls + 1
        with self.autocast if self.autocast is not None else contextlib.nullcontext():
            if self.mode == "always" or (self.mode == "except_last" and index < self.chunks - 1):
                return checkpoint(self.layers, x, use_reentrant=False)
            return self.layers(x)


def tag_weights_and_gradients(module: nn.Module) -> None:
    """Attribute a stage's parameters and buffers to ``weights`` and each parameter's
    gradient to ``gradients`` as soon as autograd accumulates it (CPU breakdown)."""
    for t in list(module.parameters()) + list(module.buffers()):
        memtrack.retag(t, memtrack.WEIGHTS)

    def hook(param: torch.Tensor) -> None:
        memtrack.retag(param.grad, memtrack.GRADIENTS)

    for p in module.parameters():
        if p.requires_grad:
            p.register_post_accumulate_grad_hook(hook)


def free_blas_workspaces() -> bool:
    """Free cuBLAS / cuBLASLt workspaces, where this torch exposes a way. True if it did.

    cuBLAS keeps one workspace per (thread, stream) that ran a matmul (32 MiB on Hopper;
    the forward thread and the autograd thread each get one), allocated through the
    caching allocator, so it counts in ``memory_allocated``, and ``empty_cache`` leaves it.
    In a persistent stage process it would carry one run's workspaces into the next
    (issue 11: the same stage read 144 MiB early in a GPU sweep and 210 MiB later)."""
    clear = getattr(torch.cuda, "clear_cublas_workspaces", None) \
        or getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is None:
        return False
    clear()
    return True


def clean_slate(devices: Sequence[torch.device]) -> None:
    """Return this process to the state a fresh stage process starts a run in (issue 11).

    Garbage from earlier runs is collected; on CUDA the BLAS workspaces are freed, the
    cache emptied and the peak statistics reset, so the run pays its workspaces itself,
    as a real training process does. The CPU needs nothing more: the tracker
    (:mod:`memtrack`) counts only tensor storages from PyTorch's CPU allocator; oneDNN
    allocates its workspaces (scratchpads) per call through that allocator and frees them
    on return, and its primitive cache holds no tensor memory, so nothing counted
    survives a run (torch exposes no oneDNN cache control either). What the process freed
    goes back to the kernel (``heap.give_back_heap``), so the run's page faults, and so
    its times, do not depend on the runs before either."""
    gc.collect()
    give_back_heap()
    cuda = [d for d in devices if d.type == "cuda"]
    if not cuda:
        return
    for d in cuda:
        torch.cuda.synchronize(d)
    free_blas_workspaces()
    torch.cuda.empty_cache()
    for d in cuda:
        torch.cuda.reset_peak_memory_stats(d)


class Window:
    """The measured window of one or more devices of this process: the process starts
    from a clean slate (:func:`clean_slate`), the peak is reset after the stage is built
    and the optimizer created, and covers both iterations."""

    def __init__(self, devices: Sequence[torch.device], capacity: Optional[int]):
        self.devices = list(devices)
        self.cuda = self.devices[0].type == "cuda"
        clean_slate(self.devices)
        self.capacity = capacity
        self.iteration_peaks: list[list[int]] = []
        # Segments (a measured timeline, mcap.runner.alone.StageTimer): the device's peak
        # counter is read and reset at each boundary; the window's peak is the highest
        # segment's (and its breakdown, on the CPU, that segment's at its peak).
        self._max: Optional[list[int]] = None
        self._max_breakdown: Optional[tuple] = None
        # Bytes this process held before the stage was built; 0 when nothing leaked from
        # earlier runs. Peaks are absolute (like max_memory_allocated), so this is a check.
        self.held_before = self._held()

    def _held(self) -> int:
        if self.cuda:
            return sum(int(torch.cuda.memory_allocated(d)) for d in self.devices)
        return memtrack.current()

    def limit(self) -> None:
        """Impose the capacity from here on, before the stage is built: weights that do not
        fit are out of memory too, as on a GPU."""
        if not self.capacity:
            return
        if self.cuda:
            for d in self.devices:
                total = torch.cuda.get_device_properties(d).total_memory
                torch.cuda.set_per_process_memory_fraction(min(1.0, self.capacity / total), d)
        else:
            memtrack.set_capacity(self.capacity)

    def start(self) -> None:
        """Open the measured window: stage built, optimizer created."""
        if self.cuda:
            for d in self.devices:
                torch.cuda.synchronize(d)
                torch.cuda.reset_peak_memory_stats(d)
        else:
            memtrack.reset_peak()

    def mark_iteration(self) -> None:
        self.iteration_peaks.append(self.peaks())

    def stop(self) -> None:
        if self.cuda:
            for d in self.devices:
                torch.cuda.synchronize(d)
                if self.capacity:
                    torch.cuda.set_per_process_memory_fraction(1.0, d)
        else:
            memtrack.set_capacity(None)

    def _counter(self) -> list[int]:
        """The device peak counters since their last reset."""
        if self.cuda:
            return [int(torch.cuda.max_memory_allocated(d)) for d in self.devices]
        return [memtrack.peak()]

    def current(self) -> list[int]:
        if self.cuda:
            return [int(torch.cuda.memory_allocated(d)) for d in self.devices]
        return [memtrack.current()]

    def segment(self) -> tuple[int, int]:
        """End a segment of the timeline on the first device: (its peak, the bytes held
        now); the counter starts again from here, the window's peak keeps the highest."""
        if self.cuda:
            torch.cuda.synchronize(self.devices[0])
        peak, now = self._counter()[0], self.current()[0]
        if self._max is None or peak > self._max[0]:
            self._max = [peak]
            if not self.cuda:
                self._max_breakdown = memtrack.peak_breakdown()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.devices[0])
        else:
            memtrack.reset_peak()
        return peak, now

    def peaks(self) -> list[int]:
        counted = self._counter()
        if self._max is None:
            return counted
        return [max(self._max[0], counted[0])] + counted[1:]

    def breakdowns(self) -> list[Optional[MemoryBreakdown]]:
        """Exact on CPU (the tracker copies its per-category bytes when a peak is reached);
        not available on CUDA, where only the allocator's totals are read."""
        if self.cuda:
            return [None] * len(self.devices)
        if self._max is not None and self._max[0] >= memtrack.peak():
            other, weights, grads, optim = self._max_breakdown
        else:
            other, weights, grads, optim = memtrack.peak_breakdown()
        return [MemoryBreakdown(weights=weights, gradients=grads, optimizer=optim, other=other)]


def classify(exc: BaseException) -> tuple[str, str]:
    """(status, message) for an exception a run raised: out-of-memory (the CPU tracker's
    capacity or a real CUDA OOM) is "oom", anything else "failed". Wrapped errors (the
    schedule re-raises a stage's error as RuntimeError) are judged by their root cause."""
    chain = [exc]
    while chain[-1].__cause__ is not None and len(chain) < 10:
        chain.append(chain[-1].__cause__)
    for e in chain:
        if isinstance(e, torch.OutOfMemoryError) or memtrack.is_capacity_error(e) \
                or "CUDA out of memory" in str(e):
            return "oom", _first_line(e)
    root = chain[-1]
    tb = traceback.extract_tb(root.__traceback__)
    where = f" (at {Path(tb[-1].filename).name}:{tb[-1].lineno})" if tb else ""
    return "failed", f"{type(root).__name__}: {_first_line(root)}{where}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
