"""The sentences of the teaching view (``mcap.core.teaching``), each computed from the
timeline it describes (``mcap.core.timeline.Timeline``: the schedule's action list in time and
the levels drawn). Pure. Nothing here knows a schedule by name: what a schedule does is read
off its ops (how many forwards a device runs before its first backward, how many micro-batches
it holds, which wait for their W)."""
from __future__ import annotations

from typing import Optional, Sequence

from mcap.core.timeline import Timeline


def plural(n: int, word: str, many: Optional[str] = None) -> str:
    """``plural(1, "micro-batch")`` -> "1 micro-batch"; ``plural(4, ...)`` -> "4 micro-batches"."""
    if n == 1:
        return f"{n} {word}"
    return f"{n} {many or (word + 'es' if word.endswith(('ch', 'sh', 's', 'x')) else word + 's')}"


def mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "0%"


def samples(batch: int, chunks: int) -> str:
    each = batch / chunks
    text = f"{each:.0f}" if each == int(each) else f"about {each:.1f}"
    return f"{text} sample{'' if each == 1 else 's'}"


def listed(items) -> str:
    items = [str(i) for i in items]
    if not items:
        return ""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def counts(values: Sequence[int]) -> str:
    return ", ".join(str(v) for v in values)


def pairs_text(pairs: Sequence[tuple], t: Timeline) -> str:
    """(stage, micro-batch) pairs in words: "micro-batches 1 and 2" on a device of one stage,
    "micro-batch 3 on stage 0 and micro-batch 1 on stage 4" on a device of several."""
    def mbs(ms):
        return f"micro-batch{'es' if len(ms) > 1 else ''} {listed(ms)}"
    if t.virtual == 1:
        return mbs(sorted({m for _, m in pairs}))
    by_stage: dict = {}
    for c, m in pairs:
        by_stage.setdefault(c, []).append(m)
    return listed(f"{mbs(sorted(ms))} on stage {c}" for c, ms in sorted(by_stage.items()))


def setup_sentence(t: Timeline, batch: int) -> str:
    g, m, v = t.stages, t.chunks, t.virtual
    tail = (f"the batch of {batch} is cut into M = {plural(m, 'micro-batch')} of "
            f"{samples(batch, m)}. ")
    if v == 1:
        return (f"G = {plural(g, 'stage')}, one per device; " + tail +
                "A device keeps what a micro-batch's backward needs from its forward until its "
                "backward has run there: that micro-batch is *in flight* on the device.")
    where = listed(f"device {d} stages {listed(t.chunk_of_device(d))}" for d in range(g))
    return (f"G = {plural(g, 'device')}, each holding V = {v} stages of the model "
            f"({len(t.balance)} stages in all: {where}); " + tail +
            "A stage keeps what a micro-batch's backward needs from its forward until its "
            "backward has run there: that micro-batch is *in flight* on the stage's device.")


def warmups(t: Timeline) -> tuple[int, ...]:
    """Per device, the forwards it runs before its first backward (B or I)."""
    out = []
    for d in range(t.stages):
        n = 0
        for o in sorted((o for o in t.ops if o.device == d), key=lambda o: o.start):
            if o.kind != "F":
                break
            n += 1
        out.append(n)
    return tuple(out)


def order_sentence(t: Timeline, name: str) -> str:
    warm, total = warmups(t), t.virtual * t.chunks
    if all(n == total for n in warm):
        if total == 1:
            return (f"{name} runs the one micro-batch's forward through every stage, then its "
                    "backward: every device has 1 micro-batch in flight.")
        return (f"{name} runs all {total} forwards of a device before any of its backwards, so "
                f"at the end of its forwards every device holds all {t.chunks} micro-batches"
                + (" on each of its stages" if t.virtual > 1 else "") + ".")
    return (f"{name} starts backwards early: before its first backward "
            + listed(f"device {d} runs {plural(n, 'forward')}" for d, n in enumerate(warm))
            + f" (of {total}); the rest of its forwards come between backwards.")


def _first_backward(t: Timeline, d: int) -> int:
    return min((o.start for o in t.ops if o.device == d and o.kind != "F"), default=0)


def in_flight_sentence(t: Timeline, top: Optional[int]) -> str:
    """The most micro-batches in flight per device, and which device has the most: the most
    *micro-batches*, which is not the most memory (issue 40, 7)."""
    held = t.max_in_flight
    text = ("Most micro-batches in flight at once: "
            + ", ".join(f"device {d}: {h}" for d, h in enumerate(held)) + ".")
    if len(set(held)) == 1:
        return text
    most = max(range(t.stages), key=lambda d: held[d])
    text += f" Device {most} has the most in flight"
    if most == 0 and _first_backward(t, 0) == max(_first_backward(t, d) for d in range(t.stages)):
        text += (": a micro-batch's backward reaches it last, after every later stage and "
                 "back, and meanwhile it keeps starting new ones")
    text += ". That is the most micro-batches, not necessarily the most memory"
    if top is not None and top != most:
        text += (f": the fullest device here is device {top}, because what a micro-batch keeps "
                 "and the parameter state differ from device to device (below)")
    elif top is not None:
        text += f"; here device {most} is also the fullest"
    return text + "."


