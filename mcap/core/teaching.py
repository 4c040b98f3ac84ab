"""What the teaching view ("Pipeline memory, explained") says about one partitioning. Pure.

The view draws one iteration of any registered schedule from its action list
(``mcap.core.timeline.simulate``: the list torch runs, the one the runner executes), its
levels calibrated on the per-stage peaks every other page shows for the partitioning at the
profile's own setup (the same predictor, the same call: ``mcap.core.recommend.costs_of(...)
.peaks``), and puts measured peaks beside them only where they were measured under the
schedule drawn. Its sentences are computed from the curves it draws (:func:`explain`, tested
against the chart's data on every bundled profile under every schedule), so words and chart
cannot disagree, and what the profile cannot tell is said, not hidden (:func:`unknowns`):

- a profile measures one peak per stage at one schedule and one micro-batch count; the level
  at every step in between is the model's;
- at another micro-batch count the batch is cut into micro-batches of other sizes, and how a
  micro-batch's memory follows its samples is not in a profile: part of it does (activations),
  part does not (workspaces, buffers), and measured peaks of one partitioning at 1, 2, 4 and 8
  micro-batches of one batch rise and fall by turns. So the levels are drawn only at the
  profile's own micro-batch count; at another the view draws the schedule and says why not;
- under another schedule the same micro-batches move through another order: the levels are
  drawn, and the page says the profile did not measure that schedule;
- under a schedule of several stages per device each stage is calibrated as the profile's own
  stage of those layers would be, and a device's level is the sum of its stages';
- the bytes of a checkpointed micro-batch's kept stage input are not measured (drawn as 0).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from mcap.core import schedules
from mcap.core.errors import McapError
from mcap.core.schedules.actions import ActionList
from mcap.core.timeline import Timeline, simulate, stage_memory
from mcap.core.types import MemoryBreakdown, Run, Setup
from mcap.core import teachwords as w


def label(schedule: str) -> str:
    """A schedule's name for people, from the registry (an unknown name as it is)."""
    try:
        return schedules.get(schedule).label
    except McapError:
        return schedule


def plural(n: int, word: str, many: Optional[str] = None) -> str:
    """``plural(1, "micro-batch")`` -> "1 micro-batch"; ``plural(4, ...)`` -> "4 micro-batches"."""
    return w.plural(n, word, many)


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
    kept: tuple                       # (stage, micro-batch) whose activations are kept then
    recomputing: tuple                # checkpointed (stage, micro-batch) recomputed then
    inputs: tuple                     # checkpointed (stage, micro-batch) keeping their input
    activations: int                  # the bytes of ``kept`` + ``recomputing`` (+ inputs)

    @property
    def parameter_state(self) -> int:
        return self.weights + self.gradients + self.optimizer

    @property
    def units(self) -> int:
        """How many micro-batches' activations are on the device at its peak."""
        return len(self.kept) + len(self.recomputing)


def peak_parts(timeline: Timeline, device: int, step: Optional[int] = None) -> PeakParts:
    """Split a device's level at ``step`` (default: its peak) into weights, gradients,
    optimizer state (the parameters' copies, held all iteration) and the micro-batches'
    activations on it then. The parameter state is never counted as activations: when the
    calibration clipped it to the peak, the parts are scaled down together."""
    step = timeline.peak_steps[device] if step is None else step
    level = timeline.memory[device][step]
    weights = gradients = optimizer = fixed = static = 0
    for c in timeline.chunk_of_device(device):
        sm = timeline.stage_memory[c]
        full = max(sm.state_copies, 2) * sm.param_bytes
        scale = sm.static / full if full else 0.0
        each = int(sm.param_bytes * scale)
        weights += each
        gradients += each
        optimizer += sm.static - 2 * each if full else 0
        fixed += sm.fixed
        static += sm.static
    held = timeline.held[device][step]
    running = {(o.chunk, o.microbatch) for o in timeline.running(device, step)
               if o.kind != "F"}
    waiting = set(timeline.waiting[device][step]) if timeline.waiting else set()
    backward = running | waiting  # recomputed activations stay until W under a split backward
    ck = [p for p in held if timeline.checkpointed(p[1], p[0])]
    kept = tuple(p for p in held if p not in ck)
    recomputing = tuple(p for p in ck if p in backward)
    inputs = tuple(p for p in ck if p not in backward)
    return PeakParts(device, level, step, weights, gradients, optimizer, fixed, kept,
                     recomputing, inputs, level - static - fixed)


