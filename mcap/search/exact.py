"""Exact search: a min-max dynamic programme over prefix sums with the sorted-vector tie-break.

Why a plain min-max DP is not enough: it finds the lowest peak, but among the many
partitionings sharing it, it keeps an arbitrary one; mCAP 3.4 wants the one whose
remaining devices are lowest, recursively (``tiebreak``). We therefore run the DP over
*vectors*: ``best[g][j]`` is the lexicographically smallest high-to-low sorted vector of
stage costs over all ways to put layers 0..j-1 on g stages, and

    best[g][j] = min over i of  merge(best[g-1][i], cost(i..j-1)).

Correctness. Write c_X(t) = #{x in X : x >= t} for a multiset X. Comparing sorted
vectors of equal length lexicographically is the same as comparing the functions c_X
scanning t from +inf downwards: at the first t where they differ, fewer is better. Since
c_{X+S} = c_X + c_S, merging the same S into two vectors keeps their order, strictly:
A < A' implies merge(A, S) < merge(A', S). Hence if an optimal partitioning's last stage
starts at i, replacing its first g-1 stages by best[g-1][i] cannot make it worse, so
restricting the DP to the best prefix at every (g, i) loses nothing (optimal substructure),
and strictness means a tie at (g, j) can only come from optimal prefixes. Equal vectors
are settled by the smallest balance: keeping at each (g, i) the smallest prefix balance
among the optimal ones yields the smallest full balance (the last stage is fixed by i).
The tolerance band is applied to the costs elementwise before the DP, which preserves the
argument. Negative mem_added is fine: nothing assumes costs grow with the stage.

Speed. cost(i..j) = iso[i] + A[j] - A[i] from prefix sums (Listing 1.1), so a level g is
one (L x L) numpy pass for the first vector entry (the min-max value); the full vectors are
compared only for the j where several i tie on it. O(G L^2) time, O(L^2) memory.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from mcap.predict import CostTable
from mcap.search.tiebreak import Band

_INF = np.iinfo(np.int64).max // 4


def cost_matrix(table: CostTable) -> np.ndarray:
    """C[i, j] = cost of a stage with layers i..j-1 (j > i); +inf elsewhere. Shape (L, L+1)."""
    L = table.num_layers
    i = np.arange(L)[:, None]
    j = np.arange(L + 1)[None, :]
    last = np.clip(j - 1, 0, L - 1)
    c = table.iso[i] + table.prefix[last] - table.prefix[i]
    return np.where(j > i, c, _INF)


def minmax(table: CostTable, stages: int) -> int:
    """The lowest achievable peak (plain min-max DP), used for the tolerance band."""
    C = cost_matrix(table)
    L = table.num_layers
    f = C[0].copy()  # one stage: layers 0..j-1
    for g in range(2, stages + 1):
        f = np.min(np.maximum(f[:L, None], C), axis=0)
        f[:g] = _INF
    return int(f[L])


def solve(table: CostTable, stages: int, band: Optional[Band] = None,
          progress: Optional[Callable[[int, int], None]] = None) -> tuple[tuple[int, ...], int]:
    """(balance, transitions considered) of the best partitioning into ``stages`` stages."""
    L, G = table.num_layers, stages
    C = cost_matrix(table)
    if band is not None:
        valid = C < _INF
        C = np.where(valid, band.apply(C), _INF)
    js = np.arange(L + 1)
    # Level 1: layers 0..j-1 on one stage.
    vec = C[0][:, None].copy()  # (L+1, 1)
    bal = js[:, None].copy()
    work = L
    for g in range(2, G + 1):
        lo_j, hi_j = g, L - (G - g)  # prefixes that leave one layer per later stage
        prev_ok = np.zeros(L + 1, dtype=bool)
        prev_ok[g - 1: hi_j] = True  # i = start of the last stage
        head = np.where(prev_ok, vec[:, 0], _INF)[:L]
        M = np.maximum(head[:, None], C)  # (L, L+1): first entry of each candidate
        M[~prev_ok[:L], :] = _INF
        M[:, :lo_j] = _INF
        M[:, hi_j + 1:] = _INF
        f = M.min(axis=0)
        nvec = np.full((L + 1, g), _INF, dtype=np.int64)
        nbal = np.zeros((L + 1, g), dtype=np.int64)
        cols = np.arange(lo_j, hi_j + 1)
        ties = (M[:, cols] == f[cols][None, :])
        nties = ties.sum(axis=0)
        work += int((cols - g + 1).sum())
        single = cols[nties == 1]
        if single.size:
            istar = M[:, single].argmin(axis=0)
            merged = np.concatenate([vec[istar], C[istar, single][:, None]], axis=1)
            nvec[single] = np.sort(merged, axis=1)[:, ::-1]
            nbal[single, :-1] = bal[istar]
            nbal[single, -1] = single - istar
        for j in cols[nties > 1]:
            cand = np.flatnonzero(M[:, j] == f[j])
            merged = np.sort(np.concatenate([vec[cand], C[cand, j][:, None]], axis=1), axis=1)[:, ::-1]
            cbal = np.concatenate([bal[cand], (j - cand)[:, None]], axis=1)
            keys = [cbal[:, c] for c in range(g - 1, -1, -1)] + [merged[:, c] for c in range(g - 1, -1, -1)]
            k = np.lexsort(keys)[0]
            nvec[j], nbal[j] = merged[k], cbal[k]
        vec, bal = nvec, nbal
        if progress is not None:
            progress(g - 1, G - 1)
    return tuple(int(x) for x in bal[L]), work
