"""MPress's memory and time model for one partitioning (MPress II-C, III-A, III-D). Pure.

A :class:`Problem` is everything a planner needs; :func:`outcome` says what an assignment of
actions (``mcap.core.pressplan``: keep, recompute, swap, d2d) does to every device. Both
planners (``mpress.py``, ``milp.py``) and every report use this one function, so they agree.

**Memory** (per stage s, bytes). ``base[s]`` is the stage's predicted peak with every layer
kept (the profile's predictor, ``mcap.core.recommend.costs_of``). A layer's activations
saved for backward (``saved_bytes``, per micro-batch) live from its forward to its backward
for every micro-batch in flight on the stage (MPress II-C, Fig. 1; ``held[s]``: GPipe all
``chunks``, 1F1B ``min(chunks, stages - s)``, ``mcap.core.timeline.max_in_flight``). Then

    peak[s] = base[s] - held[s] * sum(saved of s's non-keep layers)      (freed)
              + max(saved of two adjacent non-keep layers of s)           (transient)
              + sum(held[t] * saved of layers of other stages t with d2d -> s)   (received)

*freed*: recompute drops them, swap moves them to host memory, d2d to the target stage;
*transient*: in backward a reduced layer's activations are back (recomputed or swapped in)
for one micro-batch; measured on GPT, two adjacent reduced layers are back together (a
storage a layer shares with its neighbour is restored at the neighbour's backward and kept
until its own: BENCHMARKS.md, "Real plans"), so the transient is the largest sum of
saved bytes over one reduced layer or two adjacent reduced layers of the stage; when
``profile --press`` measured it (``PressStats.backward_bytes``), the reduced layer's own
term also counts its backward working bytes (the gradients of its inputs and its
intermediate gradients; not its parameters' gradients, which keep-all allocates too):
with layers reduced a stage's peak moves from the end of the forwards into a backward,
where keep-all's backward had released more than that working set but the plan's has not
(BENCHMARKS.md "MPress evaluation"). It is an upper bound for a layer followed by kept
layers on its stage (their first micro-batch's bytes are released by then; not counted,
so the model stays linear). Older profiles without it get saved bytes alone;
*received*: a d2d target holds the source's copies for all the source's micro-batches in
flight (MPress III-C: D2D swap spends the peer's spare memory). The model is additive in
the actions except the transient (a max), which both planners handle exactly.

**Pinned bytes** (``PressStats.boundaries``, measured by ``profile --press``): a pipeline
holds a stage's input and output micro-batches until backward whatever the plan says
(``PipelineStage.fwd_cache``; the runner leaves them in place), but ``saved_bytes`` counts
them in the layer that first saves them (a block's LayerNorm saves its input, a ReLU its
output). So every ``saved`` above is really ``movable[l] = saved[l] - pinned[l]``, pinned
being the bytes of ``l``'s storages that are its stage's input or output (fixed by the
partitioning, so the model stays additive). Likewise a recompute segment's checkpoint holds
the segment's input: when a segment starts at layer ``i`` (not its stage's first), the
storages passed into ``i`` stay, whatever their owner's action (a swapped owner's copy
leaves, the original does not), so ``held[s]`` times their bytes are added back
(*segment pins*), and a passed tensor no layer saves (a conv's output a ReLU reads) is kept
alive by the checkpoint although keep-all frees it, so it costs ``held[s]`` times its bytes.
A storage several layers save (``PressStats.shared``: a ReLU's output the next pooling
saves too) is counted for its first saver; swapping that layer moves it for all of them,
but recomputing it frees it only when every layer up to the last saver is recomputed in
the same segment. All three are added back per stage (``Outcome.pinned``); the MILP
linearises them exactly. Profiles without ``boundaries`` / ``shared`` (older files) pin
nothing, the earlier, optimistic model (BENCHMARKS.md).

**Time** (seconds per training iteration, MPress III-D's cost model: each optimisation's
own penalty, and a swap is free when its live interval hides it):

* recompute: the layer's forward again in backward, ``forward_seconds`` per micro-batch;
* swap / d2d: per micro-batch, ``2 * saved / bandwidth`` (out after forward, back before
  backward; host or device-to-device bandwidth) minus the layer's *live interval* for that
  micro-batch (from the end of its forward to the start of its backward, footnote 1),
  at least 0 (footnote 2). The overlap needs a copy engine beside the compute (CUDA side
  streams, MPress III-E); on CPU stage processes the saved-tensor hooks copy on the
  compute thread, so nothing overlaps and a swap costs its whole transfer
  (``overlap=False``, what :func:`problem` chooses for ``Setup.device == "cpu"``).

Live intervals come from the schedule (:func:`op_times`): ``mcap.core.timeline``'s op
order and dependencies with each stage's forward = the sum of its layers'
``forward_seconds`` and backward = twice that (the usual 1:2 ratio; no transfer time
between stages). Penalties add over layers and micro-batches: the delay when stage
processes share the cores (the CPU runner), an upper bound of the critical path's delay
when stages run in parallel. Recomputation lengthening other layers' live intervals
(III-D's second observation) is ignored, which only over-states swap penalties.

**Checkpoint mode.** With torchgpipe-style checkpointing (``except_last``/``always``) the
activations inside a stage are already recomputed and only stage inputs are kept, so a
plan over per-layer saved activations does not describe the run: :func:`problem` refuses
those profiles and asks for one profiled with ``--checkpoint never``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from mcap.core.errors import McapError
from mcap.core.partition import validate, windows
from mcap.core.pressplan import ACTIONS, LayerAction, PressPlan
from mcap.core.timeline import max_in_flight, op_order
from mcap.core.types import Profile

BACKWARD_RATIO = 2.0  # backward time / forward time of a stage (no measurement of it yet)


@dataclass(frozen=True)
class Problem:
    """One partitioning's planning problem (module docstring). Layers are global indices."""
    model: str
    balance: tuple[int, ...]
    base: tuple[int, ...]           # keep-all predicted peak per stage, bytes
    held: tuple[int, ...]           # micro-batches in flight per stage
    saved: tuple[int, ...]          # per layer, bytes per micro-batch
    forward: tuple[float, ...]      # per layer, seconds per micro-batch
    chunks: int
    costs: tuple[dict, ...]         # per layer: {"recompute": s, "swap": s, "d2d": s} per iteration
    live: tuple[float, ...]         # per layer: shortest live interval over micro-batches, s
    capacity: Optional[int] = None
    pinned: tuple[int, ...] = ()    # per layer: bytes of saved held as stage input/output
    seg: tuple = ()                 # per layer i: ((owner, bytes), ...) passed into i, same stage
    shared: tuple = ()              # ((owner, last saver, bytes), ...), both on one stage
    work: tuple[int, ...] = ()      # per layer: measured backward bytes (PressStats.backward_bytes)

    def movable(self, l: int) -> int:
        """Bytes reducing layer ``l`` can move out (module docstring, pinned bytes)."""
        return self.saved[l] - (self.pinned[l] if self.pinned else 0)

    def restored(self, l: int) -> int:
        """Bytes reduced layer ``l``'s own backward adds at its height: its movable bytes
        back plus its measured backward working bytes (module docstring, transient)."""
        return self.movable(l) + (self.work[l] if self.work else 0)

    @property
    def stages(self) -> int:
        return len(self.balance)

    def stage_of(self) -> tuple[int, ...]:
        return tuple(s for s, n in enumerate(self.balance) for _ in range(n))

    def layers(self, s: int) -> range:
        a, z = windows(self.balance)[s]
        return range(a, z + 1)