@dataclass(frozen=True)
class Lesson:
    """The teaching view of one partitioning (module docstring)."""
    timeline: Timeline
    predicted: tuple[int, ...]               # per stage at the profile's setup (Predict's)
    measured: Optional[tuple[int, ...]]      # per device, measured under the schedule drawn
    breakdown: Optional[tuple[MemoryBreakdown, ...]]  # measured at each device's peak
    setup: Setup                             # what the profile measured
    lines: tuple[str, ...]                   # the explanation, computed from the curves
    unknowns: tuple[str, ...]                # what the profile cannot tell about this view
    profiled: Optional[Timeline] = None      # the profile's own schedule over the same stages
    measured_under: str = ""                 # the measured run's schedule, micro-batches

    @property
    def levels(self) -> bool:
        """Whether the memory levels are drawn: only at the profile's micro-batch count
        (module docstring)."""
        return self.timeline.chunks == self.setup.chunks

    @property
    def at_profiled_setup(self) -> bool:
        return (self.levels and self.timeline.schedule == self.setup.schedule
                and self.timeline.virtual == max(1, self.setup.virtual_stages))


def state_copies(setup: Setup) -> int:
    """Copies of the parameters held all iteration: weights, gradients, and SGD's momentum
    buffer (Adam: two moments)."""
    return 4 if setup.optimizer == "adam" else 3


def max_chunks(setup: Setup) -> int:
    """The most micro-batches the profile's batch can be cut into (one sample each)."""
    return max(int(setup.batch_size), 1)


def fits_chunks(setup: Setup, chunks: int) -> int:
    """``chunks`` clamped to what the profile's batch can be cut into."""
    return min(max(int(chunks), 1), max_chunks(setup))


def run_setup_text(run_setup: Setup) -> str:
    """What a measured run ran under, for a label: "GPipe, 4 micro-batches"."""
    v = max(1, run_setup.virtual_stages)
    return (label(run_setup.schedule) + (f" x{v}" if v > 1 else "")
            + f", {plural(run_setup.chunks, 'micro-batch')}")


def lesson(balance: Sequence[int], al: ActionList, setup: Setup,
           param_bytes: Sequence[int], predicted: Sequence[int], calibration: ActionList,
           run: Optional[Run] = None, run_setup: Optional[Setup] = None) -> Lesson:
    """The teaching view of ``balance`` (layers per stage of the schedule) under the action
    list ``al``, its levels calibrated on ``predicted`` (each stage's peak at the profile's
    ``setup``) over ``calibration`` (the profile's own schedule over the same stages, one per
    device: ``mcap.core.timeline.stage_memory``), and ``run`` (a measured run of the same
    partitioning, measured under ``run_setup``, the profile's by default) beside them where
    it ran under the schedule drawn."""
    balance = tuple(int(n) for n in balance)
    _check(balance, al, setup, run)
    memory = stage_memory(balance, tuple(param_bytes), tuple(predicted), calibration,
                          state_copies(setup), setup.checkpoint)
    tl = simulate(al, balance, memory, checkpoint=setup.checkpoint)
    profiled = None
    if calibration.stages == al.stages and al.chunks == calibration.chunks:
        profiled = simulate(calibration, balance, memory, checkpoint=setup.checkpoint)
    under = run_setup or setup
    ran = run is not None and run.status == "ok" and bool(run.peaks)
    drawn = ran and (under.schedule == al.schedule and max(1, under.virtual_stages) == al.virtual
                     and under.chunks == al.chunks and len(run.peaks) == al.stages)
    measured = tuple(run.peaks) if drawn else None
    draft = Lesson(tl, tuple(int(p) for p in predicted), measured,
                   run.breakdown if drawn else None, setup, (), (), profiled,
                   run_setup_text(under) if ran else "")
    return Lesson(tl, draft.predicted, measured, draft.breakdown, setup, explain(draft),
                  unknowns(draft), profiled, draft.measured_under)


