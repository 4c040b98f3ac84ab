"""Pipeline memory over one iteration, for the teaching view ("Pipeline memory, explained").

Pure: no torch, no files. A discrete-time simulation of one training iteration of a
pipeline: which micro-batches' activations each device holds at each time step, and the
memory level that follows. It explains *why* a partitioning's per-device peaks differ,
which mCAP's predictor (paper 3.3) captures from measurements without modelling it:

- a stage keeps a micro-batch's activations (with checkpointing: the stage's input,
  paper 3.2) from its forward until its backward has run on that stage;
- under GPipe every stage runs all M forwards before any backward, so every stage holds
  all M micro-batches at the end of the forward phase;
- under 1F1B (PipeDream-flush / DAPPLE) stage i starts backwards after G-1-i warm-up
  forwards, so it holds up to min(G-i, M) micro-batches: the first stage the most,
  because its backward for a micro-batch comes only after that micro-batch went through
  every later stage and back.

Time steps are unit forwards; a backward takes ``backward_steps`` steps (about twice a
forward, three times with recomputation). Memory levels come from ``StageMemory``, which
``stage_memory`` can calibrate from mCAP's prediction (see there for the approximation).
"""
from __future__ import annotations

from dataclasses import dataclass

from mcap.core.errors import InvalidPartitioning, McapError

TIMELINE_SCHEDULES = ("gpipe", "1f1b")


@dataclass(frozen=True)
class StageMemory:
    """Memory model of one stage for the simulation, in bytes."""
    static: int          # weights, gradients, optimizer state: held the whole iteration
    per_microbatch: int  # the rest of the peak, per micro-batch in flight on the stage
    param_bytes: int = 0  # the stage's parameters: splits ``static`` into its parts
    state_copies: int = 3  # weights + gradients + optimizer copies of the parameters


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

    @property
    def stages(self) -> int:
        return len(self.balance)

    @property
    def peaks(self) -> tuple[int, ...]:
        return tuple(max(levels) for levels in self.memory)

    @property
    def max_in_flight(self) -> tuple[int, ...]:
        return tuple(max(len(h) for h in per_step) for per_step in self.held)


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
             stage_memory: tuple[StageMemory, ...], backward_steps: int = 2) -> Timeline:
    """Simulate one iteration; every op starts as soon as its device and its input are ready.

    F(m) on stage i needs F(m) on stage i-1; B(m) on stage i needs B(m) on stage i+1.
    """
    balance = tuple(int(n) for n in balance)
    stages = len(balance)
    if stages == 0 or any(n <= 0 for n in balance):
        raise InvalidPartitioning(f"balance {list(balance)} needs at least one layer on every stage")
    if chunks < 1:
        raise McapError(f"chunks is {chunks} but a pipeline needs at least 1 micro-batch")
    if backward_steps < 1:
        raise McapError(f"backward_steps is {backward_steps} but must be at least 1")
    if len(stage_memory) != stages:
        raise McapError(f"{len(stage_memory)} stage memory models given for {stages} stages")
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
        spans = {m: (began[("F", s, m)], done[("B", s, m)]) for m in range(chunks)}
        per_step = tuple(tuple(m for m in range(chunks) if spans[m][0] <= t < spans[m][1])
                         for t in range(steps))
        held.append(per_step)
        sm = stage_memory[s]
        memory.append(tuple(sm.static + len(h) * sm.per_microbatch for h in per_step))
    ops.sort(key=lambda o: (o.start, o.device))
    return Timeline(balance, schedule, chunks, steps, tuple(ops), tuple(held), tuple(memory),
                    tuple(stage_memory))


def stage_memory(balance: tuple[int, ...], param_bytes: tuple[int, ...],
                 predicted_peaks: tuple[int, ...], profiled_schedule: str, chunks: int,
                 state_copies: int = 3) -> tuple[StageMemory, ...]:
    """Calibrate each stage's memory model from mCAP's predicted peaks.

    ``static`` is the stage's parameter bytes times ``state_copies`` (weights, gradients,
    and one momentum buffer for SGD with momentum; 4 for Adam). The rest of the predicted
    peak is shared equally among the micro-batches the stage holds at its peak under the
    schedule it was profiled with, so the simulated peak equals the predicted one there.
    This is a teaching approximation: it does not separate the recomputed activations
    of the micro-batch in its backward (paper 3.2) from the kept stage inputs.
    """
    if len(param_bytes) != sum(balance):
        raise McapError(f"balance sums to {sum(balance)} but {len(param_bytes)} layer sizes were given")
    if len(predicted_peaks) != len(balance):
        raise McapError(f"{len(predicted_peaks)} predicted peaks for {len(balance)} stages")
    held = max_in_flight(profiled_schedule, len(balance), chunks)
    out, start = [], 0
    for s, n in enumerate(balance):
        static = state_copies * sum(param_bytes[start:start + n])
        start += n
        rest = max(int(predicted_peaks[s]) - static, 0)
        out.append(StageMemory(static=min(static, int(predicted_peaks[s])), per_microbatch=rest // held[s],
                               param_bytes=sum(param_bytes[start - n:start]),
                               state_copies=state_copies))
    return tuple(out)


