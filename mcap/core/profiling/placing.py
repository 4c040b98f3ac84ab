"""Placing windows inside profiling runs (``mcap.core.profiling.schedule``): whether layers
a..z can be one stage of a run beside other windows (:func:`_fits`), the stage sizes that
hold them with the gaps spread evenly (:func:`_materialise`), a run under construction
(:class:`_Slot`), and windows matched or packed into runs. Pure."""
from __future__ import annotations

from typing import Iterable, Optional, Sequence

from mcap.core.errors import McapError

Window = tuple[int, int]


def _nz(n: int) -> int:
    return 1 if n > 0 else 0


def _fits(first: int, last: int, stages: int, wins: Sequence[Window]) -> bool:
    """Can layers first..last be cut into ``stages`` stages that include every window?"""
    ws = sorted(wins)
    gaps, pos = [], first
    for a, z in ws:
        if a < pos or z > last:
            return False
        gaps.append(a - pos)
        pos = z + 1
    gaps.append(last + 1 - pos)
    lo = len(ws) + sum(_nz(g) for g in gaps)
    hi = len(ws) + sum(gaps)
    return lo <= stages <= hi


def _even(n: int, parts: int) -> list[int]:
    q, r = divmod(n, parts)
    return [q + 1] * r + [q] * (parts - r)


def _materialise(first: int, last: int, stages: int, wins: Sequence[Window], shift: int = 0) -> list[int]:
    """Stage sizes for layers first..last holding ``wins`` as stages, gaps spread evenly.

    Extra stages go to the gaps with the most layers per stage; ``shift`` rotates which
    gaps get them, giving alternative fills when the first one is to be avoided.
    """
    ws = sorted(wins)
    gaps, pos = [], first
    for a, z in ws:
        gaps.append(a - pos)
        pos = z + 1
    gaps.append(last + 1 - pos)
    alloc = [_nz(g) for g in gaps]
    spare = stages - len(ws) - sum(alloc)
    order = list(range(len(gaps)))
    for _ in range(spare):
        cand = [i for i in order if alloc[i] < gaps[i]]
        cand.sort(key=lambda i: (-gaps[i] / alloc[i] if alloc[i] else 0, i))
        alloc[cand[shift % len(cand)] if shift else cand[0]] += 1
    out: list[int] = []
    for i, g in enumerate(gaps):
        if alloc[i]:
            out.extend(_even(g, alloc[i]))
        if i < len(ws):
            out.append(ws[i][1] - ws[i][0] + 1)
    return out


class _Slot:
    """A run under construction: fixed prefix stages plus a free region first..L-1."""

    def __init__(self, head: list[int], first: int, last: int, stages: int):
        self.head, self.first, self.last, self.stages = head, first, last, stages
        self.wins: list[Window] = []

    def can_take(self, w: Window) -> bool:
        if any(not (w[1] < a or z < w[0]) for a, z in self.wins):
            return False
        return _fits(self.first, self.last, self.stages, self.wins + [w])

    def balance(self, shift: int = 0) -> tuple[int, ...]:
        if self.stages == 0:
            return tuple(self.head)
        return tuple(self.head + _materialise(self.first, self.last, self.stages, self.wins, shift))


def _match(windows: Sequence[Window], slots: Sequence[_Slot]) -> dict[int, int]:
    """Bipartite matching (Kuhn) of windows to slots, at most one window per slot."""
    owner: dict[int, int] = {}
    # Later slots first: in R_k a larger k leaves a smaller free region, so the placed
    # window shares it with fewer layers and the run stays closer to even.
    options = [[j for j in reversed(range(len(slots))) if slots[j].can_take(windows[i])]
               for i in range(len(windows))]

    def augment(i: int, seen: set) -> bool:
        for j in options[i]:
            if j in seen:
                continue
            seen.add(j)
            if j not in owner or augment(owner[j], seen):
                owner[j] = i
                return True
        return False

    for i in sorted(range(len(windows)), key=lambda i: len(options[i])):
        augment(i, set())
    return {i: j for j, i in owner.items()}


def _pack_new(windows: Iterable[Window], num_layers: int, stages: int,
              max_stage: Optional[int] = None) -> list[_Slot]:
    """First-fit the windows into fresh whole-model runs; each run takes disjoint ones.

    With ``max_stage``, a window joins a run only if no stage of the filled run gets
    more layers than that (a run packed with many windows leaves big leftover stages,
    which may run out of memory); a window alone always gets its own run.
    """
    new: list[_Slot] = []

    def ok(s: _Slot, w: Window) -> bool:
        if not s.can_take(w):
            return False
        if max_stage is None:
            return True
        return max(_materialise(s.first, s.last, s.stages, s.wins + [w])) <= max_stage

    for w in sorted(windows, key=lambda w: (-(w[1] - w[0]), w)):
        for s in new:
            if ok(s, w):
                s.wins.append(w)
                break
        else:
            s = _Slot([], 0, num_layers - 1, stages)
            if not s.can_take(w):
                raise McapError(f"window of layers {w[0]}..{w[1]} cannot be a stage of a "
                                f"{stages}-stage partitioning of {num_layers} layers")
            s.wins.append(w)
            new.append(s)
    return new
