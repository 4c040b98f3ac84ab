"""Pipeline memory over one iteration, for the teaching view ("Pipeline memory, explained").

Pure: no torch, no files. A discrete-time simulation of one training iteration of a
pipeline: which micro-batches each device holds at each time step, and the memory level
that follows. It explains *why* a partitioning's per-device peaks differ, which mCAP's
predictor (paper 3.3) captures from measurements without modelling it:

- a stage keeps what a micro-batch's backward needs from its forward until its backward
  has run on that stage;
- under GPipe every stage runs all M forwards before any backward, so every stage holds
  all M micro-batches at the end of the forward phase;
- under 1F1B (PipeDream-flush / DAPPLE) stage i starts backwards after G-1-i warm-up
  forwards, so it holds up to min(G-i, M) micro-batches: the first stage the most,
  because its backward for a micro-batch comes only after that micro-batch went through
  every later stage and back;
- with checkpointing (torchgpipe's modes, paper 3.2) a checkpointed micro-batch keeps only
  the stage's input and its activations come back during its backward (recomputed), one
  micro-batch at a time; ``except_last`` checkpoints every micro-batch but the last, whose
  backward comes right after its forward, so that one keeps its activations.

Time steps are unit forwards; a backward takes ``backward_steps`` steps (about twice a
forward). Memory levels come from ``StageMemory``, which ``stage_memory`` calibrates from
a partitioning's per-device peaks at the setup the profile measured (see there for what
the profile cannot tell).
"""
from __future__ import annotations

from dataclasses import dataclass

from mcap.core.errors import InvalidPartitioning, McapError
from mcap.core.types import CHECKPOINTS

TIMELINE_SCHEDULES = ("gpipe", "1f1b")


@dataclass(frozen=True)
class StageMemory:
    """Memory model of one stage for the simulation, in bytes.

    ``per_microbatch``: what a micro-batch that is *not* checkpointed keeps on the stage from
    its forward to its backward (its activations and working buffers). ``recompute``: what a
    checkpointed micro-batch's backward brings back for the length of that backward (its
    activations, recomputed). ``kept_input``: what a checkpointed micro-batch keeps while in
    flight (the stage's input; 0 where the profile cannot tell). ``fixed``: bytes held the
    whole iteration besides the parameter state (what an even split per micro-batch leaves
    over, so the calibrated peak is the given one to the byte)."""
    static: int          # weights, gradients, optimizer state: held the whole iteration
    per_microbatch: int
    param_bytes: int = 0  # the stage's parameters: splits ``static`` into its parts
    state_copies: int = 3  # weights + gradients + optimizer copies of the parameters
    recompute: int = 0
    kept_input: int = 0
    fixed: int = 0


@dataclass(frozen=True)
class Op:
    """One forward ("F") or backward ("B") of one micro-batch on one device, [start, end)."""
    device: int
    kind: str
    microbatch: int
    start: int
    end: int


@dataclass(frozen=True)
class Timeline:
    balance: tuple[int, ...]
    schedule: str
    chunks: int
    steps: int
    ops: tuple[Op, ...]
    held: tuple[tuple[tuple[int, ...], ...], ...]  # [device][step] -> micro-batches held
    memory: tuple[tuple[int, ...], ...]            # [device][step] -> bytes
    stage_memory: tuple[StageMemory, ...]
    checkpoint: str = "never"

    @property
    def stages(self) -> int:
        return len(self.balance)

    @property
    def peaks(self) -> tuple[int, ...]:
        return tuple(max(levels) for levels in self.memory)

    @property
    def peak_steps(self) -> tuple[int, ...]:
        """The first step at which each device reaches its peak."""
        return tuple(levels.index(max(levels)) for levels in self.memory)

    @property
    def max_in_flight(self) -> tuple[int, ...]:
        return tuple(max(len(h) for h in per_step) for per_step in self.held)

    def checkpointed(self, microbatch: int) -> bool:
        """Whether ``microbatch`` keeps only its input and recomputes in its backward."""
        return checkpointed(self.checkpoint, microbatch, self.chunks)


def checkpointed(mode: str, microbatch: int, chunks: int) -> bool:
    """torchgpipe's checkpoint modes over micro-batches (``mcap.runner.train.Recomputed``):
    ``always`` every one, ``except_last`` all but the last, ``never`` none."""
    return mode == "always" or (mode == "except_last" and microbatch < chunks - 1)