@dataclass(frozen=True)
class Outcome:
    peaks: tuple[int, ...]                   # per stage, after the plan
    added_seconds: float                     # per iteration
    freed: tuple[dict, ...]                  # per stage: {"recompute"|"swap"|"d2d": bytes freed}
    transient: tuple[int, ...]               # per stage
    received: tuple[int, ...]                # per stage: bytes held for d2d sources
    pinned: tuple[int, ...] = ()             # per stage: segment pins added back (docstring)

    def fits(self, capacity: int) -> bool:
        return max(self.peaks) <= capacity


def op_times(balance: Sequence[int], schedule: str, chunks: int,
             stage_forward: Sequence[float]) -> dict:
    """(kind, stage, micro-batch) -> (start, end) seconds of one iteration: the op order of
    ``mcap.core.timeline`` with real durations (forward per stage, backward x2)."""
    G = len(balance)
    orders = [list(op_order(schedule, s, G, chunks)) for s in range(G)]
    done, out, free, cursor = {}, {}, [0.0] * G, [0] * G
    while any(cursor[s] < len(orders[s]) for s in range(G)):
        moved = False
        for s in range(G):
            if cursor[s] >= len(orders[s]):
                continue
            kind, m = orders[s][cursor[s]]
            first = (kind == "F" and s == 0) or (kind == "B" and s == G - 1)
            dep = ("F", s - 1, m) if kind == "F" else ("B", s + 1, m)
            if not first and dep not in done:
                continue
            start = max(free[s], 0.0 if first else done[dep])
            dur = stage_forward[s] * (1.0 if kind == "F" else BACKWARD_RATIO)
            out[(kind, s, m)] = (start, start + dur)
            done[(kind, s, m)] = free[s] = start + dur
            cursor[s] += 1
            moved = True
        if not moved:
            raise McapError(f"schedule {schedule!r} deadlocks with {G} stages, {chunks} chunks")
    return out


