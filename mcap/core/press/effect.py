"""A plan's effect on one stage over one iteration (issue 16 item 6; MPress III-B/C/D: the
executor's swap-out / drop and swap-in / recompute operators). Pure.

On the teaching timeline (``mcap.core.timeline.simulate``: unit forwards, backwards of
``backward_steps``), every reduced layer ``l`` of the chosen stage, for every micro-batch
``m``, **leaves** right after its forward inside F(m) (recompute: dropped; swap: out to host;
d2d: out to the target stage) and **returns** when its backward starts inside B(m)
(recompute: recomputed; swap / d2d: in again); a stage's layers run forward in order and
backward in reverse, each taking its share of the op by its measured ``forward_seconds``.
Between the two its movable bytes (``Problem.movable``: pinned stage inputs / outputs never
leave) are not on the device. Bytes other stages d2d-swap to this one are held here from the
end of the sender's F(m) to the start of its B(m).

The curve without the plan is the timeline's level (``Timeline.memory``, calibrated from
mCAP's prediction); the curve with the plan subtracts what is away and adds what is held for
peers, at every event time. It shows *when*; the peak the planner promises is
``model.outcome`` (which also counts the backward transient this curve leaves out).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from mcap.core.errors import McapError
from mcap.core.press.problems import Problem
from mcap.core.press.actions import LayerAction
from mcap.core.timeline import Timeline

LEAVE = {"recompute": "dropped", "swap": "swap out", "d2d": "d2d out"}
RETURN = {"recompute": "recomputed", "swap": "swap in", "d2d": "d2d in"}


@dataclass(frozen=True)
class Event:
    time: float          # timeline steps
    stage: int           # where the bytes leave or return
    layer: int
    microbatch: int
    what: str            # LEAVE / RETURN values, or "held for stage S" / "given back to stage S"
    nbytes: int          # + arrives on ``stage``, - leaves it


@dataclass(frozen=True)
class Effect:
    stage: int
    events: tuple[Event, ...]                 # sorted by time
    times: tuple[float, ...]                  # curve sample points (step edges and events)
    without: tuple[int, ...]                  # bytes, the timeline's level
    with_plan: tuple[int, ...]                # bytes, after the plan


def _layer_times(op_start: int, op_end: int, forward: Sequence[float], backward: bool):
    """Per layer of a stage: the time inside one op when its forward ends (forward op) or its
    backward starts (backward op: layers in reverse), by the layers' forward-time shares."""
    total = sum(forward) or float(len(forward))
    share = [(f if sum(forward) else 1.0) / total for f in forward]
    span = op_end - op_start
    out, acc = [], 0.0
    if not backward:
        for x in share:
            acc += x
            out.append(op_start + span * acc)
        return out
    for x in share:  # layer k's backward starts after the backwards of the layers after it
        acc += x
        out.append(op_start + span * (1.0 - acc))
    return out


def effect(p: Problem, actions: Sequence[LayerAction], tl: Timeline, stage: int) -> Effect:
    """What leaves stage ``stage`` and returns when under ``actions``, and its memory curve
    with and without them (module docstring). ``tl`` must be the timeline of ``p``'s balance."""
    if tuple(tl.balance) != tuple(p.balance):
        raise McapError(f"the timeline is of balance {','.join(map(str, tl.balance))}, the "
                        f"plan of {','.join(map(str, p.balance))}")
    if not 0 <= stage < p.stages:
        raise McapError(f"stage {stage!r} is not one of 0..{p.stages - 1}")
    if len(actions) != len(p.saved):
        raise McapError(f"{len(actions)} actions for {len(p.saved)} layers")
    ops = {(o.kind, o.device, o.microbatch): (o.start, o.end) for o in tl.ops}
    events: list[Event] = []
    for s in range(p.stages):
        layers = list(p.layers(s))
        fwd = [p.forward[l] for l in layers]
        for m in range(tl.chunks):
            leave = _layer_times(*ops[("F", s, m)], fwd, backward=False)
            back = _layer_times(*ops[("B", s, m)], fwd, backward=True)
            for k, l in enumerate(layers):
                a = actions[l]
                n = p.movable(l)
                if a.action == "keep" or n == 0:
                    continue
                if s == stage:
                    events.append(Event(leave[k], s, l, m, LEAVE[a.action], -n))
                    events.append(Event(back[k], s, l, m, RETURN[a.action], n))
                if a.action == "d2d" and a.target == stage:
                    events.append(Event(leave[k], stage, l, m, f"held for stage {s}", n))
                    events.append(Event(back[k], stage, l, m, f"given back to stage {s}", -n))
    events.sort(key=lambda e: (e.time, e.nbytes))
    level = tl.memory[stage]
    floor = tl.stage_memory[stage].static
    times = sorted({float(t) for t in range(tl.steps + 1)} | {e.time for e in events})
    without, with_plan, delta, i = [], [], 0, 0
    for t in times:
        while i < len(events) and events[i].time <= t:
            delta += events[i].nbytes
            i += 1
        base = level[min(int(t), tl.steps - 1)]
        without.append(base)
        with_plan.append(max(base + delta, floor))  # parameter state never leaves
    return Effect(stage, tuple(events), tuple(times), tuple(without), tuple(with_plan))