def max_in_flight(schedule: str, stages: int, chunks: int) -> tuple[int, ...]:
    """How many micro-batches each stage holds at most, in closed form.

    GPipe: all M on every stage. 1F1B: stage i holds min(G-i, M) (G-1-i warm-up forwards
    plus the one whose backward comes next).
    """
    _check_schedule(schedule)
    if schedule == "gpipe":
        return tuple(chunks for _ in range(stages))
    return tuple(min(stages - i, chunks) for i in range(stages))


def op_order(schedule: str, stage: int, stages: int, chunks: int) -> tuple[tuple[str, int], ...]:
    """The order in which one device runs its forwards and backwards."""
    _check_schedule(schedule)
    if schedule == "gpipe":
        # torchgpipe: all forwards, then the backwards in reverse micro-batch order.
        return tuple([("F", m) for m in range(chunks)] + [("B", m) for m in reversed(range(chunks))])
    warmup = min(stages - 1 - stage, chunks)
    order = [("F", m) for m in range(warmup)]
    for i in range(chunks - warmup):
        order += [("F", warmup + i), ("B", i)]
    order += [("B", m) for m in range(chunks - warmup, chunks)]
    return tuple(order)


def simulate(balance: tuple[int, ...], schedule: str, chunks: int,
             stage_memory: tuple[StageMemory, ...], backward_steps: int = 2, *,
             checkpoint: str = "never") -> Timeline:
    """Simulate one iteration; every op starts as soon as its device and its input are ready.

    F(m) on stage i needs F(m) on stage i-1; B(m) on stage i needs B(m) on stage i+1. A
    device's level at a step is its static and fixed bytes, what every micro-batch in flight
    keeps (``per_microbatch``, or ``kept_input`` when checkpointed), and ``recompute`` while
    the backward of a checkpointed micro-batch runs.
    """
    balance = tuple(int(n) for n in balance)
    stages = len(balance)
    _check(balance, chunks, stage_memory, backward_steps, checkpoint)
    orders = [list(op_order(schedule, s, stages, chunks)) for s in range(stages)]
    done: dict[tuple[str, int, int], int] = {}   # (kind, stage, mb) -> end step
    began: dict[tuple[str, int, int], int] = {}  # (kind, stage, mb) -> start step
    free = [0] * stages
    ops: list[Op] = []
    cursor = [0] * stages
    # Repeatedly run, on each device, the next op of its order whose dependency is done.
    while any(cursor[s] < len(orders[s]) for s in range(stages)):
        progressed = False
        for s in range(stages):
            if cursor[s] >= len(orders[s]):
                continue
            kind, m = orders[s][cursor[s]]
            first = (kind == "F" and s == 0) or (kind == "B" and s == stages - 1)
            dep = ("F", s - 1, m) if kind == "F" else ("B", s + 1, m)
            if not first and dep not in done:
                continue
            ready = 0 if first else done[dep]
            start = max(free[s], ready)
            end = start + (1 if kind == "F" else backward_steps)
            done[(kind, s, m)] = end
            began[(kind, s, m)] = start
            free[s] = end
            ops.append(Op(s, kind, m, start, end))
            cursor[s] += 1
            progressed = True
        if not progressed:  # cannot happen for the two schedules; guard against a deadlock
            raise McapError(f"schedule {schedule!r} deadlocks with {stages} stages and {chunks} chunks")
    steps = max(op.end for op in ops)
    held, memory = [], []
    for s in range(stages):
        per_step, levels = _stage_levels(s, chunks, steps, began, done, stage_memory[s],
                                         checkpoint)
        held.append(per_step)
        memory.append(levels)
    ops.sort(key=lambda o: (o.start, o.device))
    return Timeline(balance, schedule, chunks, steps, tuple(ops), tuple(held), tuple(memory),
                    tuple(stage_memory), checkpoint)


def _check(balance: tuple[int, ...], chunks: int, stage_memory, backward_steps: int,
           checkpoint: str) -> None:
    """Refuse what :func:`simulate` cannot simulate, naming the values."""
    stages = len(balance)
    if stages == 0 or any(n <= 0 for n in balance):
        raise InvalidPartitioning(f"balance {list(balance)} needs at least one layer on every stage")
    if chunks < 1:
        raise McapError(f"chunks is {chunks} but a pipeline needs at least 1 micro-batch")
    if backward_steps < 1:
        raise McapError(f"backward_steps is {backward_steps} but must be at least 1")
    if len(stage_memory) != stages:
        raise McapError(f"{len(stage_memory)} stage memory models given for {stages} stages")
    if checkpoint not in CHECKPOINTS:
        raise McapError(f"checkpoint {checkpoint!r} is not one of {', '.join(CHECKPOINTS)}")