def _check(balance: tuple, al: ActionList, setup: Setup, run: Optional[Run]) -> None:
    if not 1 <= al.chunks <= max_chunks(setup):
        raise McapError(f"{al.chunks!r} micro-batches: the profile's batch of {setup.batch_size} "
                        f"samples makes 1 to {max_chunks(setup)} micro-batches")
    if len(balance) != al.num_chunks:
        raise McapError(f"{label(al.schedule)} with {al.stages} devices x {al.virtual} stages "
                        f"per device needs {al.num_chunks} layer counts, got "
                        f"{'-'.join(map(str, balance))}")
    if run is not None and tuple(run.balance) != balance:
        raise McapError(f"the measured run is of {'-'.join(map(str, run.balance))}, not "
                        f"{'-'.join(map(str, balance))}")


def explain(l: Lesson) -> tuple[str, ...]:
    """Plain sentences on why the devices' memory differs, computed from the curves the view
    draws (so the words cannot disagree with them): the schedule's in-flight counts, what a
    micro-batch in flight keeps under the profile's checkpointing, how the schedule compares
    with the profile's own, which device is highest and what its peak is made of, and how the
    measured peaks compare."""
    t = l.timeline
    lines = [w.setup_sentence(t, l.setup.batch_size), w.order_sentence(t, label(t.schedule))]
    top = max(range(t.stages), key=lambda d: t.peaks[d]) if l.levels else None
    lines.append(w.in_flight_sentence(t, top))
    lines += w.split_backward_sentences(t)
    if not l.levels:
        lines.append(w.other_chunks_sentence(l.setup, t.chunks))
        return tuple(x for x in lines if x)
    parts = [peak_parts(t, d) for d in range(t.stages)]
    lines.append(w.checkpointing_sentence(t, parts, label(t.schedule)))
    if l.profiled is not None and not l.at_profiled_setup:
        prof = [peak_parts(l.profiled, d) for d in range(l.profiled.stages)]
        lines += w.compare_sentences(t, l.profiled, parts, prof, label(t.schedule),
                                     label(l.setup.schedule))
    p = parts[top]
    lines.append(f"Highest: device {top} at {w.mib(p.peak)} ({p.peak:,} bytes), at step "
                 f"{p.step}. " + w.composition(p, t))
    others = [d for d in range(t.stages) if d != top]
    if others:
        runner = max(others, key=lambda d: t.peaks[d])
        lines.append(f"Why device {top} and not device {runner} (next at "
                     f"{w.mib(t.peaks[runner])}): " + w.why(p, parts[runner]) + ".")
    lines += w.measured_sentences(l.measured, l.predicted if l.at_profiled_setup else t.peaks,
                                  l.breakdown, l.measured_under, l.at_profiled_setup)
    return tuple(x for x in lines if x)


def unknowns(l: Lesson) -> tuple[str, ...]:
    """What the profile cannot tell about the view drawn, in sentences for the page."""
    t, s = l.timeline, l.setup
    if not l.levels:
        return ()  # no level is drawn, and the explanation says why
    out = ["The profile measures each stage's peak, not its level at every step: the curves "
           "between the peaks are a model's, replayed over the schedule's own order."]
    if t.schedule != s.schedule or t.virtual != max(1, s.virtual_stages):
        out.append(f"The profile was measured under {label(s.schedule)}, not "
                   f"{label(t.schedule)}: these levels move the same activations through "
                   "another order of forwards and backwards, an estimate the profile cannot "
                   f"check (measure it under {label(t.schedule)}"
                   + (f" with {t.virtual} stages a device" if t.virtual > 1 else "") + ").")
    if t.virtual > 1:
        out.append(f"Each device holds {t.virtual} stages here. Each stage is drawn as the "
                   "profile's own stage of those layers would be, and a device's level is "
                   "the sum of its stages': whether they share buffers and workspaces on one "
                   "device the profile cannot tell.")
    if any(o.kind == "I" for o in t.ops):
        out.append("Between a micro-batch's I and its W only what W needs stays (the layers' "
                   "inputs and output gradients); the profile does not split a stage's bytes "
                   "that way, so the curves keep the micro-batch's whole share until its W.")
    if any(t.checkpointed(m, c) for c in range(len(t.balance)) for m in range(t.chunks)):
        out.append("A checkpointed micro-batch keeps its stage's input while in flight; the "
                   "profile does not measure that tensor, so the curves draw it as 0.")
    if l.measured is None:
        out.append(w.unmeasured_sentence(l.measured_under, label(t.schedule), l.at_profiled_setup))
    return tuple(out)


