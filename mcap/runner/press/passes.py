"""One layer at a time, forward and backward on its recorded input, under the byte counter of
its device: what its backward allocates (:func:`backward_bytes`) and the most each pass holds
kept, swapped by the runner's own hooks and recomputed, with the seconds swapping and
recomputing add (:func:`transients`). ``mcap.runner.press.stats``'s docstring says what each
field of ``PressStats`` they fill means."""
from __future__ import annotations

import contextlib
import statistics
from typing import NamedTuple

import torch

from mcap.runner.press.timing import REPEATS, Stopwatch


def _layer_inputs(module: torch.nn.Sequential, x: torch.Tensor) -> list:
    """Every layer's input for one micro-batch, recorded once without autograd."""
    with torch.no_grad():
        inputs, out = [], x
        for layer in module:
            inputs.append(out)
            out = layer(out)
    return inputs


def _counters(device: torch.device):
    """(bytes now, reset the peak, the peak) on ``device``."""
    if device.type == "cuda":
        def now():
            torch.cuda.synchronize(device)
            return torch.cuda.memory_allocated(device)

        def reset():
            torch.cuda.reset_peak_memory_stats(device)

        def top():
            torch.cuda.synchronize(device)
            return torch.cuda.max_memory_allocated(device)
        return now, reset, top
    from mcap.runner import memtrack
    memtrack.install()
    return memtrack.current, memtrack.reset_peak, memtrack.peak


def _leaves(x, grad: bool):
    """A layer's recorded input as fresh leaves: floating tensors require grad when ``grad``
    (a stage's input does; the model's input batch does not)."""
    def one(t):
        if not isinstance(t, torch.Tensor):
            return t
        t = t.detach().clone()
        return t.requires_grad_(grad and t.is_floating_point())
    return tuple(one(t) for t in x) if isinstance(x, (tuple, list)) else one(x)


def backward_bytes(module: torch.nn.Sequential, x: torch.Tensor,
                   device: torch.device) -> list[int]:
    """Per layer, the peak bytes its backward allocates beyond what is live when it starts
    (module docstring)."""
    now, reset, top = _counters(device)
    inputs = _layer_inputs(module, x)
    sizes = []
    for i, layer in enumerate(module):
        params = [p for p in layer.parameters() if p.requires_grad]
        for p in params:  # parameter gradients: allocated whatever the plan (docstring)
            p.requires_grad_(False)
        try:
            xs = _leaves(inputs[i], i > 0)
            with torch.enable_grad():
                out = layer(xs)
            outs = [t for t in (out if isinstance(out, (tuple, list)) else (out,))
                    if isinstance(t, torch.Tensor) and t.requires_grad]
            if not outs:  # nothing to differentiate (a layer on the model's integer input)
                sizes.append(0)
                continue
            grads = [torch.ones_like(t) for t in outs]
            start = now()
            reset()
            torch.autograd.backward(outs, grads)
            sizes.append(max(0, top() - start))
            del out, outs, grads, xs
        finally:
            for p in params:
                p.requires_grad_(True)
    return sizes


def _fresh(x):
    """Tensors that require grad replaced by copies made inside the graph (``clone`` saves
    nothing), so the caller can drop them: only what a layer saves keeps their storage, as
    in a stage where the layer's input comes from the layer before it."""
    def one(t):
        return t.clone() if isinstance(t, torch.Tensor) and t.requires_grad else t
    return tuple(one(t) for t in x) if isinstance(x, (tuple, list)) else one(x)


class Transients(NamedTuple):
    backward: list   # per layer (first, accumulate, swapped) bytes
    forward: list    # per layer (keep, swapped) bytes
    recompute: list  # per layer (forward, backward) bytes, under the runner's checkpoint
    seconds: list    # per layer, seconds a host swap adds
    recompute_seconds: list  # per layer, seconds recomputing it as a segment adds


