"""MPress costs, measured (MPress III-B, the profiler's statistics; issue 16, item 1).

:func:`measure` returns a ``PressStats`` for a model under a setup, measured in this
process on the setup's device with the setup's intra-op threads:

* ``saved_bytes[l]``: bytes of the storages layer ``l``'s forward saves for backward per
  micro-batch, counted through ``torch.autograd.graph.saved_tensors_hooks``: each storage
  once (views of one storage, or one tensor saved by two ops or two layers, count once, for
  the first layer that saves it: the owner ``mcap.runner.press.apply`` applies that layer's
  action to), parameters and buffers never (they are not activations), and the model's
  input batch never (the first stage's schedule holds it whatever a plan does), and
  storages on another device than the stage's never (a CUDA layer's host scalars, such as
  flash attention's RNG seed and offset: no GPU counter counts them, and the runner leaves
  them in place, ``mcap.runner.press.apply``). A layer
  that starts a stage owns its input there too when it is the first to save it (a conv's
  input): the schedule holds that one as well, so acting on that layer frees less than
  ``saved_bytes`` says.
* ``boundaries[b]``: which of those storages are the tensor passed from layer ``b - 1`` to
  layer ``b``, as ``(owner, bytes)`` pairs: what a stage boundary (or a recompute
  segment's input) at ``b`` pins whatever the plan (``mcap.core.press.model`` subtracts
  them from what reducing the owner frees); owner ``-1``: a passed tensor no layer saves
  (a recompute segment starting at ``b`` keeps it alive, which costs its bytes).
* ``shared``: ``(owner, last, bytes)``: storages ``owner`` saves that later layers up to
  ``last`` save too (a ReLU's output the next pooling saves): recomputing ``owner`` frees
  them only when every layer up to ``last`` is recomputed in the same segment.
* ``backward_bytes[l]``: the most bytes layer ``l``'s backward allocates beyond what is
  live when it starts, for one micro-batch: the layer alone on its recorded input (a
  detached copy that requires grad, as a stage's input does; the model's input batch does
  not), its output's gradient allocated first, its parameters frozen (their gradients are
  allocated whatever a plan does, keep-all too), then ``backward`` under the byte counter
  (``mcap.runner.memtrack`` on the CPU, installed here if it is not yet;
  ``max_memory_allocated`` on CUDA): the gradients of its inputs, its intermediate
  gradients and the kernels' workspaces (a oneDNN convolution's backward allocates a
  weight-sized buffer even so), the working set a reduced layer's backward adds on top
  of its restored bytes (``mcap.core.press.model``).
* ``backward_transients[l]``: ``(first, accumulate, swapped)``, the most bytes layer ``l``'s
  backward holds above the level where it starts, for one micro-batch, its parameters
  requiring grad (:func:`transients`): the first backward (allocating their
  gradients), a later one (accumulating into them: a weight-sized temporary per parameter
  tensor, not per layer), and a later one with the layer's saved storages swapped out by
  the runner's own hooks (they come back as backward needs them, not all at once). Where
  a stage peaks inside its backward, these place the peak and say what a swap brings back
  there (``mcap.core.press.events``).
* ``forward_transients[l]``: ``(keep, swapped)``, the most bytes layer ``l``'s forward holds
  above the level where it starts (its saved storages and temporaries; swapped, what it
  holds until the moved storages' originals are let go): a plan that empties a stage's
  backward can move its peak into a forward.
* ``recompute_transients[l]``: ``(forward, backward)``, the same for the layer run as a
  one-layer recompute segment (``torch.utils.checkpoint``, non-reentrant, as the runner
  does): its forward keeps only its input, its backward re-runs the forward first.
* ``swap_seconds[l]``: what host-swapping layer ``l`` adds to its forward and backward for
  one micro-batch, timed here the way the runner swaps (:func:`transients`): the copies
  out and back, the fresh allocations and the saved-tensor hooks' own work, which a
  bandwidth alone does not show for small activations (VGG11's 4-16 KB layers).
* ``recompute_seconds[l]``: what recomputing layer ``l`` as a one-layer segment adds to its
  forward and backward for one micro-batch, timed like ``swap_seconds`` (the runner's
  ``torch.utils.checkpoint``, non-reentrant, preserving the RNG state): the forward again
  and the checkpoint's own work. On CPU stage processes that work outweighs a small
  layer's forward: an AmoebaNet-D cell at micro-batch 2 forwards in 0.4-0.7 ms, and its
  checkpointed forward and backward take 1.6-1.9 ms longer than the plain ones. And it can
  be less than the forward: the non-reentrant checkpoint stops recomputing once every
  tensor the backward needs is back, so a layer whose backward needs only its input (a
  bare Linear: input and weight) recomputes nothing.
* ``segment_bytes``: what each recompute segment keeps per micro-batch beside its input (on
  the CPU the checkpoint's copy of the RNG state, a tensor the tracker counts; 0 on CUDA).
* ``cores``: the CPU cores the stage processes share (``sched_getaffinity``): how many
  stages can run at once, for the added time of a plan.
* ``forward_seconds[l]``: the layer's forward time per micro-batch with autograd
  recording (what recomputing it costs), the median of ``repeats`` after one warm-up.

Times (``forward_seconds``, ``swap_seconds``, ``recompute_seconds``, and on CUDA the
bandwidths) are read with a :class:`Stopwatch`: on CUDA between two CUDA events recorded on
the stream the work runs on (the GPU's own clock: the asynchronous copies and kernels the
work queued, including any wait for the host to queue them); on the CPU CPU time
(:func:`clock`: ``time.thread_time`` with one intra-op
thread, as the stage processes run: the layer runs on the calling thread, and no other
thread of the process counts; ``time.process_time`` with more). Stage processes pinned to
one intra-op thread run a layer on one core, so on a quiet machine the two agree, and on a loaded one
(other jobs, or stage processes sharing the cores) the CPU time is still what the layer
costs while the wall clock also holds the time it waited for a core
(``bench/bench_press_time.py`` checks the plan's added CPU time against it).
* ``host_bandwidth``: bytes per second of one direction of a host swap done the way the
  runner does it: on the CPU a copy into a numpy buffer (memory the tracker does not
  count) and back into a fresh tensor; on CUDA a pinned host buffer with non-blocking
  copies. The median over repeats of the mean of the two directions.
* ``d2d_bandwidth``: bytes per second of one direction of a d2d swap done the way the
  runner does it (``mcap.runner.press.d2d``): on the CPU over a Unix socket into a
  receiving server's tensor and back (here both ends are threads of this process; the
  kernel copies the same bytes between two processes); on CUDA a device-to-device copy
  from GPU 0 to GPU 1 (GPU 0 itself when there is only one, as stages sharing it do).
* ``gpus``: on CUDA, the GPUs the stage processes run on (``min(stages, device_count)``):
  stages sharing one GPU take turns on it, so the time a plan adds to each of them adds up
  (``mcap.core.press.model.delay``); None on the CPU (``cores`` says it there).
"""
from __future__ import annotations