def calibration_request(setup: Setup, num_stages: int) -> tuple:
    """The action list the levels are calibrated over: the profile's own schedule with one
    stage per device, ``num_stages`` stages, at its micro-batch count."""
    return (setup.schedule, int(num_stages), 1, int(setup.chunks))


def of_profile(profile, balance: Sequence[int], al: ActionList, calibration: ActionList,
               predictor: Optional[str] = None, run: Optional[Run] = None,
               run_setup: Optional[Setup] = None) -> Lesson:
    """:func:`lesson` for a profile: its layers' parameter bytes and, per stage, the peak its
    predictor gives at the profile's setup (the number every page shows)."""
    from mcap.core.recommend import costs_of
    costs = costs_of(profile) if predictor is None else costs_of(profile, predictor)
    predicted = costs.peaks(tuple(balance))
    return lesson(balance, al, profile.setup, tuple(l.param_bytes for l in profile.model.layers),
                  predicted, calibration, run, run_setup)


def without_checkpointing(profile, candidates: Sequence) -> Optional[int]:
    """Of ``candidates`` (profiles), the index of one measured without checkpointing on the
    same pipeline as ``profile`` (checkpointed): same stages, layers, batch, micro-batches
    and device, the same model first; None when there is none or ``profile`` is not
    checkpointed. The usual lesson (fewer micro-batches in flight, less memory) shows there
    (issue 40, 6)."""
    s = profile.setup
    if s.checkpoint == "never":
        return None
    fits = [i for i, p in enumerate(candidates)
            if p.setup.checkpoint == "never" and p.setup.stages == s.stages
            and p.model.num_layers == profile.model.num_layers
            and (p.setup.batch_size, p.setup.chunks, p.setup.device, p.setup.schedule)
            == (s.batch_size, s.chunks, s.device, s.schedule)]
    fits.sort(key=lambda i: candidates[i].model.spec != profile.model.spec)
    return fits[0] if fits else None


def twin_note(profile, twin) -> str:
    """What differs between the profile and its twin without checkpointing, for the page."""
    same = twin.model.spec == profile.model.spec
    return ("Drawn from the profile of " + ("the same model" if same else twin.model.spec)
            + f" measured with checkpoint never (batch {twin.setup.batch_size}, "
            f"{plural(twin.setup.chunks, 'micro-batch')}, {plural(twin.setup.stages, 'stage')})"
            + ("" if same else f"; the profile chosen is {profile.model.spec}, with "
               f"checkpoint {profile.setup.checkpoint}") + ".")


def fitting_chunks(schedule: str, stages: int, virtual: int, chunks: int,
                   most: int) -> tuple[int, str]:
    """The micro-batch count to draw ``schedule`` with: ``chunks`` when torch's rule takes it
    (``Schedule.check``), else the nearest count from 1 to ``most`` it takes (larger ones
    first), with the rule's words; McapError when none does."""
    spec = schedules.get(schedule)

    def refused(m: int) -> str:
        try:
            spec.check(stages, virtual, m)
        except McapError as exc:
            return str(exc)
        return ""

    why = refused(chunks)
    if not why:
        return chunks, ""
    for m in [*range(chunks + 1, most + 1), *range(chunks - 1, 0, -1)]:
        if not refused(m):
            return m, why
    raise McapError(f"{label(schedule)} cannot run {stages} devices x {virtual} stages with "
                    f"1 to {most} micro-batches: {why}")