def split_backward_sentences(t: Timeline) -> list[str]:
    if not any(o.kind == "I" for o in t.ops) or not t.waiting:
        return []
    most = [max(len(x) for x in per_step) for per_step in t.waiting]
    d = max(range(t.stages), key=lambda k: most[k])
    return ["The backward is split in two: I computes the gradients of the stage's inputs "
            "(sent on to the previous stage at once) and W those of its weights, later, where "
            "the device would otherwise wait. A micro-batch stays held from its forward until "
            f"its W: up to {plural(most[d], 'micro-batch')} "
            f"{'waits for its' if most[d] == 1 else 'wait for their'} W at once (device {d})."]


def other_chunks_sentence(s, m: int) -> str:
    return (f"The profile was measured with {plural(s.chunks, 'micro-batch')} of "
            f"{samples(s.batch_size, s.chunks)}, not {m}: how full each device gets with "
            f"{plural(m, 'micro-batch')} of {samples(s.batch_size, m)} it cannot tell "
            "(part of a micro-batch's memory follows its samples, part does not), so the "
            f"chart shows the schedule only. Set Micro-batches to {s.chunks} for the memory, "
            f"or measure it with {plural(m, 'micro-batch')}.")


def _recomputes(t: Timeline) -> bool:
    return any(t.checkpointed(m, c) for c in range(len(t.balance)) for m in range(t.chunks))


def checkpointing_sentence(t: Timeline, parts, name: str) -> str:
    """What a micro-batch in flight keeps, and, with checkpointing, why the level holds the
    activations of only a few micro-batches at once (``except_last``: 2, the last one kept
    while an earlier one recomputes)."""
    m = t.chunks
    if not _recomputes(t):
        if "except_last" in t.checkpoint:
            return ("Checkpointing (except_last) spares the last micro-batch, and here it is "
                    "the only one: it keeps its activations from its forward to its backward, "
                    "so a device's level climbs with its forward and falls with its backward.")
        return ("Without checkpointing every micro-batch in flight keeps its activations, so a "
                "device's level climbs with every forward and falls with every backward.")
    most = max(p.units for p in parts)
    if "except_last" not in t.checkpoint:
        head = ("With checkpointing (always) a micro-batch in flight keeps only the stage's "
                "input; its activations are recomputed during its backward")
    else:
        head = (f"With checkpointing (except_last) every micro-batch but the last (micro-batch "
                f"{m - 1}) keeps only the stage's input while in flight and has its activations "
                "recomputed during its backward; the last one is not checkpointed and keeps its "
                "activations until its own backward")
    text = (head + f". So a device holds the activations of at most {plural(most, 'micro-batch')} "
            "at a time, not one per micro-batch in flight")
    p = max(parts, key=lambda q: q.units)
    if p.kept and p.recomputing:
        one = len(p.recomputing) == 1
        text += (f": on device {p.device} at step {p.step}, {pairs_text(p.recomputing, t)} "
                 f"recompute{'s' if one else ''} {'its' if one else 'their'} activations in "
                 f"{'its' if one else 'their'} backward while {pairs_text(p.kept, t)} still "
                 f"keep{'s' if len(p.kept) == 1 else ''} {'its' if len(p.kept) == 1 else 'their'} "
                 f"own: {p.units} at once")
    return text + "."


def compare_sentences(t: Timeline, prof: Timeline, parts, prof_parts, name: str,
                      prof_name: str) -> list[str]:
    """How the schedule drawn compares with the profile's own over the same stages, device by
    device, and why, from the activations at each peak (issue 40, 6)."""
    diff = [a - b for a, b in zip(t.peaks, prof.peaks)]
    groups = []
    same = [d for d, x in enumerate(diff) if x == 0]
    if same:
        groups.append(f"device{'s' if len(same) > 1 else ''} {listed(same)} at the same level")
    for word, keep in (("lower", lambda x: x < 0), ("higher", lambda x: x > 0)):
        for d, x in enumerate(diff):
            if keep(x):
                groups.append(f"device {d} {word} by {mib(abs(x))}")
    out = [f"Against {prof_name}, the schedule the profile measured, drawn from the same "
           f"stages: {name} has " + listed(groups) + "."]
    units = [p.units for p in parts]
    prof_units = [p.units for p in prof_parts]
    if _recomputes(t):
        out.append(f"With checkpointing a device holds the activations of at most "
                   f"{plural(max(units + prof_units), 'micro-batch')} at once under either "
                   "schedule (the others in flight keep only their stage input), so the "
                   f"micro-batches in flight ({prof_name}: {counts(prof.max_in_flight)}; "
                   f"{name}: {counts(t.max_in_flight)}) matter little: the peaks move only "
                   f"with the activations at each device's peak ({name}: {counts(units)}; "
                   f"{prof_name}: {counts(prof_units)}). Without checkpointing every "
                   "micro-batch in flight keeps its activations, and the counts in flight "
                   "decide.")
    else:
        out.append("Without checkpointing every micro-batch in flight keeps its activations, "
                   f"so each device's level follows its count in flight: {name} "
                   f"{counts(t.max_in_flight)} against {prof_name} {counts(prof.max_in_flight)}.")
    return out


