"""MPress's approximated search (MPress III-D), over the model of ``model.py``. Pure.

1. **Initial assignment** (III-D, "we first aggressively assign ..."): on every stage over
   the capacity, layers are taken by penalty per freed byte, cheapest first, each with the
   cheaper of GPU-CPU swap and recomputation, until the stage fits. Layers whose live
   interval hides the swap entirely (penalty 0: "extremely long live intervals") come
   first; recomputation is chosen where it costs less than the swap (footnote 2's swap
   penalty); ties go to the later layer (the second observation: recompute the latter
   layers). No D2D yet: spare peer memory is scarce and kept for step 2.
2. **Iterative replacement** (III-D, "gradually replacing ... with D2D swap"): the reduced
   layers are visited by their penalty, highest first (the emulator's "most extra
   overhead"; here the model's), and three replacements are tried: moving the layer to D2D
   swap on a peer (a peer without the room makes it, cheapest first), keeping it and
   covering the stage again cheapest-first with D2D allowed, or reducing one other layer
   of the stage instead. A replacement is accepted
   only if every device still fits and the added time drops, judged after the reductions
   it makes unnecessary are dropped (most costly first: one layer reduced in place of two
   shows its worth only then); the search ends when a full pass improves nothing.
3. **A second start**: steps 1-2 again with D2D allowed in step 1 wherever a peer has room;
   the cheaper plan is returned (one-layer replacements cannot redistribute peer memory
   wholesale; on 100 random cases this lowers the worst ratio to the exact plan from 2.6x
   to 2.0x, bench/log/2026-11-23-mpress-planner.md).

The device mapping of III-C (which GPU holds which stage) is the identity here: stage i
runs on device i and every pair of devices has the same measured ``d2d_bandwidth``
(III-C: "for symmetric GPU connections, this algorithm simply skips the above logic").
"""
from __future__ import annotations

from typing import Optional

from mcap.core.press.model import (
    floor_actions, keep, outcome, smallest_capacity, unreachable,
)
from mcap.core.press.problems import Problem
from mcap.core.press.base import Planner, register
from mcap.core.press.actions import LayerAction

EPS = 1e-12


def _total(p: Problem, acts) -> float:
    return outcome(p, acts).added_seconds


def _cover(p: Problem, acts: list, s: int, cap: int, d2d: bool, skip=(),
           recompute: bool = True) -> Optional[list]:
    """``acts`` with keep layers of stage ``s`` reduced, cheapest per byte the stage's peak
    actually drops first (a recompute segment's pins can make it drop less than the
    layer's bytes, or not at all: model.py), until the stage fits (None if it cannot).
    Other stages must stay under ``cap``."""
    acts = list(acts)
    o = outcome(p, acts)
    while o.peaks[s] > cap:
        best = None
        for l in p.layers(s):
            if acts[l].action != "keep" or l in skip or p.movable(l) == 0:
                continue
            opts = ([("recompute", None)] if recompute else []) + [("swap", None)]
            if d2d:
                freed = p.held[s] * p.movable(l)
                opts += [("d2d", t) for t in range(p.stages)
                         if t != s and o.peaks[t] + freed <= cap]
            for action, target in opts:
                trial = list(acts)
                trial[l] = LayerAction(l, action, target)
                drop = o.peaks[s] - outcome(p, trial).peaks[s]
                # a step that does not lower the peak (a new transient, a pin) comes last,
                # ranked by the bytes it moves: together with others it may still help
                key = (drop <= 0, p.costs[l][action] / (drop if drop > 0 else
                                                        p.held[s] * p.movable(l)),
                       -l, -p.saved[l], action != "recompute")
                if best is None or key < best[0]:
                    best = (key, trial[l])
        if best is None:
            return None
        acts[best[1].layer] = best[1]
        o = outcome(p, acts)
    return acts


def _cover_any(p: Problem, acts: list, s: int, cap: int, d2d: bool) -> Optional[list]:
    """``_cover``, and when its greedy choices (a recompute that pins) leave the stage over,
    again with swaps only (None when even that leaves it over: a layer whose backward
    bytes outweigh what it frees; the caller starts from ``floor_actions`` then)."""
    return _cover(p, acts, s, cap, d2d) or _cover(p, acts, s, cap, d2d, recompute=False)


