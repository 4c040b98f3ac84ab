"""MPress's memory and time model for one partitioning (MPress II-C, III-A, III-D). Pure.

A :class:`Problem` (``problems.py``, built from a profile or from bare numbers) is
everything a planner needs; :func:`outcome` says what an assignment of
actions (``mcap.core.press.actions``: keep, recompute, swap, d2d) does to every device. Both
planners (``mpress.py``, ``milp.py``) and every report use this one function, so they agree.

**Memory** (per stage s, bytes). ``base[s]`` is the stage's peak with every layer kept:
the profile's predictor (``mcap.core.recommend.costs_of``), or a measured keep-all run
(``press --measure-base``). A layer's activations saved for backward (``saved_bytes``, per
micro-batch) live from its forward F(l, m) to its backward B(l, m) (MPress II-C, Fig. 1).
*When* the stage peaks decides what a plan saves, so each stage's iteration is walked
event by event (``events.py``: its op order, a forward and a backward event per layer and
micro-batch, the gradients and the backward/forward transients the profile measured) to
give the keep-all bytes that vary, ``keep[e]``, and for a plan

    level[e] = keep[e] - sum_l live[e, l] * movable[l] * (l reduced)        (gone)
             + what is back at e (a swapped layer's bytes its backward holds, measured as
               PressStats.backward_transients' swapped - accumulate; a storage later
               layers save too, from the last saver's backward; a recompute run's layers
               from the run's first up to the layer whose backward runs)
             + forward_change(l) during a reduced layer's own forward (what it holds
               swapped less kept, PressStats.forward_transients)
             + segment and shared-storage pins held at e (below)
    peak[s]  = base[s] - max(keep) + max(level) + received[s]

*received*: a d2d target holds the source's copies for all the source's micro-batches in
flight (MPress III-C: D2D swap spends the peer's spare memory), added whole. A swap never
raises a stage at any event (its bytes are away or back exactly where keep-all holds them),
so swapping every movable layer is the floor (:func:`floor_actions`). Measured on CPU stage
processes (bench/log/2026-11-25-mpress-event-model.md): VGG11's stage 0 and AmoebaNet-D's stage
1 peak in the
*second* micro-batch's backward, where every weight gradient exists and one micro-batch's
activations are already gone; a model that frees ``held x saved`` per reduced layer (the
peak at the end of the forwards) promised 0.1-4% more than the plans freed. The model is
linear in the actions except the maxima and the products a recompute run or a shared
storage makes, which both planners handle exactly (``milp.py``).

**Pinned bytes** (``PressStats.boundaries``, measured by ``profile --press``): a pipeline
holds a stage's input and output micro-batches until backward whatever the plan says
(``PipelineStage.fwd_cache``; the runner leaves them in place), but ``saved_bytes`` counts
them in the layer that first saves them (a block's LayerNorm saves its input, a ReLU its
output). So every ``saved`` above is really ``movable[l] = saved[l] - pinned[l]``, pinned
being the bytes of ``l``'s storages that are its stage's input or output (fixed by the
partitioning). Likewise a recompute segment's checkpoint holds the segment's input: when a
segment starts at layer ``i`` (not its stage's first), the storages passed into ``i``
stay from F(i) to B(i) of every micro-batch, whatever their owner's action (a swapped
owner's copy leaves, the original does not: *segment pins*), and a passed tensor no layer
saves (a conv's output a ReLU reads) is kept alive by the checkpoint although keep-all
frees it. A storage several layers save (``PressStats.shared``: a ReLU's output the next
pooling saves too) is counted for its first saver; swapping that layer moves it for all
of them, but recomputing it frees it only when every layer up to the last saver is
recomputed in the same segment (else it stays until the last saver's backward). Both are
held at the events where those micro-batches are (``Outcome.pinned`` at the peak); the
MILP linearises them exactly. Profiles without ``boundaries`` / ``shared`` (older files) pin
nothing, the earlier, optimistic model (bench/log/2026-11-23-mpress-evaluation.md).

**Time** (seconds per training iteration, MPress III-D's cost model: each optimisation's
own penalty, and a swap is free when its live interval hides it):

* recompute: the layer's forward again in backward and the checkpoint's own work, as
  ``profile --press`` timed a one-layer segment (``PressStats.recompute_seconds``) per
  micro-batch; profiles without it (older files) take ``forward_seconds``, the forward
  alone. Consecutive recomputed layers share one segment in the runner, so summing
  one-layer segments over-states a longer segment's overhead (the safe side);
* swap / d2d: per micro-batch, ``2 * saved / bandwidth`` (out after forward, back before
  backward; host or device-to-device bandwidth), or where ``profile --press`` timed it
  (``PressStats.swap_seconds``) the measured swap of the layer, which also holds the
  fresh allocations and the hooks' own work (a d2d swap: that overhead plus its copies) minus the layer's *live interval* for that
  micro-batch (from the end of its forward to the start of its backward, footnote 1),
  at least 0 (footnote 2). The overlap needs a copy engine beside the compute on a side
  stream, and a prefetch before backward asks (MPress III-E). mcap's runner has neither:
  on CPU stage processes the saved-tensor hooks copy on the compute thread, and on CUDA
  they queue the copies on the compute stream (out after the layer's kernels, back when
  backward first unpacks the storage, ``mcap.runner.press.apply``), so nothing overlaps and a
  swap costs its whole transfer on either device (``overlap=False``, what :func:`problem`
  chooses for every profile; ``problem_from(overlap=True)`` is MPress's own model). On
  the H200 (issue 30) assuming the overlap made every CUDA plan's added time 0.0 while the
  measured windows grew.

Live intervals come from the schedule (:func:`op_times`): ``mcap.core.timeline``'s op
order and dependencies with each stage's forward = the sum of its layers'
``forward_seconds`` and backward = twice that (the usual 1:2 ratio; no transfer time
between stages). Penalties add over layers and micro-batches: the delay when stage
processes share the cores (the CPU runner) or a GPU (``PressStats.gpus`` fewer than the
stages: the processes take turns on it), an upper bound of the critical path's delay
when stages run in parallel. Times are what ``profile --press`` measured: CPU seconds on
the CPU, the GPU's own clock (CUDA events) on CUDA. Recomputation lengthening other layers' live intervals
(III-D's second observation) is ignored, which only over-states swap penalties.

**Checkpoint mode.** With torchgpipe-style checkpointing (``except_last``/``always``) the
activations inside a stage are already recomputed and only stage inputs are kept, so a
plan over per-layer saved activations does not describe the run: :func:`problem` refuses
those profiles and asks for one profiled with ``--checkpoint never``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from mcap.core.errors import McapError
from mcap.core.partition import windows
from mcap.core.press.actions import ACTIONS, LayerAction, PressPlan
from mcap.core.press.events import StageEvents
from mcap.core.press.problems import (  # noqa: F401  (problem, problem_from: importable here)
    Problem, _window_events, pins, problem, problem_from, swap_back,
)
from mcap.core.press.timing import (  # noqa: F401  (live_intervals: importable here)
    BACKWARD_RATIO, live_intervals, op_times,
)


@dataclass(frozen=True)
class Outcome:
    peaks: tuple[int, ...]                   # per stage, after the plan
    added_seconds: float                     # per iteration
    freed: tuple[dict, ...]                  # per stage: {"recompute"|"swap"|"d2d": bytes freed}
    transient: tuple[int, ...]               # per stage
    received: tuple[int, ...]                # per stage: bytes held for d2d sources
    pinned: tuple[int, ...] = ()             # per stage: segment pins added back (docstring)
    # per stage: how much lower keep-all stood at the event where the plan peaks
    shift: tuple[int, ...] = ()

    def fits(self, capacity: int) -> bool:
        return max(self.peaks) <= capacity


def window_floor_drop(schedule: str, chunks: int, s: int, G: int, a: int, z: int, saved,
                      work=(), params=(), shared=(), boundaries=(), transients=(),
                      forward_peaks=()) -> int:
    """How far swapping every layer of window a..z (stage s of G) lowers the stage's peak:
    what :func:`floor_actions` saves there, for ranking many partitionings at once
    (``jointsearch``) without building a :class:`Problem` for each."""
    bal = tuple(x for x in (a, z - a + 1, len(saved) - 1 - z) if x)
    pin_in, pin_out, _ = pins(bal, saved, boundaries)
    mov = np.array([saved[l] - pin_in[l] - pin_out[l] for l in range(a, z + 1)], dtype=np.int64)
    ev = _window_events(schedule, chunks, s, G, a, z, saved, work, params, transients,
                        forward_peaks, boundaries)
    early = [(o - a, k - a, min(n, int(mov[o - a]))) for o, k, n in shared if a <= o < k <= z]
    own = np.array([swap_back(int(mov[l - a]), transients[l] if transients else None)
                    for l in range(a, z + 1)], dtype=np.int64)
    back = _swapped_back(ev, own, early)
    fwd = np.zeros(z - a + 1, dtype=np.int64)
    if forward_peaks:
        for l in range(a, z + 1):
            if mov[l - a] > 0:
                keep, swapped = forward_peaks[l]
                fwd[l - a] = min(0, swapped - keep)
    level = ev.keep - ev.live @ mov + back + np.where(ev.fat >= 0, fwd[np.maximum(ev.fat, 0)], 0)
    return int(ev.keep.max() - level.max())


def _swapped_back(ev: StageEvents, back_own: np.ndarray, early) -> np.ndarray:
    """[E] bytes of swapped layers back at each event: during a layer's own backward
    ``back_own`` (0 for layers not swapped), and a storage later layers save too (``early``:
    local (owner, last saver, bytes), only for swapped owners) from the last saver's
    backward on."""
    back = np.where(ev.at >= 0, back_own[np.maximum(ev.at, 0)], 0)
    for o, k, n in early:
        back = back + np.where((ev.at > o) & (ev.at <= k), n, 0)
    return back


def segment_starts(p: Problem, actions: Sequence[LayerAction]) -> list[int]:
    """Layers that start a recompute segment inside their stage (not its first layer)."""
    stage = p.stage_of()
    return [i for i in range(1, len(actions)) if actions[i].action == "recompute"
            and stage[i - 1] == stage[i] and actions[i - 1].action != "recompute"]


def action_cost(p: Problem, a: LayerAction) -> float:
    return 0.0 if a.action == "keep" else p.costs[a.layer][a.action]


def outcome(p: Problem, actions: Sequence[LayerAction]) -> Outcome:
    """Every stage's peak and the added time under ``actions`` (one per layer, in order):
    the keep-all events of each stage (``events.py``) with what the plan moves away, brings
    back and pins, at the event where the stage's memory is now highest (module docstring)."""
    if len(actions) != len(p.saved):
        raise McapError(f"{len(actions)} actions for {len(p.saved)} layers")
    stage = p.stage_of()
    received = [0] * p.stages
    added = 0.0
    for l, a in enumerate(actions):
        if a.layer != l or a.action not in ACTIONS:
            raise McapError(f"action {a!r} at position {l}")
        if a.action == "keep":
            continue
        s = stage[l]
        if a.action == "d2d":
            if a.target is None or not 0 <= a.target < p.stages or a.target == s:
                raise McapError(f"layer {l} on stage {s}: d2d target {a.target!r} is not "
                                f"another stage of {p.stages}")
            received[a.target] += p.held[s] * p.movable(l)
        added += p.costs[l][a.action]
    starts = set(segment_starts(p, actions))
    peaks, freed, transient, pinned, shift = [], [], [], [], []
    for s in range(p.stages):
        level = _levels(p, actions, s, starts)
        e = int(np.argmax(level.total))
        ev: StageEvents = p.events[s]
        shift.append(int(ev.keep.max() - ev.keep[e]))
        freed.append({k: int(ev.live[e] @ v) for k, v in level.away.items()})
        transient.append(int(level.back[e]))
        pinned.append(int(level.pins[e]))
        peaks.append(p.base[s] - shift[s] - int(level.gone[e]) + transient[s] + pinned[s]
                     + received[s])
    return Outcome(tuple(peaks), added, tuple(freed), tuple(transient), tuple(received),
                   tuple(pinned), tuple(shift))


