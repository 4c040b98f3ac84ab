"""What the teaching view ("Pipeline memory, explained") says about one partitioning. Pure.

The view draws one iteration (``mcap.core.timeline.simulate``) whose levels are calibrated on
the per-device peaks every other page shows for the partitioning at the profile's own setup
(the same predictor, the same call: ``mcap.core.recommend.costs_of(...).peaks``), and puts the
measured peaks beside them where the partitioning was measured. Its sentences are computed
from the curves it draws (:func:`explain`), so words and chart cannot disagree, and what the
profile cannot tell is said, not hidden (:attr:`Lesson.unknowns`):

- a profile measures one peak per stage at one schedule and one micro-batch count; the level
  at every step in between is the model's;
- at another micro-batch count the batch is cut into micro-batches of other sizes, and how a
  micro-batch's memory follows its samples is not in a profile: part of it does (activations),
  part does not (workspaces, buffers), and measured peaks of one partitioning at 1, 2, 4 and 8
  micro-batches of one batch rise and fall by turns. So the levels are drawn only at the
  profile's own micro-batch count; at another the view draws the schedule and says why not;
- under the other schedule the same micro-batches move through another order: the levels
  are drawn, and the page says the profile did not measure that schedule;
- the bytes of a checkpointed micro-batch's kept stage input are not measured (drawn as 0).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from mcap.core.errors import McapError
from mcap.core.timeline import (
    TIMELINE_SCHEDULES, Timeline, max_in_flight, simulate, stage_memory,
)
from mcap.core.types import MemoryBreakdown, Run, Setup

SCHEDULE_NAMES = {"gpipe": "GPipe", "1f1b": "1F1B"}


def plural(n: int, word: str, many: Optional[str] = None) -> str:
    """``plural(1, "micro-batch")`` -> "1 micro-batch"; ``plural(4, ...)`` -> "4 micro-batches"."""
    if n == 1:
        return f"{n} {word}"
    return f"{n} {many or (word + 'es' if word.endswith(('ch', 'sh', 's', 'x')) else word + 's')}"


@dataclass(frozen=True)
class PeakParts:
    """What one device holds at its highest drawn level, in bytes (sums to ``peak``)."""
    device: int
    peak: int
    step: int
    weights: int
    gradients: int
    optimizer: int
    fixed: int                        # held all iteration besides the parameter state
    kept: tuple[int, ...]             # micro-batches whose activations are kept then
    recomputing: tuple[int, ...]      # checkpointed micro-batches recomputed then
    inputs: tuple[int, ...]           # checkpointed micro-batches keeping only their input
    activations: int                  # the bytes of ``kept`` + ``recomputing`` (+ inputs)

    @property
    def parameter_state(self) -> int:
        return self.weights + self.gradients + self.optimizer

    @property
    def units(self) -> int:
        """How many micro-batches' activations are on the device at its peak."""
        return len(self.kept) + len(self.recomputing)


def peak_parts(timeline: Timeline, device: int) -> PeakParts:
    """Split a device's drawn peak into weights, gradients, optimizer state (the parameters'
    copies, held all iteration) and the micro-batches' activations on it at that step. The
    parameter state is never counted as activations: when the calibration clipped it to the
    peak, the parts are scaled down together."""
    sm = timeline.stage_memory[device]
    step = timeline.peak_steps[device]
    peak = timeline.peaks[device]
    copies = max(sm.state_copies, 2)
    full = copies * sm.param_bytes
    scale = sm.static / full if full else 0.0
    weights = gradients = int(sm.param_bytes * scale)
    optimizer = sm.static - weights - gradients if full else 0
    held = timeline.held[device][step]
    running = {o.microbatch for o in timeline.ops
               if o.device == device and o.kind == "B" and o.start <= step < o.end}
    kept = tuple(m for m in held if not timeline.checkpointed(m))
    recomputing = tuple(m for m in held if timeline.checkpointed(m) and m in running)
    inputs = tuple(m for m in held if timeline.checkpointed(m) and m not in running)
    return PeakParts(device, peak, step, weights, gradients, optimizer, sm.fixed, kept,
                     recomputing, inputs, peak - sm.static - sm.fixed)


