"""Partitionings of L layers into G·V chunks by predicted per-rank peak (issue 39, item 3).
Pure. :class:`RankCosts` predicts one partitioning under one action list
(:meth:`mcap.core.schedules.memory.EventModel.rank_peaks`); :func:`search` finds the one with
the lowest predicted peak, ties broken by the sorted per-rank peaks as mCAP's tie-break:
every partitioning when there are at most :data:`MAX_ENUMERATED`, else a local search from
several starts (each move shifts one boundary by one layer), which is not exhaustive and
says so."""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Sequence

from mcap.core.errors import McapError
from mcap.core.schedules import memory
from mcap.core.schedules.actions import ActionList

MAX_ENUMERATED = 200_000  # partitionings searched one by one; beyond: local search


@dataclass
class RankCosts:
    """Predicted per-rank peaks of partitionings into ``G·V`` chunks under one action list."""
    model: memory.EventModel
    actions: ActionList

    @property
    def ranks(self) -> int:
        return self.actions.stages

    @property
    def num_chunks(self) -> int:
        return self.actions.num_chunks

    @property
    def num_layers(self) -> int:
        return self.model.num_layers

    def peaks(self, balance: Sequence[int]) -> tuple[int, ...]:
        return self.model.rank_peaks(balance, self.actions)

    def peak(self, balance: Sequence[int]) -> int:
        return max(self.peaks(balance))


def _key(peaks: Sequence[int]) -> tuple:
    return tuple(sorted(peaks, reverse=True))


def space_size(num_layers: int, chunks: int) -> int:
    return math.comb(num_layers - 1, chunks - 1) if chunks <= num_layers else 0


def all_balances(num_layers: int, chunks: int):
    for cuts in itertools.combinations(range(1, num_layers), chunks - 1):
        prev, out = 0, []
        for c in (*cuts, num_layers):
            out.append(c - prev)
            prev = c
        yield tuple(out)


def even(num_layers: int, chunks: int) -> tuple[int, ...]:
    """Layers split as evenly as possible, the extra ones on the first chunks."""
    q, r = divmod(num_layers, chunks)
    return tuple(q + (1 if i < r else 0) for i in range(chunks))


@dataclass(frozen=True)
class Found:
    balance: tuple[int, ...]
    peaks: tuple[int, ...]
    evaluated: int
    exhaustive: bool


def search(costs: RankCosts, *, starts: Sequence[Sequence[int]] = (),
           limit: int = MAX_ENUMERATED) -> Found:
    """The partitioning with the lowest predicted peak (module docstring)."""
    L, n = costs.num_layers, costs.num_chunks
    if n > L:
        raise McapError(f"{n} chunks (ranks x virtual stages) but the model has {L} layers")
    if space_size(L, n) <= limit:
        best, count, why = None, 0, None
        for b in all_balances(L, n):
            count += 1
            try:
                p = costs.peaks(b)
            except McapError as exc:  # a chunk the profiles could not measure (its run failed)
                why = why or str(exc)
                continue
            if best is None or _key(p) < _key(best[1]):
                best = (b, p)
        if best is None:
            raise McapError(f"no partitioning can be predicted: {why}")
        return Found(best[0], best[1], count, True)
    return _local(costs, [even(L, n), *map(tuple, starts)])


def _local(costs: RankCosts, starts) -> Found:
    """Steepest descent over one-layer boundary moves, from each start."""
    seen: dict = {}

    def value(b):
        if b not in seen:
            try:
                seen[b] = costs.peaks(b)
            except McapError:  # not predictable (a chunk the profiles could not measure)
                seen[b] = (float("inf"),)
        return seen[b]

    best = None
    for start in starts:
        cur = tuple(start)
        while True:
            nbrs = []
            for i in range(len(cur) - 1):
                for d in (-1, 1):
                    b = list(cur)
                    b[i] -= d
                    b[i + 1] += d
                    if b[i] >= 1 and b[i + 1] >= 1:
                        nbrs.append(tuple(b))
            nxt = min(nbrs, key=lambda b: _key(value(b)), default=cur)
            if _key(value(nxt)) >= _key(value(cur)):
                break
            cur = nxt
        if best is None or _key(value(cur)) < _key(value(best)):
            best = cur
    return Found(best, value(best), len(seen), False)
