"""mCAP-BF (3.4): predict every one of the C(L-1, G-1) partitionings and keep the best.

Vectorised and streaming: ``mcap.partition.iter_cut_chunks`` yields the cut points a
chunk at a time (never a list of all candidates); a chunk's stage costs are gathered from
the prefix sums in a few numpy operations, and only rows tying on the lowest peak are
sorted for the tie-break. Refuses more than ``MAX_PARTITIONINGS`` (10^9, about a minute
and a half at the measured ~10-20 M/s on one core) with the count in the message; pass
``max_partitionings=`` to raise it.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from mcap.errors import SearchTooLarge
from mcap.partition import count, cuts_to_balances, iter_cut_chunks
from mcap.predict import CostTable
from mcap.search.tiebreak import Band, key

MAX_PARTITIONINGS = 10 ** 9


def _costs(table: CostTable, cuts: np.ndarray, L: int) -> np.ndarray:
    m, k = cuts.shape
    starts = np.empty((m, k + 1), dtype=np.int64)
    starts[:, 0] = 0
    starts[:, 1:] = cuts
    ends = np.empty_like(starts)
    ends[:, :-1] = cuts - 1
    ends[:, -1] = L - 1
    return table.iso[starts] + table.prefix[ends] - table.prefix[starts]


def check_size(L: int, G: int, cap: int) -> int:
    n = count(L, G)
    if n > cap:
        raise SearchTooLarge(f"brute force over {n:,} partitionings of {L} layers on {G} stages exceeds "
                             f"the cap of {cap:,}; use method 'exact' (same answer) or 'bo'")
    return n


def lowest_peak(table: CostTable, G: int) -> int:
    L = table.num_layers
    best = None
    for cuts in iter_cut_chunks(L, G):
        m = int(_costs(table, cuts, L).max(axis=1).min())
        best = m if best is None else min(best, m)
    return int(best)


def solve(table: CostTable, G: int, band: Optional[Band] = None,
          progress: Optional[Callable[[int, int], None]] = None,
          max_partitionings: int = MAX_PARTITIONINGS) -> tuple[tuple[int, ...], int]:
    L = table.num_layers
    total = check_size(L, G, max_partitionings)
    best_key, best_top, done = None, None, 0
    for cuts in iter_cut_chunks(L, G):
        costs = _costs(table, cuts, L)
        if band is not None:
            costs = band.apply(costs)
        top = costs.max(axis=1)
        m = int(top.min())
        done += len(cuts)
        if best_top is None or m <= best_top:
            rows = np.flatnonzero(top == m)
            bals = cuts_to_balances(cuts[rows], L)
            sub = np.sort(costs[rows], axis=1)[:, ::-1]
            for r in range(len(rows)):
                k = (tuple(sub[r].tolist()), tuple(bals[r].tolist()))
                if best_key is None or k < best_key:
                    best_key = k
            best_top = m if best_top is None else min(best_top, m)
        if progress is not None:
            progress(done, total)
    return best_key[1], done