@dataclass(frozen=True)
class Lesson:
    """The teaching view of one partitioning (module docstring)."""
    timeline: Timeline
    predicted: tuple[int, ...]               # per device at the profile's setup (Predict's)
    measured: Optional[tuple[int, ...]]      # the measured run's peaks, where there is one
    breakdown: Optional[tuple[MemoryBreakdown, ...]]  # measured at each device's peak
    setup: Setup                             # what the profile measured
    lines: tuple[str, ...]                   # the explanation, computed from the curves
    unknowns: tuple[str, ...]                # what the profile cannot tell about this view

    @property
    def levels(self) -> bool:
        """Whether the memory levels are drawn: only at the profile's micro-batch count
        (module docstring)."""
        return self.timeline.chunks == self.setup.chunks

    @property
    def at_profiled_setup(self) -> bool:
        return self.levels and self.timeline.schedule == self.setup.schedule


def state_copies(setup: Setup) -> int:
    """Copies of the parameters held all iteration: weights, gradients, and SGD's momentum
    buffer (Adam: two moments)."""
    return 4 if setup.optimizer == "adam" else 3


def max_chunks(setup: Setup) -> int:
    """The most micro-batches the profile's batch can be cut into (one sample each)."""
    return max(int(setup.batch_size), 1)


def lesson(balance: Sequence[int], schedule: str, chunks: int, setup: Setup,
           param_bytes: Sequence[int], predicted: Sequence[int], run: Optional[Run] = None,
           backward_steps: int = 2) -> Lesson:
    """The teaching view of ``balance`` under ``schedule`` with ``chunks`` micro-batches, its
    levels calibrated on ``predicted`` (the per-device peaks at the profile's ``setup``) and
    ``run`` (a measured run of the same partitioning and setup) beside them."""
    balance = tuple(int(n) for n in balance)
    if schedule not in TIMELINE_SCHEDULES:
        raise McapError(f"schedule {schedule!r} is not one of {', '.join(TIMELINE_SCHEDULES)}")
    if isinstance(chunks, bool) or not isinstance(chunks, int) or not 1 <= chunks <= max_chunks(setup):
        raise McapError(f"{chunks!r} micro-batches: the profile's batch of {setup.batch_size} "
                        f"samples makes 1 to {max_chunks(setup)} micro-batches")
    if run is not None and tuple(run.balance) != balance:
        raise McapError(f"the measured run is of {'-'.join(map(str, run.balance))}, not "
                        f"{'-'.join(map(str, balance))}")
    profiled = setup.schedule if setup.schedule in TIMELINE_SCHEDULES else "gpipe"
    memory = stage_memory(balance, tuple(param_bytes), tuple(predicted), profiled,
                          int(setup.chunks), state_copies(setup), setup.checkpoint)
    tl = simulate(balance, schedule, chunks, memory, backward_steps,
                  checkpoint=setup.checkpoint)
    measured = tuple(run.peaks) if run is not None and run.status == "ok" and run.peaks else None
    breakdown = run.breakdown if measured is not None else None
    draft = Lesson(tl, tuple(int(p) for p in predicted), measured, breakdown, setup, (), ())
    return Lesson(tl, draft.predicted, measured, breakdown, setup, explain(draft),
                  unknowns(draft))


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "0%"


def _samples(batch: int, chunks: int) -> str:
    each = batch / chunks
    text = f"{each:.0f}" if each == int(each) else f"about {each:.1f}"
    return f"{text} sample{'' if each == 1 else 's'}"