def transients(module: torch.nn.Sequential, x: torch.Tensor, device: torch.device,
               repeats: int = REPEATS) -> Transients:
    """Per layer, for one micro-batch, the most bytes held above the level where a pass
    starts (module docstring): its backward ``(first, accumulate, swapped)``, its forward
    ``(keep, swapped)``, its forward and backward recomputed ``(forward, backward)`` (as the
    runner's ``torch.utils.checkpoint`` segment of one layer does it: the backward
    re-runs the forward first); and the seconds swapping it adds to its forward and
    backward (the median over ``repeats`` of swapped minus kept, timed alternately: the
    copies, the fresh allocations and the hooks' own work, as the runner does them). Parameters require grad: ``first`` allocates their gradients,
    ``accumulate`` adds to existing ones (the backwards of later micro-batches), ``swapped``
    too with every storage the layer saves moved to host memory at its forward by the
    runner's own hooks (``mcap.runner.press.apply``) and brought back when backward unpacks it.
    A forward holds its saved storages and its temporaries (``keep``); swapped, the moved
    storages' originals live until the layer lets them go. The layer's input and output
    are copies no one else holds, so only what it saves keeps them, as inside a stage."""
    from mcap.core.press.actions import LayerAction
    from mcap.runner.press.apply import PressStage

    now, reset, top = _counters(device)
    inputs = _layer_inputs(module, x)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    watch = Stopwatch(device)
    out = Transients([], [], [], [], [])
    for i, layer in enumerate(module):
        leaves = _leaves(inputs[i], i > 0)
        hooks = PressStage(torch.nn.Sequential(layer), [LayerAction(0, "swap")], 0,
                           device=device)
        back, fwd = [], {}
        for mode in ("first", "accumulate", "swapped", "recompute"):
            how = hooks if mode == "swapped" else RECOMPUTE if mode == "recompute" else None
            up, down, _ = _pass(layer, leaves, how, now, reset, top, sync)
            back.append(down)
            fwd[mode] = up
        extra, again = [], []
        for _ in range(repeats):  # timed alternately, all warm by now
            kept = _pass(layer, leaves, None, now, reset, top, sync, watch)[2]
            extra.append(_pass(layer, leaves, hooks, now, reset, top, sync, watch)[2] - kept)
            again.append(_pass(layer, leaves, RECOMPUTE, now, reset, top, sync, watch)[2] - kept)
        for p in layer.parameters():
            p.grad = None
        out.backward.append(tuple(back[:3]))
        out.forward.append((fwd["accumulate"], fwd["swapped"]))
        out.recompute.append((fwd["recompute"], back[3]))
        out.seconds.append(max(0.0, statistics.median(extra)))
        out.recompute_seconds.append(max(0.0, statistics.median(again)))
        del leaves, hooks
    return out


RECOMPUTE = object()  # _pass: run the layer as a one-layer checkpoint segment


def _pass(layer, leaves, hooks, now, reset, top, sync, watch: "Stopwatch | None" = None
          ) -> tuple[int, int, float]:
    """One forward and backward of ``layer`` (swapping what it saves when ``hooks`` is a
    ``PressStage``, recomputing it when it is :data:`RECOMPUTE`): the peaks of each above
    its start, and the seconds both took on ``watch`` (0.0 without one)."""
    from torch.utils.checkpoint import checkpoint
    from mcap.runner.press.apply import Saver

    sync()
    if watch is not None:
        watch.start()
    xs = _fresh(leaves)
    saver = Saver(hooks) if hooks is not None and hooks is not RECOMPUTE else None
    if saver is not None:
        saver.layer = 0
    start = now()
    reset()
    with torch.enable_grad(), \
            torch.autograd.graph.saved_tensors_hooks(saver.pack, saver.unpack) \
            if saver is not None else contextlib.nullcontext():
        out = checkpoint(layer, xs, use_reentrant=False) if hooks is RECOMPUTE else layer(xs)
    up = max(0, top() - start)
    ys = _fresh(out)
    del out, xs
    outs = [t for t in (ys if isinstance(ys, tuple) else (ys,))
            if isinstance(t, torch.Tensor) and t.requires_grad]
    if not outs:  # nothing to differentiate (a layer on the model's integer input)
        sync()
        return up, 0, 0.0 if watch is None else watch.stop()
    grads = [torch.ones_like(t) for t in outs]
    start = now()
    reset()
    torch.autograd.backward(outs, grads)
    down = max(0, top() - start)
    sync()
    return up, down, 0.0 if watch is None else watch.stop()