def composition(p, t: Timeline) -> str:
    state = (f"It holds its parameter state: weights {mib(p.weights)}, gradients "
             f"{mib(p.gradients)} and optimizer state {mib(p.optimizer)} "
             f"({share(p.parameter_state, p.peak)} together)")
    what = []
    if p.kept:
        what.append(f"the activations kept by {pairs_text(p.kept, t)}")
    if p.recomputing:
        what.append(f"the activations of {pairs_text(p.recomputing, t)} (recomputed in its "
                    "backward)")
    if p.inputs:
        what.append(f"the stage input{'s' if len(p.inputs) > 1 else ''} of "
                    f"{pairs_text(p.inputs, t)}")
    rest = (f", and {mib(p.activations)} ({share(p.activations, p.peak)}) for "
            + ", plus ".join(what)) if what else ""
    fixed = (f"; {mib(p.fixed)} more is held all iteration" if p.fixed >= 2**20 / 10 else "")
    return state + rest + fixed + "."


def why(p, q) -> str:
    state_gap = p.parameter_state - q.parameter_state
    flight_gap = p.activations - q.activations
    if state_gap >= flight_gap:
        return (f"mostly its parameter state: weights, gradients and optimizer state take "
                f"{mib(p.parameter_state)} against device {q.device}'s {mib(q.parameter_state)}")
    if p.units > q.units:
        return (f"mostly the activations on it: those of {plural(p.units, 'micro-batch')} "
                f"against {q.units} on device {q.device}, {mib(p.activations)} against "
                f"{mib(q.activations)}")
    return (f"mostly what a micro-batch's activations take there: {mib(p.activations)} against "
            f"device {q.device}'s {mib(q.activations)}")


def measured_sentences(measured, drawn, breakdown, under: str, at_profiled: bool) -> list[str]:
    """The measured peaks beside the ones drawn, named by what they were measured under
    (``measured`` is only given when that is the schedule drawn)."""
    if measured is None:
        return []
    worst = max(range(len(measured)), key=lambda d: measured[d])
    errors = [(p - m) / m for p, m in zip(drawn, measured) if m > 0]
    off = max((abs(e) for e in errors), default=0.0)
    what = "predicted peaks the curves are drawn from" if at_profiled else "peaks drawn"
    text = (f"Measured under {under}: device {worst} was the fullest at {mib(measured[worst])}; "
            f"the {what} are within {100 * off:.1f}% of the measured ones on every device.")
    if worst != max(range(len(drawn)), key=lambda d: drawn[d]):
        text += " The model names another device as the fullest: trust the measurement."
    lines = [text]
    if breakdown is not None and worst < len(breakdown):
        b = breakdown[worst]
        lines.append(f"Measured at device {worst}'s peak: weights {mib(b.weights)}, gradients "
                     f"{mib(b.gradients)}, optimizer state {mib(b.optimizer)}, and "
                     f"{mib(b.other)} of activations, buffers and workspaces.")
    return lines


def unmeasured_sentence(under: str, name: str, at_profiled: bool) -> str:
    if not under:
        return ("This partitioning was not measured at the profile's setup, so the peaks are "
                "predicted only (measure it on the Predict vs measure page).")
    return (f"This partitioning was measured under {under}, not under {name} as drawn "
            "here: a peak measured under one schedule or micro-batch count is not another's, "
            "so the measured peaks are not drawn.")


def step_sentence(t: Timeline, step: int, levels: bool = True) -> str:
    """What the time cursor shows at ``step``: what runs, who waits, and the fullest device
    then (or, without levels, the one holding the most)."""
    run, idle = [], []
    for d in range(t.stages):
        ops = t.running(d, step)
        if ops:
            run.append(f"device {d} {' then '.join(o.label for o in ops)}"
                       + (f" (stage {listed(sorted({o.chunk for o in ops}))})"
                          if t.virtual > 1 else ""))
        else:
            idle.append(d)
    text = f"Step {step} of 0-{t.steps - 1}: " + (("running " + listed(run)) if run
                                                 else "nothing runs")
    if idle:
        text += f"; device{'s' if len(idle) > 1 else ''} {listed(idle)} wait{'' if len(idle) > 1 else 's'}"
    if levels:
        top = max(range(t.stages), key=lambda d: t.memory[d][step])
        what = "the fullest device now"
    else:
        top = max(range(t.stages), key=lambda d: len(t.held[d][step]))
        what = "holding the most now"
    held = t.held[top][step]
    text += (f". {what.capitalize()}: device {top}"
             + (f" at {mib(t.memory[top][step])}" if levels else "")
             + (f", holding {pairs_text(held, t)}" if held else ", holding no micro-batch"))
    return text + "."