def _list(items) -> str:
    items = [str(i) for i in items]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def explain(l: Lesson) -> tuple[str, ...]:
    """Plain sentences on why the devices' memory differs, computed from the curves the view
    draws (so the words cannot disagree with them): the schedule's in-flight counts, what a
    micro-batch in flight keeps under the profile's checkpointing, which device is highest
    and what its peak is made of, and how the measured peaks compare."""
    t = l.timeline
    g, m = t.stages, t.chunks
    held = t.max_in_flight
    lines = [f"G = {plural(g, 'stage')}, one per device; the batch of {l.setup.batch_size} "
             f"is cut into M = {plural(m, 'micro-batch')} of {_samples(l.setup.batch_size, m)}. "
             "A device keeps what a micro-batch's backward needs from its forward until its "
             "backward has run there: that micro-batch is *in flight* on the device."]
    if t.schedule == "gpipe":
        if m == 1:
            lines.append("GPipe runs the one micro-batch's forward through every stage, then its "
                         "backward: every device has 1 micro-batch in flight.")
        else:
            lines.append(f"GPipe runs all {m} forwards before any backward, so at the end of the "
                         f"forward phase every device has all {m} micro-batches in flight.")
    else:
        lines.append("1F1B starts backwards early: device i runs G − 1 − i warm-up forwards, then "
                     "alternates one forward and one backward, so it has at most min(G − i, M) "
                     "micro-batches in flight: " +
                     ", ".join(f"device {i}: {h}" for i, h in enumerate(held)) + ".")
        if g > 1 and held[0] > held[-1]:
            lines.append("The first device holds the most because a micro-batch's backward "
                         "reaches it last: the micro-batch must first pass through every later "
                         "stage and back, and meanwhile the first device keeps starting new ones.")
    if not l.levels:
        s = l.setup
        lines.append(f"The profile was measured with {plural(s.chunks, 'micro-batch')} of "
                     f"{_samples(s.batch_size, s.chunks)}, not {m}: how full each device gets with "
                     f"{plural(m, 'micro-batch')} of {_samples(s.batch_size, m)} it cannot tell "
                     "(part of a micro-batch's memory follows its samples, part does not), so "
                     f"the chart shows the schedule only. Set Micro-batches to {s.chunks} for the "
                     f"memory, or measure it with {plural(m, 'micro-batch')}.")
        return tuple(lines)
    lines.append(_checkpointing(t))
    parts = [peak_parts(t, d) for d in range(g)]
    top = max(range(g), key=lambda d: t.peaks[d])
    p = parts[top]
    lines.append(f"Highest: device {top} at {_mib(p.peak)} ({p.peak:,} bytes), at step {p.step}. "
                 + _composition(p, t))
    others = [d for d in range(g) if d != top]
    if others:
        runner = max(others, key=lambda d: t.peaks[d])
        lines.append(f"Why device {top} and not device {runner} (next at {_mib(t.peaks[runner])}): "
                     + _why(p, parts[runner]) + ".")
    lines += _measured(l, top)
    return tuple(lines)


def _checkpointing(t: Timeline) -> str:
    m = t.chunks
    recomputed = [k for k in range(m) if t.checkpointed(k)]
    if not recomputed:
        if t.checkpoint == "except_last":
            return ("Checkpointing (except_last) spares the last micro-batch, and here it is the "
                    "only one: it keeps its activations from its forward to its backward, so a "
                    "device's level climbs with its forward and falls with its backward.")
        return ("Without checkpointing every micro-batch in flight keeps its activations, so a "
                "device's level climbs with every forward and falls with every backward.")
    most = max(peak_parts(t, d).units for d in range(t.stages))
    if t.checkpoint == "always":
        head = ("With checkpointing (always) a micro-batch in flight keeps only the stage's input; "
                "its activations are recomputed during its backward, one micro-batch at a time")
    else:
        head = (f"With checkpointing (except_last) every micro-batch but the last (micro-batch "
                f"{m - 1}) keeps only the stage's input while in flight and has its activations "
                "recomputed during its backward; the last one's backward comes right after its "
                "forward, so it keeps its activations")
    return (head + f". So the level rises with the activations of at most {plural(most, 'micro-batch')} "
            "at a time, not with the number in flight.")