import torch

from mcap.core.types import PressStats, Setup
from mcap.runner.press.passes import (  # noqa: F401  (transients, backward_bytes: importable here)
    backward_bytes, transients,
)
from mcap.runner.press.timing import (  # noqa: F401  (clock, Stopwatch: importable here)
    REPEATS, Stopwatch, clock, d2d_bandwidth, forward_seconds, host_bandwidth,
)


def measure(spec: str, setup: Setup, repeats: int = REPEATS) -> PressStats:
    from mcap.models import build_model
    from mcap.core.setup import micro_batch

    old = torch.get_num_threads()
    torch.set_num_threads(setup.threads)
    try:
        device = torch.device("cuda", 0) if setup.device == "cuda" else torch.device("cpu")
        built = build_model(spec)
        module = built.module.to(device)
        inputs, _ = built.example_batch(setup.batch_size)
        x = inputs[: micro_batch(setup)].to(device)
        saved, bounds, shared = saved_and_boundaries(module, x)
        backward = backward_bytes(module, x, device)
        tr = transients(module, x, device, repeats)
        forward = forward_seconds(module, x, repeats, device)
        host = host_bandwidth(device, repeats)
        d2d = d2d_bandwidth(device, repeats)
        gpus = min(setup.stages, torch.cuda.device_count()) if device.type == "cuda" else None
    finally:
        torch.set_num_threads(old)
    return PressStats(tuple(saved), tuple(forward), host, d2d, bounds, shared, tuple(backward),
                      tuple(tr.backward), tuple(tr.forward), tuple(tr.seconds),
                      tuple(tr.recompute), _cores(), _segment_bytes(device),
                      tuple(tr.recompute_seconds), gpus)