@dataclass(frozen=True)
class PeakParts:
    """What one device holds at its highest simulated level, in bytes (sums to ``peak``)."""
    device: int
    peak: int
    held: int               # micro-batches in flight at that moment
    weights: int
    gradients: int
    optimizer: int
    per_microbatch: int     # the rest, for the micro-batches in flight (held x per micro-batch)

    @property
    def parameter_state(self) -> int:
        return self.weights + self.gradients + self.optimizer


def peak_parts(timeline: Timeline, device: int) -> PeakParts:
    """Split a device's simulated peak into weights, gradients, optimizer state (the
    parameters' copies, held all iteration) and the memory of the micro-batches in flight.
    The parameter state is never counted as activations: when the calibration clipped it
    to the predicted peak, the parts are scaled down together."""
    sm = timeline.stage_memory[device]
    peak = timeline.peaks[device]
    held = timeline.max_in_flight[device]
    copies = max(sm.state_copies, 2)
    full = copies * sm.param_bytes
    scale = sm.static / full if full else 0.0
    weights = gradients = int(sm.param_bytes * scale)
    optimizer = sm.static - weights - gradients if full else 0
    rest = peak - sm.static
    return PeakParts(device, peak, held, weights, gradients, optimizer, rest)


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "0%"


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def explain(timeline: Timeline) -> tuple[str, ...]:
    """Plain sentences on why the devices' memory differs, computed from the simulation the
    chart draws (so the words cannot disagree with it): the schedule's in-flight counts,
    which device is highest, and what its peak is made of, in bytes and share."""
    g, m = timeline.stages, timeline.chunks
    held = timeline.max_in_flight
    lines = [f"Each device keeps what a micro-batch's backward needs from its forward until its "
             f"backward has run there; {m} micro-batches go through {g} stages."]
    if timeline.schedule == "gpipe":
        lines.append(f"GPipe runs all {m} forwards before any backward, so at the end of the "
                     f"forward phase every device holds all {m} micro-batches. With "
                     "checkpointing only each stage's input is kept per micro-batch, and one "
                     "micro-batch's activations are recomputed during its backward.")
    else:
        lines.append("1F1B starts backwards early: device i runs G-1-i warm-up forwards, so it "
                     "holds at most min(G-i, M) micro-batches: " +
                     ", ".join(f"device {i}: {h}" for i, h in enumerate(held)) + ".")
    top = max(range(g), key=lambda i: timeline.peaks[i])
    p = peak_parts(timeline, top)
    lines.append(
        f"Highest: device {top} at {_mib(p.peak)} ({p.peak:,} bytes), with {p.held} "
        f"micro-batch{'es' if p.held != 1 else ''} in flight. It holds weights {_mib(p.weights)} "
        f"({_share(p.weights, p.peak)}), gradients {_mib(p.gradients)} ({_share(p.gradients, p.peak)}), "
        f"optimizer state {_mib(p.optimizer)} ({_share(p.optimizer, p.peak)}), and "
        f"{_mib(p.per_microbatch)} ({_share(p.per_microbatch, p.peak)}) for its micro-batches in "
        "flight (activations kept for the backward and working buffers).")
    others = [i for i in range(g) if i != top]
    if others:
        runner = max(others, key=lambda i: timeline.peaks[i])
        q = peak_parts(timeline, runner)
        state_gap = p.parameter_state - q.parameter_state
        flight_gap = p.per_microbatch - q.per_microbatch
        if state_gap >= flight_gap:
            why = (f"mostly its parameter state: weights, gradients and optimizer state take "
                   f"{_mib(p.parameter_state)} against device {runner}'s {_mib(q.parameter_state)}")
        elif p.held > q.held:
            why = (f"mostly the micro-batches in flight: it holds {p.held} against device "
                   f"{runner}'s {q.held}, {_mib(p.per_microbatch)} against {_mib(q.per_microbatch)}")
        else:
            why = (f"mostly what each micro-batch in flight costs there: {_mib(p.per_microbatch)} "
                   f"for {p.held} against device {runner}'s {_mib(q.per_microbatch)} for {q.held}")
        lines.append(f"Why device {top} and not device {runner} (next at {_mib(q.peak)}): {why}.")
        if timeline.schedule == "1f1b" and top == 0 and held[0] > held[runner]:
            lines.append("The first stage fills up because the backward of a micro-batch reaches "
                         "it last: the micro-batch must first pass through every later stage and "
                         "back, and meanwhile the first stage keeps accepting new micro-batches.")
    return tuple(lines)


def _check_schedule(schedule: str) -> None:
    if schedule not in TIMELINE_SCHEDULES:
        raise McapError(f"schedule {schedule!r} is not one of {', '.join(TIMELINE_SCHEDULES)}")