@dataclass(frozen=True, eq=False)
class _Levels:
    away: dict          # action -> [n] movable bytes of the stage's layers with that action
    gone: np.ndarray    # [E] bytes away at each event
    back: np.ndarray    # [E] reduced bytes back at each event (swapped in, recomputed)
    pins: np.ndarray    # [E] bytes a recompute keeps that keep-all would not (pins)
    total: np.ndarray   # [E] keep-all bytes - gone + back + pins


def _levels(p: Problem, actions: Sequence[LayerAction], s: int, starts) -> _Levels:
    ev: StageEvents = p.events[s]
    layers = list(p.layers(s))
    n = len(layers)
    mov = np.array([p.movable(l) for l in layers], dtype=np.int64)
    act = [actions[l].action for l in layers]
    away = {k: np.where(np.array([x == k for x in act], dtype=bool), mov, 0)
            for k in ACTIONS[1:]}
    gone = ev.live @ (away["recompute"] + away["swap"] + away["d2d"])
    a = layers[0]
    moved = away["swap"] + away["d2d"]
    early = [(o - a, k - a, min(nb, p.movable(o))) for o, k, nb in p.shared
             if a <= o <= layers[-1] and moved[o - a]]
    own = np.array([p.swapped_back(l) if moved[l - a] else 0 for l in layers], dtype=np.int64)
    back = _swapped_back(ev, own, early)
    # during a reduced layer's own forward (swap, d2d or recompute)
    fwd = np.array([p.forward_change(l, act[i]) if act[i] != "keep" else 0
                    for i, l in enumerate(layers)], dtype=np.int64)
    back = back + np.where(ev.fat >= 0, fwd[np.maximum(ev.fat, 0)], 0)
    # a recompute run is rebuilt at its last layer's backward and released layer by layer:
    # during B(j), the run's layers from its first up to j are back
    # (the layer whose backward runs holds what its recomputed backward measured beyond kept)
    run = np.zeros(n + 1, dtype=np.int64)  # run[-1] (= run[n]) = 0 for forward events
    acc = 0
    for i, l in enumerate(layers):
        run[i] = acc + p.recomputed_back(l) if act[i] == "recompute" else 0
        acc = acc + int(mov[i]) if act[i] == "recompute" else 0
    back = back + run[ev.at]
    pin = np.zeros(n, dtype=np.int64)
    for i, g in enumerate(layers):
        if act[i] == "recompute" and (i == 0 or act[i - 1] != "recompute"):
            pin[i] += p.segment_bytes  # every segment's copy of the RNG state, F(i) to B(i)
        if g in starts:  # the checkpoint holds the segment's input from F(i) to B(i)
            for o, nb in p.seg[g]:
                if o == -1:
                    pin[i] += nb
                elif actions[o].action != "keep":
                    pin[i] += min(nb, p.movable(o))
    pins = ev.live @ pin
    for o, k, nb in p.shared:  # later savers keep a recomputed owner's storage to B(k)
        if layers[0] <= o <= layers[-1] and actions[o].action == "recompute" and \
                any(actions[m].action != "recompute" for m in range(o + 1, k + 1)):
            pins = pins + min(nb, p.movable(o)) * ev.live[:, k - layers[0]]
    return _Levels(away, gone, back, pins, ev.keep - gone + back + pins)


