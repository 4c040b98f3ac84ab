"""Checkpointing chosen per stage (issue 39, item 5). Pure. A rank's peak depends only on
its own chunks and their checkpoint modes, so each rank's modes are chosen on their own
(:func:`choose_checkpointing`): the lowest peak, or under a capacity the fewest recomputed
layer forwards with every rank fitting."""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Optional, Sequence

from mcap.core.errors import McapError
from mcap.core.schedules import memory
from mcap.core.schedules.actions import ActionList
from mcap.core.schedules.search import (
    MAX_ENUMERATED, RankCosts, _key, all_balances, even, search, space_size)


def recomputed(balance: Sequence[int], modes: Sequence[str], chunks: int) -> int:
    """Layer forwards recomputed per step: a chunk checkpointed ``always`` recomputes each
    of its layers for every micro-batch, ``except_last`` for all but the last, ``never``
    for none."""
    per = {"never": 0, "except_last": chunks - 1, "always": chunks}
    return sum(n * per[m] for n, m in zip(balance, modes))


@dataclass(frozen=True)
class Checkpointed:
    """A partitioning with a checkpoint mode per chunk, its per-rank peaks and how many
    layer forwards it recomputes per step."""
    balance: tuple[int, ...]
    modes: tuple[str, ...]
    peaks: tuple[int, ...]
    recomputed: int
    evaluated: int
    exhaustive: bool

    @property
    def peak(self) -> int:
        return max(self.peaks)


def choose_checkpointing(model: memory.EventModel, al: ActionList,
                         capacity: Optional[int] = None,
                         modes: Optional[Sequence[str]] = None,
                         limit: int = MAX_ENUMERATED) -> Checkpointed:
    """The partitioning and which chunks checkpoint (issue 39, item 5): without a capacity
    the lowest peak (fewest recomputed layers among equals); under ``capacity`` bytes per
    device the fewest recomputed layer forwards with every rank fitting (lowest peak among
    equals). A rank's peak depends only on its own chunks and their modes, so each rank's
    modes are chosen on their own (every combination of ``modes``, default: the modes the
    profiles measured); the partitionings are enumerated up to ``limit``, else searched
    locally. McapError when nothing fits, naming the lowest peak found."""
    modes = tuple(sorted(modes or model.modes))
    L, n, M = model.num_layers, al.num_chunks, al.chunks
    evaluated = 0

    def best_for(balance):
        nonlocal evaluated
        chosen, peaks = [None] * n, []
        for r in range(al.stages):
            held = al.placement[r]
            options = []
            for combo in itertools.product(modes, repeat=len(held)):
                per = [modes[0]] * n
                for c, m in zip(held, combo):
                    per[c] = m
                p = model.rank_peak(balance, al, r, per)
                evaluated += 1
                cost = sum(balance[c] * {"never": 0, "except_last": M - 1, "always": M}[m]
                           for c, m in zip(held, combo))
                options.append((capacity is not None and p > capacity, cost, p, combo)
                               if capacity is not None else (p, cost, combo))
            pick = min(options)
            combo = pick[-1]
            for c, m in zip(held, combo):
                chosen[c] = m
            peaks.append(pick[2] if capacity is not None else pick[0])
        return tuple(chosen), tuple(peaks)

    def key(balance):
        chosen, peaks = best_for(balance)
        fits = capacity is None or max(peaks) <= capacity
        cost = recomputed(balance, chosen, M)
        k = (not fits, cost, _key(peaks)) if capacity is not None else (_key(peaks), cost)
        return k, chosen, peaks

    exhaustive = space_size(L, n) <= limit
    pool = all_balances(L, n) if exhaustive else None
    if not exhaustive:
        pool = {search(RankCosts(model, al), limit=0).balance, even(L, n)}
    (k, chosen, peaks), balance = min(((key(b), b) for b in pool), key=lambda x: x[0][0])
    if capacity is not None and max(peaks) > capacity:
        _refuse(model, al, capacity, modes, limit)
    return Checkpointed(balance, chosen, peaks, recomputed(balance, chosen, M), evaluated,
                        exhaustive)


def _refuse(model, al, capacity: int, modes, limit: int) -> None:
    """McapError: nothing fits ``capacity``, naming the lowest peak and how it is reached."""
    from mcap.core.units import fmt_bytes as fmt
    low = choose_checkpointing(model, al, None, modes, limit)
    raise McapError(f"no partitioning fits {fmt(capacity)} per device with checkpointing "
                    f"{' or '.join(modes)} per stage: the lowest peak is {fmt(low.peak)} "
                    f"({','.join(map(str, low.balance))} with --checkpoint "
                    f"{','.join(low.modes)})")