def live_intervals(balance, schedule, chunks, forward) -> tuple[tuple[float, ...], ...]:
    """Per layer, per micro-batch: seconds from the end of its forward to the start of its
    backward on its stage (MPress III-D footnote 1)."""
    stage_fwd = [sum(forward[a:z + 1]) for a, z in windows(balance)]
    t = op_times(balance, schedule, chunks, stage_fwd)
    out = []
    for s, (a, z) in enumerate(windows(balance)):
        done_fwd = 0.0
        for l in range(a, z + 1):
            done_fwd += forward[l]
            after = stage_fwd[s] - done_fwd  # layers after l: backwarded before l
            out.append(tuple((t[("B", s, m)][0] + BACKWARD_RATIO * after)
                             - (t[("F", s, m)][0] + done_fwd) for m in range(chunks)))
    return tuple(out)


def swap_penalty(nbytes: int, bandwidth: float, live: Sequence[float]) -> float:
    """Seconds a swap adds over the micro-batches: transfer out and back beyond the live interval."""
    if nbytes == 0:
        return 0.0
    transfer = 2.0 * nbytes / bandwidth
    return sum(max(0.0, transfer - x) for x in live)


def problem(profile: Profile, balance: Sequence[int], capacity: Optional[int] = None,
            predictor: Optional[str] = None) -> Problem:
    """The planning problem of ``balance`` from a profile with MPress statistics."""
    from mcap.core.recommend import costs_of
    check_profile(profile)
    if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int)
                                 or capacity <= 0):
        raise McapError(f"capacity must be a positive number of bytes, got {capacity!r}")
    part = validate(balance, profile.model.num_layers)
    base = costs_of(profile, predictor).peaks(part.balance)
    return problem_from(profile.model.spec, part.balance, base, profile.setup.schedule,
                        profile.setup.chunks, profile.press.saved_bytes,
                        profile.press.forward_seconds, profile.press.host_bandwidth,
                        profile.press.d2d_bandwidth, capacity,
                        overlap=profile.setup.device == "cuda",
                        boundaries=profile.press.boundaries, shared=profile.press.shared,
                        work=profile.press.backward_bytes)


def check_profile(profile: Profile) -> None:
    """Refuse a profile a plan cannot be made from, naming what to run instead."""
    if profile.press is None:
        raise McapError(f"the profile of {profile.model.spec} has no MPress statistics (saved "
                        "activation bytes, forward times, bandwidths); add them with "
                        "`python -m mcap profile ... --checkpoint never --press`")
    if profile.setup.checkpoint != "never":
        raise McapError(f"the profile was measured with checkpoint {profile.setup.checkpoint!r}: "
                        "its stages already recompute their activations, so a per-layer plan "
                        "does not describe them; profile with --checkpoint never")


def problem_from(model: str, balance, base, schedule: str, chunks: int, saved, forward,
                 host_bandwidth: float, d2d_bandwidth: float,
                 capacity: Optional[int] = None, overlap: bool = True,
                 boundaries: Sequence = (), shared: Sequence = (),
                 work: Sequence = ()) -> Problem:
    """The problem from bare numbers (tests, benchmarks, scaling); ``overlap``: transfers
    may hide in live intervals (a device with copy engines, module docstring);
    ``boundaries``: ``PressStats.boundaries`` (empty: nothing pinned); ``work``:
    ``PressStats.backward_bytes`` (empty: the transient counts saved bytes alone)."""
    balance = tuple(int(n) for n in balance)
    if len(saved) != sum(balance) or len(forward) != sum(balance):
        raise McapError(f"{len(saved)} saved sizes and {len(forward)} forward times for "
                        f"{sum(balance)} layers (balance {','.join(map(str, balance))})")
    if len(base) != len(balance):
        raise McapError(f"{len(base)} stage peaks for {len(balance)} stages")
    if work and len(work) != len(saved):
        raise McapError(f"{len(work)} backward sizes for {len(saved)} layers")
    if not (host_bandwidth > 0 and d2d_bandwidth > 0):
        raise McapError(f"bandwidths must be > 0 bytes/s, got host {host_bandwidth!r}, "
                        f"d2d {d2d_bandwidth!r}")
    pin_in, pin_out, seg = pins(balance, saved, boundaries)
    live = live_intervals(balance, schedule, chunks, forward)
    if not overlap:
        live = tuple(tuple(0.0 for _ in per) for per in live)
    # A swap moves the movable bytes out and back; a pinned output is copied out once and
    # its copy dropped when the forward returns (mcap.runner.press), a pinned input never.
    moved = [saved[l] - pin_in[l] - pin_out[l] for l in range(len(saved))]
    costs = tuple({"recompute": forward[l] * chunks,
                   "swap": swap_penalty(moved[l] + pin_out[l] / 2, host_bandwidth, live[l]),
                   "d2d": swap_penalty(moved[l] + pin_out[l] / 2, d2d_bandwidth, live[l])}
                  for l in range(len(saved)))
    return Problem(model, balance, tuple(int(b) for b in base),
                   max_in_flight(schedule, len(balance), chunks), tuple(int(x) for x in saved),
                   tuple(float(x) for x in forward), chunks, costs,
                   tuple(min(x) for x in live), capacity,
                   tuple(int(a + b) for a, b in zip(pin_in, pin_out)), seg,
                   tuple((int(o), int(k), int(n)) for o, k, n in shared
                         if 0 <= o < k < len(saved) and _same_stage(balance, o, k)),
                   tuple(int(x) for x in work))