def _storages(out) -> list:
    """The storages of a layer's output (a tensor or a tuple/list of them)."""
    items = out if isinstance(out, (tuple, list)) else (out,)
    return [t.untyped_storage() for t in items if isinstance(t, torch.Tensor)]


def saved_bytes(module: torch.nn.Sequential, x: torch.Tensor) -> list[int]:
    """Per layer, the bytes of storages it is the first to save for backward (module
    docstring)."""
    return saved_and_boundaries(module, x)[0]


def saved_and_boundaries(module: torch.nn.Sequential, x: torch.Tensor):
    """``saved_bytes`` and ``boundaries`` of one forward (module docstring)."""
    skip = {t.untyped_storage().data_ptr()
            for t in list(module.parameters()) + list(module.buffers())}
    skip.add(x.untyped_storage().data_ptr())
    owner: dict[int, int] = {}
    last: dict[int, int] = {}  # storage -> the last layer that saves it
    sizes = [0] * len(module)
    current = [0]
    held = []  # the saved tensors' storages stay alive, so addresses are not reused

    def pack(t):
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if t.device != x.device:  # not the stage's memory (module docstring)
            return t
        if key and key not in skip and key not in owner:
            owner[key] = current[0]
            sizes[current[0]] += storage.nbytes()
            held.append(storage)
        if key in owner:
            last[key] = current[0]
        return t

    passed = [_storages(x)]  # per boundary; kept alive so no address is reused meanwhile
    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = x
        for i, layer in enumerate(module):
            current[0] = i
            out = layer(out)
            passed.append(_storages(out))
    bounds = []
    for b, storages in enumerate(passed):
        by_owner: dict[int, int] = {}
        for ptr, st in {st.data_ptr(): st for st in storages}.items():
            if ptr in skip or not ptr or b == 0:
                continue
            o = owner.get(ptr, -1)  # -1: saved by no layer (freed after its reader runs)
            by_owner[o] = by_owner.get(o, 0) + st.nbytes()
        bounds.append(tuple(sorted(by_owner.items())))
    nbytes = {st.data_ptr(): st.nbytes() for st in held}
    shared: dict[tuple[int, int], int] = {}
    for ptr, o in owner.items():
        if last[ptr] > o:
            shared[(o, last[ptr])] = shared.get((o, last[ptr]), 0) + nbytes[ptr]
    del out, held, passed
    return sizes, tuple(bounds), tuple((o, k, n) for (o, k), n in sorted(shared.items()))


def _segment_bytes(device: torch.device) -> int:
    """What a recompute segment keeps beside its input in the stage's counted memory:
    ``torch.utils.checkpoint`` (preserving RNG state, as the runner's does) copies the CPU
    RNG state into a tensor the CPU tracker counts; on CUDA that copy is host memory, not
    the GPU's."""
    if device.type == "cuda":
        return 0
    return int(torch.get_rng_state().nbytes)


def _cores() -> int:
    """The CPU cores this process (and the stage processes it forks) may run on."""
    import os
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
