"""A stage's memory over one training iteration, event by event, with every layer kept.
Pure (numpy, no torch).

MPress decides per tensor from its *live interval* (II-C, Fig. 1): a layer's saved
activations of micro-batch m are on the device from its forward F(l, m) until its backward
B(l, m). What a plan saves therefore depends on *when* the stage peaks, not only on how many
micro-batches are in flight. Measured on CPU stage processes
(bench/log/2026-11-25-mpress-event-model.md): VGG11's stage 0 (16 layers, 18 MB of weights) and
AmoebaNet-D's stage 1
peak inside the backward of the *second* micro-batch, when every weight gradient exists and
the conv4_2 backward allocates its working set and a weight-sized gradient to accumulate;
one micro-batch's activations are gone by then. A model that frees ``held x saved`` per
reduced layer (the peak at the end of the forwards) promised 0.1-4% more than a plan freed.

:func:`stage_events` walks the stage's op order (``mcap.core.stagetime.op_order``: GPipe or
1F1B as torch runs them) layer by layer: one event during each layer's forward and one during each layer's
backward, of each micro-batch. At every event it records, per layer l of the stage, how
many micro-batches' saved bytes of l are held (forward done, backward of l not finished),
and the keep-all bytes that vary in the iteration:

    keep[e] = sum_l saved[l] * live[e, l]            activations
            + outputs no layer saves                   (held by the schedule: stage_events)
            + forward[l]                               during F(l, m): what the forward holds
                                                       above its start at most
            + grad_in per micro-batch whose backward is done (its input's gradient, sent on)
            + sum of params[l] whose gradient exists   (allocated at the first backward of l)
            + first[j] or accum[j]                     during B(j, m): the most the layer's
                                                       backward holds above its start, in the
                                                       iteration's first backward of j (its
                                                       gradients allocated) or a later one
                                                       (accumulated into them)
            + grad_out[j]                              and its output's gradient

Weights and optimizer state are the same at every event and left out, so only differences
of ``keep`` mean anything: ``mcap.core.press.model.outcome`` uses ``base - max(keep) +
max(keep + plan's change)``. A plan never touches parameters, gradients or working bytes;
they only decide where the peak is.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from mcap.core.stagetime import op_order


@dataclass(frozen=True, eq=False)
class StageEvents:
    """One stage's events (module docstring). Local layer indices 0..n-1."""
    start: int                 # global index of the stage's first layer
    live: np.ndarray           # [E, n] int64: micro-batches whose saved bytes of l are held
    at: np.ndarray             # [E] int64: local layer whose backward runs at e, else -1
    fat: np.ndarray            # [E] int64: local layer whose forward runs at e, else -1
    keep: np.ndarray           # [E] int64: keep-all bytes that vary (module docstring)

    @property
    def size(self) -> int:
        return int(self.keep.shape[0])


def stage_events(schedule: str, stage: int, stages: int, chunks: int, start: int,
                 saved: Sequence[int], params: Sequence[int] = (), first: Sequence[int] = (),
                 accum: Sequence[int] = (), forward: Sequence[int] = (), held_out: int = 0,
                 grad_in: int = 0, grad_out: Sequence[int] = (),
                 last: bool = False) -> StageEvents:
    """Long because: the docstring defines the bytes of each of its arguments; the walk
    over the schedule's op order itself is one loop of 30 lines.

    Events of stage ``stage`` whose layers are ``start .. start + len(saved) - 1``.

    Per layer of the stage: ``saved``, bytes saved for backward per micro-batch (held from
    its forward to its backward); ``params``, parameter bytes (its gradient's size);
    ``first`` / ``accum``, what its backward holds above its start in the iteration's
    first backward of it and in a later one (``PressStats.backward_transients``);
    ``forward``, what its forward holds above its start at most (at least ``saved``:
    ``PressStats.forward_transients``; empty: ``saved``); ``grad_out``, the bytes of the
    gradient of its output, there during its backward (made by the next layer's; the last
    layer's arrives in a receive buffer the schedule keeps: 0 there, except on the ``last``
    stage, where the loss makes it). ``held_out``: bytes of the stage's output per
    micro-batch that no layer of it saves: kept to the end of the step (its send is waited
    for there); on the ``last`` stage the loss (cross-entropy) also keeps a log-softmax of
    the same size until its backward, the first of the micro-batch's, and the schedule the
    output itself until the micro-batch's backward is done. ``grad_in``: bytes of the
    gradient of the stage's input per micro-batch, kept from that micro-batch's backward to
    the end of the step (in the receive buffers' ``.grad`` and the sends waited for at the
    end; 0 on the first stage). The stage's input itself lives in the schedule's receive
    buffers for the whole iteration: a constant, left out."""
    n = len(saved)
    P = list(params) or [0] * n
    T1 = list(first) or [0] * n
    T2 = list(accum) or [0] * n
    F = list(forward) or list(saved)
    G = list(grad_out) or [0] * n
    live = [0] * n          # micro-batches of each layer held now
    grads = 0               # bytes of the gradients that exist now
    has_grad = [False] * n
    acts = 0                # sum_l saved[l] * live[l] + the outputs the schedule holds
    lives, ats, fats, keeps = [], [], [], []

    def record(b: int, f: int, extra: int) -> None:
        lives.append(list(live))
        ats.append(b)
        fats.append(f)
        keeps.append(acts + grads + extra)

    for kind, m in op_order(schedule, stages, chunks)[stage]:
        if kind == "F":
            for l in range(n):
                record(-1, l, max(F[l], saved[l]))
                live[l] += 1
                acts += saved[l]
            acts += held_out * (2 if last else 1)
            continue
        if last:  # the loss's backward runs first and lets its log-softmax go
            acts -= held_out
        for j in reversed(range(n)):
            record(j, -1, (T2[j] if has_grad[j] else T1[j]) + G[j])
            live[j] -= 1
            acts -= saved[j]
            if not has_grad[j]:
                has_grad[j] = True
                grads += P[j]
        acts += grad_in - (held_out if last else 0)  # the output, dropped with the graph
    E = len(lives)
    return StageEvents(start, np.array(lives, dtype=np.int64).reshape(E, n),
                       np.array(ats, dtype=np.int64), np.array(fats, dtype=np.int64),
                       np.array(keeps, dtype=np.int64))