def _same_stage(balance, a: int, b: int) -> bool:
    return any(lo <= a and b <= hi for lo, hi in windows(balance))


def pins(balance: Sequence[int], saved: Sequence[int], boundaries: Sequence):
    """Per layer: bytes pinned as its stage's input, as its stage's output (both capped at
    the layer's ``saved``), and the (owner, bytes) passed into it from its own stage (what a
    recompute segment starting there pins). Module docstring, pinned bytes."""
    L = len(saved)
    pin_in, pin_out, seg = [0] * L, [0] * L, [()] * L
    if not boundaries:
        return pin_in, pin_out, tuple(seg)
    if len(boundaries) != L + 1:
        raise McapError(f"{len(boundaries)} boundaries for {L} layers (expected {L + 1})")
    for a, z in windows(balance):
        for b, side in ((a, pin_in), (z + 1, pin_out)):
            for owner, nbytes in boundaries[b]:
                if a <= owner <= z:
                    side[owner] += nbytes
        for i in range(a + 1, z + 1):
            seg[i] = tuple((o, n) for o, n in boundaries[i] if a <= o <= z or o == -1)
    for l in range(L):
        pin_in[l] = min(pin_in[l], saved[l])
        pin_out[l] = min(pin_out[l], saved[l] - pin_in[l])
    return pin_in, pin_out, tuple(seg)


def segment_starts(p: Problem, actions: Sequence[LayerAction]) -> list[int]:
    """Layers that start a recompute segment inside their stage (not its first layer)."""
    stage = p.stage_of()
    return [i for i in range(1, len(actions)) if actions[i].action == "recompute"
            and stage[i - 1] == stage[i] and actions[i - 1].action != "recompute"]


def action_cost(p: Problem, a: LayerAction) -> float:
    return 0.0 if a.action == "keep" else p.costs[a.layer][a.action]


def outcome(p: Problem, actions: Sequence[LayerAction]) -> Outcome:
    """Every stage's peak and the added time under ``actions`` (one per layer, in order)."""
    if len(actions) != len(p.saved):
        raise McapError(f"{len(actions)} actions for {len(p.saved)} layers")
    stage = p.stage_of()
    freed = [{k: 0 for k in ACTIONS[1:]} for _ in p.balance]
    transient = [0] * p.stages
    received = [0] * p.stages
    added = 0.0
    for l, a in enumerate(actions):
        if a.layer != l or a.action not in ACTIONS:
            raise McapError(f"action {a!r} at position {l}")
        if a.action == "keep":
            continue
        s = stage[l]
        freed[s][a.action] += p.held[s] * p.movable(l)
        pair = p.movable(l - 1) if l > 0 and stage[l - 1] == s and actions[l - 1].action != "keep" else 0
        transient[s] = max(transient[s], p.restored(l) + pair)
        if a.action == "d2d":
            if a.target is None or not 0 <= a.target < p.stages or a.target == s:
                raise McapError(f"layer {l} on stage {s}: d2d target {a.target!r} is not "
                                f"another stage of {p.stages}")
            received[a.target] += p.held[s] * p.movable(l)
        added += p.costs[l][a.action]
    pinned = [0] * p.stages
    if p.seg:
        for i in segment_starts(p, actions):
            for o, n in p.seg[i]:
                if o == -1:  # saved by no layer: keep-all frees it, the checkpoint keeps it
                    pinned[stage[i]] += p.held[stage[i]] * n
                elif actions[o].action != "keep":
                    pinned[stage[i]] += p.held[stage[i]] * min(n, p.movable(o))
    for o, k, n in p.shared:
        if actions[o].action == "recompute" and \
                any(actions[m].action != "recompute" for m in range(o + 1, k + 1)):
            pinned[stage[o]] += p.held[stage[o]] * min(n, p.movable(o))
    peaks = tuple(p.base[s] - sum(freed[s].values()) + transient[s] + received[s] + pinned[s]
                  for s in range(p.stages))
    return Outcome(peaks, added, tuple(freed), tuple(transient), tuple(received), tuple(pinned))


