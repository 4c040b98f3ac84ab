"""Pipeline memory over one iteration, for the teaching view ("Pipeline memory, explained").

Pure: no torch, no files. One training iteration of a pipeline, drawn from the schedule's
action list (``mcap.core.schedules.actions.ActionList``: the order torch runs, the one the
runner executes and the predictor counts; DESIGN.md, "Every schedule is one action list"):
when each device runs which forward and backward, which micro-batches each of its chunks
holds at each time step, and the memory level that follows. There is no order per schedule
here: every count below is read off the list.

- ``actions.replay`` aligns the list in time: each action starts once its device is free and
  its input is ready (F after the previous chunk's F, a backward after the next chunk's);
  a forward takes 1 step, a backward 2 (the backward for inputs I and for weights W of a
  zero-bubble schedule 1 each: :data:`DURATIONS`);
- a chunk keeps what a micro-batch's backward needs from the start of its forward until its
  backward has run there: the end of B, or under a split backward the end of W (W needs the
  layers' inputs; ``actions.rank_events``' ``forwarded`` + ``inputs_done``);
- with checkpointing (torchgpipe's modes, paper 3.2) a checkpointed micro-batch keeps only the
  chunk's input and its activations come back during its backward (recomputed), from the
  start of B (or I) to the end of B (or W); ``except_last`` checkpoints every micro-batch
  but the last (``mcap.runner.train.Recomputed``).

Memory levels come from :class:`StageMemory`, one per chunk, which :func:`stage_memory`
calibrates from a partitioning's per-chunk peaks at the setup the profile measured (see
there for what the profile cannot tell). A device's level is the sum over its chunks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from mcap.core.errors import InvalidPartitioning, McapError
from mcap.core.schedules.actions import ActionList, replay
from mcap.core.setup import checkpoint_modes

DURATIONS = {"F": 1, "B": 2, "I": 1, "W": 1}  # time steps per action kind


@dataclass(frozen=True)
class StageMemory:
    """Memory model of one chunk (a stage of the schedule) for the simulation, in bytes.

    ``per_microbatch``: what a micro-batch that is *not* checkpointed keeps on the chunk from
    its forward to its backward (its activations and working buffers). ``recompute``: what a
    checkpointed micro-batch's backward brings back for the length of that backward (its
    activations, recomputed). ``kept_input``: what a checkpointed micro-batch keeps while in
    flight (the chunk's input; 0 where the profile cannot tell). ``fixed``: bytes held the
    whole iteration besides the parameter state (what an even split per micro-batch leaves
    over, so the calibrated peak is the given one to the byte)."""
    static: int          # weights, gradients, optimizer state: held the whole iteration
    per_microbatch: int
    param_bytes: int = 0  # the chunk's parameters: splits ``static`` into its parts
    state_copies: int = 3  # weights + gradients + optimizer copies of the parameters
    recompute: int = 0
    kept_input: int = 0
    fixed: int = 0


@dataclass(frozen=True)
class Op:
    """One action of the list on one device, [start, end) in time steps: F, B, I or W of
    ``microbatch`` on ``chunk`` (torch's stage index)."""
    device: int
    kind: str
    microbatch: int
    start: int
    end: int
    chunk: int = 0

    @property
    def label(self) -> str:
        return f"{self.kind}{self.microbatch}"


Held = tuple  # tuple[tuple[int, int], ...]: (chunk, micro-batch) pairs


@dataclass(frozen=True)
class Timeline:
    balance: tuple[int, ...]                       # layers per chunk
    schedule: str
    chunks: int                                    # micro-batches, M
    steps: int
    ops: tuple[Op, ...]                            # by start, then device
    held: tuple[tuple[Held, ...], ...]             # [device][step] -> (chunk, mb) held
    memory: tuple[tuple[int, ...], ...]            # [device][step] -> bytes
    stage_memory: tuple[StageMemory, ...]          # per chunk
    checkpoint: str = "never"
    placement: tuple[tuple[int, ...], ...] = ()    # [device] -> its chunks
    waiting: tuple[tuple[Held, ...], ...] = ()     # [device][step] -> held, I done, W not

    @property
    def stages(self) -> int:
        """Devices (ranks)."""
        return len(self.memory)

    @property
    def virtual(self) -> int:
        return max(1, len(self.balance) // max(1, self.stages))

    @property
    def peaks(self) -> tuple[int, ...]:
        return tuple(max(levels) for levels in self.memory)

    @property
    def peak_steps(self) -> tuple[int, ...]:
        """The first step at which each device reaches its peak."""
        return tuple(levels.index(max(levels)) for levels in self.memory)

    @property
    def max_in_flight(self) -> tuple[int, ...]:
        """Per device, the most micro-batches held at once over its chunks."""
        return tuple(max(len(h) for h in per_step) for per_step in self.held)

    def checkpointed(self, microbatch: int, chunk: int = 0) -> bool:
        """Whether ``microbatch`` keeps only its input on ``chunk`` and recomputes in its
        backward."""
        modes = checkpoint_modes(self.checkpoint, len(self.balance))
        return checkpointed(modes[chunk], microbatch, self.chunks)

    def running(self, device: int, step: int) -> tuple[Op, ...]:
        """The ops of ``device`` running at ``step``."""
        return tuple(o for o in self.ops if o.device == device and o.start <= step < o.end)

    def chunk_of_device(self, device: int) -> tuple[int, ...]:
        return self.placement[device] if self.placement else (device,)


def checkpointed(mode: str, microbatch: int, chunks: int) -> bool:
    """torchgpipe's checkpoint modes over micro-batches (``mcap.runner.train.Recomputed``):
    ``always`` every one, ``except_last`` all but the last, ``never`` none."""
    return mode == "always" or (mode == "except_last" and microbatch < chunks - 1)


def simulate(al: ActionList, balance: Sequence[int], stage_memory: Sequence[StageMemory], *,
             checkpoint: str = "never", durations: Optional[dict] = None) -> Timeline:
    """One iteration of ``al`` over chunks of ``balance`` layers (module docstring): the ops in
    time (``actions.replay`` with integer ``durations`` per kind), what each device holds at
    each step and its level: per chunk its static and fixed bytes, what every micro-batch it
    holds keeps (``per_microbatch``, or ``kept_input`` when checkpointed), and ``recompute``
    while the backward of a checkpointed micro-batch runs there."""
    balance = tuple(int(n) for n in balance)
    steps_of = {**DURATIONS, **(durations or {})}
    _check(al, balance, stage_memory, steps_of, checkpoint)
    timed = replay(al, {k: float(v) for k, v in steps_of.items()})
    ops = tuple(sorted((Op(t.rank, t.action.kind, t.action.microbatch, int(round(t.start)),
                           int(round(t.end)), t.action.stage) for t in timed),
                       key=lambda o: (o.start, o.device, o.end)))
    steps = max(o.end for o in ops)
    modes = checkpoint_modes(checkpoint, al.num_chunks)
    spans = _spans(ops)
    held, waiting, memory = [], [], []
    for d, chunks in enumerate(al.placement):
        h, w, levels = _device_levels(chunks, al.chunks, steps, spans, stage_memory, modes)
        held.append(h)
        waiting.append(w)
        memory.append(levels)
    return Timeline(balance, al.schedule, al.chunks, steps, ops, tuple(held), tuple(memory),
                    tuple(stage_memory), checkpoint, tuple(al.placement), tuple(waiting))


def _check(al: ActionList, balance: tuple, stage_memory, durations: dict,
           checkpoint: str) -> None:
    """Refuse what :func:`simulate` cannot simulate, naming the values."""
    if not balance or any(n <= 0 for n in balance):
        raise InvalidPartitioning(f"balance {list(balance)} needs at least one layer on every stage")
    if len(balance) != al.num_chunks:
        raise InvalidPartitioning(
            f"balance {'-'.join(map(str, balance))} has {len(balance)} stages, but {al.schedule} "
            f"with {al.stages} devices x {al.virtual} stages per device runs {al.num_chunks}")
    if len(stage_memory) != al.num_chunks:
        raise McapError(f"{len(stage_memory)} stage memory models given for {al.num_chunks} stages")
    for kind, n in durations.items():
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise McapError(f"a {kind} takes {n!r} steps: a whole number of at least 1")
    checkpoint_modes(checkpoint, al.num_chunks)  # McapError naming a bad mode


def _spans(ops: Sequence[Op]) -> dict:
    """(chunk, mb) -> (forward start, backward start, backward end, end of I or None): held
    from the forward's start to the end of B (or of W, when the backward is split);
    recomputing from the start of B (or I) to that end; waiting for W from the end of I."""
    first, back_start, back_end, inputs = {}, {}, {}, {}
    for o in ops:
        key = (o.chunk, o.microbatch)
        if o.kind == "F":
            first[key] = o.start
            continue
        if o.kind in ("B", "I"):
            back_start[key] = o.start
        if o.kind == "I":
            inputs[key] = o.end
        back_end[key] = max(back_end.get(key, 0), o.end)
    return {k: (first[k], back_start[k], back_end[k], inputs.get(k)) for k in first}


def _device_levels(chunks: Sequence[int], M: int, steps: int, spans: dict,
                   stage_memory: Sequence[StageMemory], modes: Sequence[str]):
    """One device's held pairs, pairs waiting for W, and bytes at each step."""
    held, waiting, levels = [], [], []
    base = sum(stage_memory[c].static + stage_memory[c].fixed for c in chunks)
    for t in range(steps):
        h, w, level = [], [], base
        for c in chunks:
            sm = stage_memory[c]
            for m in range(M):
                f, b0, b1, i1 = spans[(c, m)]
                if not f <= t < b1:
                    continue
                h.append((c, m))
                ck = checkpointed(modes[c], m, M)
                level += sm.kept_input if ck else sm.per_microbatch
                if ck and t >= b0:
                    level += sm.recompute
                if i1 is not None and t >= i1:
                    w.append((c, m))
        held.append(tuple(h))
        waiting.append(tuple(w))
        levels.append(level)
    return tuple(held), tuple(waiting), tuple(levels)


def stage_memory(balance: Sequence[int], param_bytes: Sequence[int],
                 predicted_peaks: Sequence[int], profiled: ActionList,
                 state_copies: int = 3, checkpoint: str = "never") -> tuple[StageMemory, ...]:
    """Calibrate each chunk's memory model from its predicted peak at the setup the profile
    measured (``profiled``: the profile's schedule, one chunk per device, its micro-batch
    count; ``checkpoint``), so the simulated peak of that setup equals the given one to the
    byte.

    ``static`` is the chunk's parameter bytes times ``state_copies`` (weights, gradients, and
    one momentum buffer for SGD with momentum; 4 for Adam). The rest of the peak is what the
    micro-batches hold, shared equally among the micro-batches whose activations the chunk
    holds at its peak under ``profiled`` (without checkpointing all in flight; with
    ``except_last`` two: the last one's, kept, while an earlier one recomputes in its
    backward), read off the list with one byte per micro-batch.

    What a peak cannot tell (a profile measures one number per stage): the bytes of a kept
    stage input (``kept_input`` stays 0); how the rest splits into activations and working
    buffers that do not grow with the micro-batches; and, for a device holding several
    chunks, whether their buffers and workspaces add up or are shared (each chunk's are
    counted as if it were a device of its own). The page says so.
    """
    balance = tuple(int(n) for n in balance)
    if len(param_bytes) != sum(balance):
        raise McapError(f"balance sums to {sum(balance)} but {len(param_bytes)} layer sizes were given")
    if len(predicted_peaks) != len(balance):
        raise McapError(f"{len(predicted_peaks)} predicted peaks for {len(balance)} stages")
    if profiled.virtual != 1 or profiled.num_chunks != len(balance):
        raise McapError(f"the levels are calibrated on the profile's own schedule with one "
                        f"stage per device and {len(balance)} stages, not {profiled.schedule} "
                        f"with {profiled.stages} x {profiled.virtual}")
    modes = checkpoint_modes(checkpoint, len(balance))
    M = profiled.chunks
    recomputing = [any(checkpointed(mode, m, M) for m in range(M)) for mode in modes]
    unit = tuple(StageMemory(0, 1, recompute=1 if r else 0) for r in recomputing)
    units = simulate(profiled, balance, unit, checkpoint=checkpoint).peaks
    out, start = [], 0
    for s, n in enumerate(balance):
        params = sum(param_bytes[start:start + n])
        start += n
        peak = int(predicted_peaks[s])
        static = min(state_copies * params, peak)
        rest = peak - static
        each = rest // max(units[s], 1)
        out.append(StageMemory(static=static, per_microbatch=each, param_bytes=params,
                               state_copies=state_copies,
                               recompute=each if recomputing[s] else 0,
                               fixed=rest - each * max(units[s], 1)))
    return tuple(out)