def _composition(p: PeakParts, t: Timeline) -> str:
    state = (f"It holds its parameter state: weights {_mib(p.weights)}, gradients "
             f"{_mib(p.gradients)} and optimizer state {_mib(p.optimizer)} "
             f"({_share(p.parameter_state, p.peak)} together)")
    what = []
    if p.kept:
        what.append(f"the activations kept by micro-batch{'es' if len(p.kept) > 1 else ''} "
                    f"{_list(p.kept)}")
    if p.recomputing:
        what.append(f"the activations of micro-batch {_list(p.recomputing)} (recomputed in its "
                    "backward)")
    if p.inputs:
        what.append(f"the stage input{'s' if len(p.inputs) > 1 else ''} of micro-batch"
                    f"{'es' if len(p.inputs) > 1 else ''} {_list(p.inputs)}")
    rest = (f", and {_mib(p.activations)} ({_share(p.activations, p.peak)}) for "
            + ", plus ".join(what)) if what else ""
    fixed = (f"; {_mib(p.fixed)} more is held all iteration" if p.fixed >= 2**20 / 10 else "")
    return state + rest + fixed + "."


def _why(p: PeakParts, q: PeakParts) -> str:
    state_gap = p.parameter_state - q.parameter_state
    flight_gap = p.activations - q.activations
    if state_gap >= flight_gap:
        return (f"mostly its parameter state: weights, gradients and optimizer state take "
                f"{_mib(p.parameter_state)} against device {q.device}'s {_mib(q.parameter_state)}")
    if p.units > q.units:
        return (f"mostly the activations on it: those of {plural(p.units, 'micro-batch')} "
                f"against {q.units} on device {q.device}, {_mib(p.activations)} against "
                f"{_mib(q.activations)}")
    return (f"mostly what a micro-batch's activations take there: {_mib(p.activations)} against "
            f"device {q.device}'s {_mib(q.activations)}")


def _measured(l: Lesson, top: int) -> list[str]:
    if l.measured is None:
        return []
    meas = l.measured
    worst = max(range(len(meas)), key=lambda d: meas[d])
    errors = [(p - m) / m for p, m in zip(l.predicted, meas) if m > 0]
    off = max((abs(e) for e in errors), default=0.0)
    text = (f"Measured: this partitioning ran at the profile's setup, and device {worst} was the "
            f"fullest at {_mib(meas[worst])}; the predicted peaks the curves are drawn from are "
            f"within {100 * off:.1f}% of the measured ones on every device.")
    if worst != max(range(len(l.predicted)), key=lambda d: l.predicted[d]):
        text += " The prediction names another device as the fullest: trust the measurement."
    lines = [text]
    if l.breakdown is not None and worst < len(l.breakdown):
        b = l.breakdown[worst]
        lines.append(f"Measured at device {worst}'s peak: weights {_mib(b.weights)}, gradients "
                     f"{_mib(b.gradients)}, optimizer state {_mib(b.optimizer)}, and "
                     f"{_mib(b.other)} of activations, buffers and workspaces.")
    return lines


def unknowns(l: Lesson) -> tuple[str, ...]:
    """What the profile cannot tell about the view drawn, in sentences for the page."""
    t, s = l.timeline, l.setup
    out = ["The profile measures each stage's peak, not its level at every step: the curves "
           "between the peaks are the model's."]
    if t.schedule != s.schedule:
        out.append(f"The profile was measured under {SCHEDULE_NAMES.get(s.schedule, s.schedule)}, "
                   f"not {SCHEDULE_NAMES[t.schedule]}: these levels move the same activations "
                   "through another order of forwards and backwards, an estimate the profile "
                   f"cannot check (measure it under {SCHEDULE_NAMES[t.schedule]}).")
    if not l.levels:
        return ()  # no level is drawn, and the explanation says why
    if any(t.checkpointed(m) for m in range(t.chunks)):
        out.append("A checkpointed micro-batch keeps its stage's input while in flight; the "
                   "profile does not measure that tensor, so the curves draw it as 0.")
    if l.measured is None:
        out.append("This partitioning was not measured at the profile's setup, so the peaks are "
                   "predicted only (measure it on the Predict vs measure page).")
    return tuple(out)


def other_schedule(schedule: str, stages: int, chunks: int) -> tuple[str, tuple[int, ...]]:
    """The other schedule and how many micro-batches each device would have in flight."""
    other = "1f1b" if schedule == "gpipe" else "gpipe"
    return other, max_in_flight(other, stages, chunks)


def fits_chunks(setup: Setup, chunks: int) -> int:
    """``chunks`` clamped to what the profile's batch can be cut into."""
    return min(max(int(chunks), 1), max_chunks(setup))

