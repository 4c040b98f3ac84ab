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

from mcap.core.predict import CostTable
from mcap.core.search.tiebreak import Band

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
    return minmax_matrix(cost_matrix(table), stages)


def minmax_matrix(C: np.ndarray, stages: int) -> int:
    """:func:`minmax` over a cost matrix C (``cost_matrix``'s shape and meaning)."""
    L = C.shape[0]
    f = C[0].copy()  # one stage: layers 0..j-1
    for g in range(2, stages + 1):
        f = np.min(np.maximum(f[:L, None], C), axis=0)
        f[:g] = _INF
    return int(f[L])


def _keep_min(vals: np.ndarray, jj: np.ndarray) -> np.ndarray:
    """Mask of the pairs whose value is the smallest within their column group (jj sorted)."""
    starts = np.flatnonzero(np.r_[True, jj[1:] != jj[:-1]])
    mins = np.minimum.reduceat(vals, starts)
    sizes = np.diff(np.r_[starts, len(jj)])
    return vals == np.repeat(mins, sizes)


def _resolve_ties(tie: np.ndarray, cols: np.ndarray, i0: int, vec, bal, C, nvec, nbal) -> None:
    """For every column j with several tied i, keep the lexicographically smallest merged
    vector, then the smallest balance -- all columns at once, one vector entry at a time."""
    jcol, irow = np.nonzero(tie.T)  # pairs ordered by column
    ii = irow + i0
    jj = cols[jcol]
    x = C[ii, jj]
    P = vec[ii]  # (pairs, g-1), high to low
    g = P.shape[1] + 1
    pos = (P > x[:, None]).sum(axis=1)  # where x lands in the merged high-to-low vector
    for c in range(g):
        if len(np.unique(jj)) == len(jj):
            break
        below = P[:, c - 1] if c > 0 else x
        same = P[:, c] if c < g - 1 else x
        val = np.where(c < pos, same, np.where(c == pos, x, below))
        keep = _keep_min(val, jj)
        ii, jj, x, P, pos = ii[keep], jj[keep], x[keep], P[keep], pos[keep]
    B = np.concatenate([bal[ii], (jj - ii)[:, None]], axis=1)
    for c in range(g):
        if len(np.unique(jj)) == len(jj):
            break
        keep = _keep_min(B[:, c], jj)
        ii, jj, x, P, pos, B = ii[keep], jj[keep], x[keep], P[keep], pos[keep], B[keep]
    merged = np.sort(np.concatenate([P, x[:, None]], axis=1), axis=1)[:, ::-1]
    nvec[jj] = merged
    nbal[jj] = B


def solve(table: CostTable, stages: int, band: Optional[Band] = None,
          progress: Optional[Callable[[int, int], None]] = None) -> tuple[tuple[int, ...], int]:
    """(balance, transitions considered) of the best partitioning into ``stages`` stages."""
    return solve_matrix(cost_matrix(table), stages, band, progress)


def solve_matrix(C: np.ndarray, stages: int, band: Optional[Band] = None,
                 progress: Optional[Callable[[int, int], None]] = None) -> tuple[tuple[int, ...], int]:
    """:func:`solve` over any stage-cost matrix C (``cost_matrix``'s shape and meaning), so
    non-additive predictors (``mcap.core.costs``) are searched exactly too."""
    L, G = C.shape[0], stages
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
        i0, i1 = g - 1, hi_j  # i = start of the last stage, g-1 <= i < hi_j
        # First entry of each candidate vector: max(prefix's worst stage, last stage).
        M = np.maximum(vec[i0:i1, 0][:, None], C[i0:i1, lo_j:hi_j + 1])  # rows i, cols j
        f = M.min(axis=0)
        tie = M == f[None, :]
        nties = tie.sum(axis=0)
        work += (hi_j - g + 1) * (hi_j - g + 2) // 2  # sum over j of the (j - g + 1) choices of i
        nvec = np.full((L + 1, g), _INF, dtype=np.int64)
        nbal = np.zeros((L + 1, g), dtype=np.int64)
        cols = np.arange(lo_j, hi_j + 1)
        one = nties == 1
        single = cols[one]
        if single.size:
            istar = M.argmin(axis=0)[one] + i0
            merged = np.concatenate([vec[istar], C[istar, single][:, None]], axis=1)
            nvec[single] = np.sort(merged, axis=1)[:, ::-1]
            nbal[single, :-1] = bal[istar]
            nbal[single, -1] = single - istar
        if not one.all():
            _resolve_ties(tie[:, ~one], cols[~one], i0, vec, bal, C, nvec, nbal)
        vec, bal = nvec, nbal
        if progress is not None:
            progress(g - 1, G - 1)
    return tuple(int(x) for x in bal[L]), work


# --- registration ----------------------------------------------------------------------

from mcap.core.search.base import Found, Method, register  # noqa: E402
from mcap.core.search.tiebreak import make_band  # noqa: E402


@register
class Exact(Method):
    name = "exact"
    label = "exact (min-max DP)"
    help = ("the optimum under the predictor with the paper's tie-break, by a min-max "
            "dynamic programme over stage costs; evaluated counts DP transitions")
    tolerance = True

    def search(self, costs, stages, context, *, band=None, progress=None, tie_tolerance=0.0,
               **options):
        C = costs.matrix()
        if tie_tolerance:
            band = make_band(minmax_matrix(C, stages), tie_tolerance)
        balance, work = solve_matrix(C, stages, band, progress)
        return Found(balance, work)