def smallest_capacity(p: Problem) -> int:
    """The smallest capacity any plan can meet (the peaks of :func:`floor_actions`)."""
    return max(outcome(p, floor_actions(p)).peaks)


def floor_actions(p: Problem) -> list[LayerAction]:
    """A plan of the smallest peak on every stage: every layer with movable bytes swapped.
    At every event a swapped layer's bytes are away or back exactly where keep-all holds
    them, so a swap never raises a stage's memory; recompute frees the same and brings
    back as much or more (its whole run) and may pin a segment input; d2d only adds to its
    target (checked against brute force in the tests)."""
    return [LayerAction(l, "swap") if p.movable(l) > 0 else LayerAction(l)
            for l in range(len(p.saved))]


def unreachable(p: Problem, capacity: int) -> McapError:
    least = smallest_capacity(p)
    return McapError(f"no plan fits balance {','.join(map(str, p.balance))} under capacity "
                     f"{capacity:,} bytes: the smallest capacity that can be met is {least:,} "
                     f"bytes (activations swapped out wherever that lowers the peak)")


def delay(p: Problem, actions: Sequence[LayerAction]) -> float:
    """The wall-clock seconds ``actions`` add to one iteration: every stage's forward and
    backward of each micro-batch lengthened by its layers' penalties (a recompute in the
    backward, a swap half out in the forward and half back in the backward), run through
    the schedule (:func:`op_times`); the makespan's growth. Where fewer stage processes run
    at once than there are stages (``Problem.parallel``: CPU stage processes sharing the
    cores), the added work spread over the cores is a lower bound too. Not what the
    planners minimise (``Outcome.added_seconds``, the work summed over stages, an upper
    bound of this), but what a user waits."""
    stage = p.stage_of()
    f_add, b_add = [0.0] * p.stages, [0.0] * p.stages
    for l, a in enumerate(actions):
        if a.action == "keep":
            continue
        per_mb = p.costs[l][a.action] / p.chunks
        if a.action == "recompute":
            b_add[stage[l]] += per_mb
        else:
            f_add[stage[l]] += per_mb / 2
            b_add[stage[l]] += per_mb / 2
    fwd = [sum(p.forward[a:z + 1]) for a, z in windows(p.balance)]
    before = _makespan(p, fwd, [BACKWARD_RATIO * x for x in fwd])
    after = _makespan(p, [x + y for x, y in zip(fwd, f_add)],
                      [BACKWARD_RATIO * x + y for x, y in zip(fwd, b_add)])
    out = max(0.0, after - before)
    if p.parallel and p.parallel < p.stages:
        out = max(out, (sum(f_add) + sum(b_add)) * p.chunks / p.parallel)
    return out


def _makespan(p: Problem, fwd: Sequence[float], bwd: Sequence[float]) -> float:
    t = op_times(p.balance, p.schedule, p.chunks, fwd, bwd)
    return max(end for _, end in t.values())


def to_plan(p: Problem, actions: Sequence[LayerAction], method: str,
            capacity: Optional[int]) -> PressPlan:
    """The ``mcap.press/1`` record of ``actions`` with its predicted peaks, added time
    (:func:`delay`) and work (the planners' objective)."""
    o = outcome(p, actions)
    stages = tuple(tuple(actions[l] for l in p.layers(s)) for s in range(p.stages))
    return PressPlan(p.model, p.balance, stages, capacity, method, o.peaks,
                     delay(p, actions), o.added_seconds)


def keep(p: Problem) -> list[LayerAction]:
    return [LayerAction(l) for l in range(len(p.saved))]