def _prune(p: Problem, acts: list, cap: int) -> list:
    """Keep again every reduced layer the plan does not need, most costly first."""
    order = sorted((l for l, a in enumerate(acts) if a.action != "keep"),
                   key=lambda l: -p.costs[l][acts[l].action])
    for l in order:
        trial = list(acts)
        trial[l] = LayerAction(l)
        if outcome(p, trial).fits(cap):
            acts = trial
    return acts


def _exchanges(p: Problem, kept: list, s: int, l: int) -> list:
    """Plans where another kept layer of stage ``s`` is reduced instead of ``l``, with each
    of its options cheaper than ``l``'s current one (the caller checks fit and cost)."""
    out = []
    for m in p.layers(s):
        if m == l or kept[m].action != "keep" or p.movable(m) == 0:
            continue
        for action in ("recompute", "swap", "d2d"):
            targets = [t for t in range(p.stages) if t != s] if action == "d2d" else [None]
            for t in targets:
                trial = list(kept)
                trial[m] = LayerAction(m, action, t)
                out.append(trial)
    return out


def plan(p: Problem, capacity: int) -> list[LayerAction]:
    """The actions (one per layer) of MPress's approximated search under ``capacity``."""
    if smallest_capacity(p) > capacity:
        raise unreachable(p, capacity)
    acts = keep(p)
    for s in reversed(range(p.stages)):  # later stages first (III-D, second observation)
        acts = _cover_any(p, acts, s, capacity, d2d=False)
        if acts is None:  # a layer's backward bytes outweigh what it frees: the exact floor
            acts = floor_actions(p)  # fits (smallest_capacity), pruned and improved below
            break
    first = _improve(p, _prune(p, acts, capacity), capacity)
    # A second start with D2D allowed from the beginning (where peers have room): the
    # replacement step moves one layer at a time and cannot rebuild a plan that shares
    # peer memory differently; the cheaper of the two plans is kept.
    acts = keep(p)
    for s in reversed(range(p.stages)):
        acts = _cover_any(p, acts, s, capacity, d2d=True) or _cover_any(p, acts, s, capacity, d2d=False)
        if acts is None:
            acts = floor_actions(p)
            break
    second = _improve(p, _prune(p, acts, capacity), capacity)
    return min((first, second), key=lambda a: _total(p, a))


def _improve(p: Problem, acts: list, capacity: int) -> list:
    """Step 2 (module docstring): replacements accepted only when they lower the added time."""
    stage = p.stage_of()
    improved = True
    while improved:
        improved = False
        cost = _total(p, acts)
        reduced = sorted((l for l, a in enumerate(acts) if a.action != "keep"),
                         key=lambda l: -p.costs[l][acts[l].action])
        for l in reduced:
            s, a = stage[l], acts[l]
            trials = []
            if a.action != "d2d" and p.costs[l]["d2d"] < p.costs[l][a.action]:
                for t in range(p.stages):
                    if t == s:
                        continue
                    trial = list(acts)
                    trial[l] = LayerAction(l, "d2d", t)
                    # a peer without the room makes it, cheapest first (itself d2d or not)
                    trial = _cover(p, trial, t, capacity, d2d=True)
                    if trial is not None:
                        trials.append(trial)
            kept = list(acts)
            kept[l] = LayerAction(l)
            covered = _cover(p, kept, s, capacity, d2d=True, skip=(l,))
            if covered is not None:
                trials.append(covered)
            trials += _exchanges(p, kept, s, l)
            best = None
            for trial in trials:
                if not outcome(p, trial).fits(capacity):
                    continue
                # judged after dropping what it makes unnecessary: one layer reduced instead
                # of two can only show its worth once the second is kept again
                trial = _prune(p, trial, capacity)
                t = _total(p, trial)
                if t < cost - EPS and (best is None or t < best[0]):
                    best = (t, trial)
            if best is not None:
                acts = best[1]
                improved = True
            if improved:
                break
    return acts


@register
class MPress(Planner):
    name, label = "mpress", "MPress (approximated, III-D)"
    help = "MPress's approximated search (III-D): fast, near the optimum"
    color = "#4c78a8"

    def plan(self, p: Problem, capacity: int) -> list[LayerAction]:
        return plan(p, capacity)