def smallest_capacity(p: Problem) -> int:
    """The smallest capacity any plan can meet (the peaks of :func:`floor_actions`)."""
    return max(outcome(p, floor_actions(p)).peaks)


def floor_actions(p: Problem) -> list[LayerAction]:
    """A plan of the smallest peak on every stage: swaps only (nothing frees more than swap,
    it pins nothing a recompute segment would, and d2d only adds to the target; checked
    against brute force in the tests). Without measured backward bytes that is every layer
    swapped (reducing a layer adds at most its movable bytes to the transient and frees
    ``held`` >= 1 times them). With them a layer whose working bytes outweigh what it
    frees is better kept, so per stage and per transient bound ``T`` (every value a
    reduced layer's term can take) a chain DP picks the swaps that free the most with every
    term <= ``T``; the stage keeps the best ``T``."""
    acts = keep(p)
    for s in range(p.stages):
        layers = list(p.layers(s))
        terms = {0}
        for j, l in enumerate(layers):
            terms.add(p.restored(l))
            if j:
                terms.add(p.restored(l) + p.movable(layers[j - 1]))
        best = (p.base[s], [])
        for t in sorted(terms):
            freed, chosen = _most_freed(p, layers, t)
            peak = p.base[s] - p.held[s] * freed + _transient(p, layers, chosen)
            if peak < best[0]:
                best = (peak, chosen)
        for l in best[1]:
            acts[l] = LayerAction(l, "swap")
    return acts


def _transient(p: Problem, layers, chosen) -> int:
    on = set(chosen)
    return max((p.restored(l) + (p.movable(layers[j - 1]) if j and layers[j - 1] in on else 0)
                for j, l in enumerate(layers) if l in on), default=0)


def _most_freed(p: Problem, layers, bound: int) -> tuple[int, list[int]]:
    """The swaps of ``layers`` (one stage) freeing the most movable bytes with every
    transient term (``restored(l)``, plus the previous layer's movable bytes when it is
    swapped too) at most ``bound``: a DP over the chain, state = previous layer swapped."""
    NEG = -1
    # best[k] = (freed, chosen) with the last layer seen swapped (k=1) or kept (k=0)
    best = [(0, []), (NEG, [])]
    for j, l in enumerate(layers):
        kept = max(best, key=lambda x: x[0])
        new_swap = (NEG, [])
        if p.restored(l) <= bound and best[0][0] >= 0:
            new_swap = (best[0][0] + p.movable(l), best[0][1] + [l])
        if j and best[1][0] >= 0 and p.restored(l) + p.movable(layers[j - 1]) <= bound:
            cand = (best[1][0] + p.movable(l), best[1][1] + [l])
            if cand[0] > new_swap[0]:
                new_swap = cand
        best = [kept, new_swap]
    return max(best, key=lambda x: x[0])


def unreachable(p: Problem, capacity: int) -> McapError:
    least = smallest_capacity(p)
    return McapError(f"no plan fits balance {','.join(map(str, p.balance))} under capacity "
                     f"{capacity:,} bytes: the smallest capacity that can be met is {least:,} "
                     f"bytes (activations swapped out wherever that lowers the peak)")


def to_plan(p: Problem, actions: Sequence[LayerAction], method: str,
            capacity: Optional[int]) -> PressPlan:
    """The ``mcap.press/1`` record of ``actions`` with its predicted peaks and added time."""
    o = outcome(p, actions)
    stages = tuple(tuple(actions[l] for l in p.layers(s)) for s in range(p.stages))
    return PressPlan(p.model, p.balance, stages, capacity, method, o.peaks, o.added_seconds)


def keep(p: Problem) -> list[LayerAction]:
    return [LayerAction(l) for l in range(len(p.saved))]