def _stage_levels(s: int, chunks: int, steps: int, began: dict, done: dict,
                  sm: StageMemory, checkpoint: str) -> tuple[tuple, tuple]:
    """Stage ``s``'s micro-batches in flight at each step (from its forward's start to its
    backward's end) and its bytes there (:func:`simulate`'s docstring)."""
    spans = {m: (began[("F", s, m)], done[("B", s, m)]) for m in range(chunks)}
    backward = {m: (began[("B", s, m)], done[("B", s, m)]) for m in range(chunks)}
    per_step = tuple(tuple(m for m in range(chunks) if spans[m][0] <= t < spans[m][1])
                     for t in range(steps))
    kept = {m: sm.kept_input if checkpointed(checkpoint, m, chunks) else sm.per_microbatch
            for m in range(chunks)}
    back = sm.recompute
    levels = tuple(
        sm.static + sm.fixed + sum(kept[m] for m in h)
        + sum(back for m in h if checkpointed(checkpoint, m, chunks)
              and backward[m][0] <= t < backward[m][1])
        for t, h in enumerate(per_step))
    return per_step, levels


def stage_memory(balance: tuple[int, ...], param_bytes: tuple[int, ...],
                 predicted_peaks: tuple[int, ...], profiled_schedule: str, chunks: int,
                 state_copies: int = 3, checkpoint: str = "never") -> tuple[StageMemory, ...]:
    """Calibrate each stage's memory model from its peak at the setup the profile measured
    (``profiled_schedule``, ``chunks`` micro-batches, ``checkpoint``), so the simulated peak
    at that setup equals the given one to the byte.

    ``static`` is the stage's parameter bytes times ``state_copies`` (weights, gradients,
    and one momentum buffer for SGD with momentum; 4 for Adam). The rest of the peak is
    what the micro-batches hold:

    - without checkpointing it is shared equally among the micro-batches the stage holds at
      its peak (``per_microbatch``);
    - with checkpointing the peak comes while one micro-batch's activations are on the
      stage (recomputed in its backward, or kept by ``except_last``'s last one), so the rest
      is one micro-batch's activations (``recompute`` and ``per_microbatch``).

    What a peak cannot tell (a profile measures one number per stage): the bytes of a kept
    stage input (``kept_input`` stays 0), and how the rest splits into activations and
    working buffers that do not grow with the micro-batches. The page says so.
    """
    if len(param_bytes) != sum(balance):
        raise McapError(f"balance sums to {sum(balance)} but {len(param_bytes)} layer sizes were given")
    if len(predicted_peaks) != len(balance):
        raise McapError(f"{len(predicted_peaks)} predicted peaks for {len(balance)} stages")
    if checkpoint not in CHECKPOINTS:
        raise McapError(f"checkpoint {checkpoint!r} is not one of {', '.join(CHECKPOINTS)}")
    recomputing = any(checkpointed(checkpoint, m, chunks) for m in range(chunks))
    # How many micro-batches' activations each stage holds at once at its peak under the
    # profiled setup: the simulation with one byte per micro-batch says (1F1B with
    # except_last holds the last one's while recomputing an earlier one: 2).
    unit = StageMemory(0, 1, recompute=1 if recomputing else 0)
    units = simulate(tuple(balance), profiled_schedule, chunks, (unit,) * len(balance),
                     checkpoint=checkpoint).peaks
    out, start = [], 0
    for s, n in enumerate(balance):
        params = sum(param_bytes[start:start + n])
        start += n
        peak = int(predicted_peaks[s])
        static = min(state_copies * params, peak)
        rest = peak - static
        each = rest // units[s]
        out.append(StageMemory(static=static, per_microbatch=each, param_bytes=params,
                               state_copies=state_copies, recompute=each if recomputing else 0,
                               fixed=rest - each * units[s]))
    return tuple(out)


def _check_schedule(schedule: str) -> None:
    if schedule not in TIMELINE_SCHEDULES:
        raise McapError(f"schedule {schedule!r} is not one of {', '.join(TIMELINE_SCHEDULES)}")
