"""Exact search: a min-max dynamic programme with the sorted-vector tie-break (mCAP 3.4).

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
argument. Nothing assumes costs grow with the stage (negative mem_added is fine), nor that
they are additive: ``solve_matrix`` takes any cost matrix, ``solve`` builds the additive
one of Listing 1.1 from prefix sums (``cost_matrix``).

Speed (L=1000, G=64 in well under a second). A level g needs, for every end j, the
smallest first entry max(best[g-1][i][0], cost(i..j-1)) over i and the set of i reaching
it. The costs are kept transposed (row j holds every start i contiguously), rows are
processed in blocks that skip the i >= j triangle, and the tied (j, i) pairs come from
one flat scan of the equality mask. Only the few columns where several i tie need the
full vectors: their merged vectors plus balances form one key row per candidate, and a
vectorised knockout tournament (log2 of the largest tie rounds, each comparing two rows
at their first differing entry) picks the lexicographic minimum of every column at once.
O(G L^2) time, O(L^2) memory.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from mcap.core.errors import McapError
from mcap.core.predict import CostTable
from mcap.core.search.tiebreak import Band

_INF = np.iinfo(np.int64).max // 4
_ROWS = 128  # ends j per block: small enough that a block's temporaries stay in cache


def cost_matrix(table: CostTable) -> np.ndarray:
    """C[i, j] = cost of a stage with layers i..j-1 (j > i); +inf elsewhere. Shape (L, L+1)."""
    L = table.num_layers
    i = np.arange(L)[:, None]
    j = np.arange(L + 1)[None, :]
    last = np.clip(j - 1, 0, L - 1)
    c = table.iso[i] + table.prefix[last] - table.prefix[i]
    return np.where(j > i, c, _INF)


def _transposed(C, G: int, band: Optional[Band]) -> np.ndarray:
    """Check C and return CT[j, i] = cost of layers i..j-1 (band applied), _INF where j <= i."""
    C = np.asarray(C)
    if C.ndim != 2 or C.shape[0] < 1 or C.shape[1] != C.shape[0] + 1:
        raise McapError(f"cost matrix must have shape (L, L+1), got {C.shape}")
    L = C.shape[0]
    if isinstance(G, bool) or not isinstance(G, (int, np.integer)) or not 1 <= G <= L:
        raise McapError(f"stages must be an integer in 1..{L} (the layer count), got {G!r}")
    if not np.issubdtype(C.dtype, np.integer):
        raise McapError(f"cost matrix must hold integer bytes, got dtype {C.dtype}")
    CT = np.ascontiguousarray(C.T, dtype=np.int64)
    if band is not None:  # elementwise, before the DP (see the module docstring)
        CT[(CT >= band.low) & (CT <= band.high)] = band.low
    invalid = np.arange(L + 1)[:, None] <= np.arange(L)[None, :]
    CT[invalid] = _INF
    big = np.flatnonzero(CT[~invalid] >= _INF)
    if big.size:
        raise McapError(f"cost matrix entries must be below {_INF}; {big.size} are not")
    return CT


def _row_blocks(lo: int, hi: int):
    for a in range(lo, hi + 1, _ROWS):
        yield a, min(a + _ROWS, hi + 1)


def _level_min(CT: np.ndarray, first: np.ndarray, lo: int, hi: int, i0: int):
    """For ends j in lo..hi: f[j] = min over i0 <= i < j of max(first[i], CT[j, i]), and every
    tied (j, i) pair, ordered by j then i."""
    f = np.empty(hi + 1 - lo, dtype=np.int64)
    js, is_ = [], []
    for a, b in _row_blocks(lo, hi):
        ie = b - 1  # i <= j - 1 <= b - 2: skip the triangle where every entry is _INF
        M = np.maximum(CT[a:b, i0:ie], first[None, i0:ie])
        fb = M.min(axis=1)
        f[a - lo:b - lo] = fb
        flat = np.flatnonzero(M == fb[:, None])  # sparse: a few ties per row
        r, c = np.divmod(flat, ie - i0)
        js.append(r + a)
        is_.append(c + i0)
    return f, np.concatenate(js), np.concatenate(is_)


def _lexmin_groups(K: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Row index of the lexicographically smallest row of K in each group of consecutive rows
    (``starts``/``sizes``), the first one on equality: a knockout tournament, all groups at once."""
    n = K.shape[0]
    gid = np.repeat(np.arange(starts.size), sizes)
    q = np.arange(n) - starts[gid]  # position within the group
    size = sizes[gid]
    win = np.arange(n)
    step = 1
    while step < sizes.max():
        a = np.flatnonzero((q % (2 * step) == 0) & (q + step < size))
        wa, wb = win[a], win[a + step]
        Ka, Kb = K[wa], K[wb]
        d = (Ka != Kb).argmax(axis=1)  # first differing entry (0 when equal: then b < a is false)
        r = np.arange(a.size)
        win[a] = np.where(Kb[r, d] < Ka[r, d], wb, wa)
        step *= 2
    return win[starts]


def solve_matrix(C, stages: int, band: Optional[Band] = None,
                 progress: Optional[Callable[[int, int], None]] = None) -> tuple[tuple[int, ...], int]:
    """(balance, transitions considered) of the best partitioning of L layers into ``stages``
    stages, where ``C[i, j]`` (shape (L, L+1), ``cost_matrix``'s meaning) is the cost of a stage
    holding layers i..j-1; entries with j <= i are ignored. Any integer costs work: additive
    or not (non-additive predictors, ``mcap.core.costs``), negative or not."""
    G = stages
    CT = _transposed(C, G, band)
    L = CT.shape[1]
    js = np.arange(L + 1)
    vec = CT[:, 0][:, None].copy()  # level 1: layers 0..j-1 on one stage
    bal = js[:, None].copy()
    work = L
    for g in range(2, G + 1):
        lo, hi = g, L - (G - g)  # prefixes that leave one layer per later stage
        _, jj, ii = _level_min(CT, vec[:, 0], lo, hi, g - 1)
        work += (hi - g + 1) * (hi - g + 2) // 2  # sum over j of the (j - g + 1) choices of i
        # Candidate vectors: the prefix's vector with the last stage's cost inserted in order.
        # One key row per candidate: merged vector, then balance (the order of tiebreak.key).
        x = CT[jj, ii]
        P = vec[ii]
        at = np.arange(g) == (P > x[:, None]).sum(axis=1)[:, None]  # where x goes, high to low
        K = np.empty((jj.size, 2 * g), dtype=np.int64)
        merged, balance = K[:, :g], K[:, g:]
        merged[at] = x
        merged[~at] = P.ravel()  # row-major fill: P's entries around x, order kept
        balance[:, :-1] = bal[ii]
        balance[:, -1] = jj - ii
        starts = np.flatnonzero(np.r_[True, jj[1:] != jj[:-1]])
        sizes = np.diff(np.r_[starts, jj.size])
        win = _lexmin_groups(K, starts, sizes) if sizes.max() > 1 else starts
        nvec = np.full((L + 1, g), _INF, dtype=np.int64)
        nbal = np.zeros((L + 1, g), dtype=np.int64)
        nvec[jj[win]] = merged[win]
        nbal[jj[win]] = balance[win]
        vec, bal = nvec, nbal
        if progress is not None:
            progress(g - 1, G - 1)
    return tuple(int(b) for b in bal[L]), work


def solve(table: CostTable, stages: int, band: Optional[Band] = None,
          progress: Optional[Callable[[int, int], None]] = None) -> tuple[tuple[int, ...], int]:
    """(balance, transitions considered) of the best partitioning into ``stages`` stages."""
    return solve_matrix(cost_matrix(table), stages, band, progress)


def minmax_matrix(C, stages: int) -> int:
    """:func:`minmax` over a cost matrix C (``cost_matrix``'s shape and meaning)."""
    G = stages
    CT = _transposed(C, G, None)
    L = CT.shape[1]
    first = CT[:, 0].copy()
    for g in range(2, G + 1):
        lo, hi = g, L - (G - g)
        f = np.full(L + 1, _INF, dtype=np.int64)
        for a, b in _row_blocks(lo, hi):
            f[a:b] = np.maximum(CT[a:b, g - 1:b - 1], first[None, g - 1:b - 1]).min(axis=1)
        first = f
    return int(first[L])


def minmax(table: CostTable, stages: int) -> int:
    """The lowest achievable peak (plain min-max DP), used for the tolerance band."""
    return minmax_matrix(cost_matrix(table), stages)


# --- registration ----------------------------------------------------------------------

from mcap.core.search.base import Found, Method, register  # noqa: E402
from mcap.core.search.tiebreak import make_band  # noqa: E402


@register
class Exact(Method):
    name = "exact"
    label = "mCAP (exact)"
    help = ("the optimum under the predictor with the paper's tie-break, by a min-max "
            "dynamic programme over stage costs; evaluated counts DP transitions")
    tolerance = True
    color = "#2ca02c"

    def search(self, costs, stages, context, *, band=None, progress=None, tie_tolerance=0.0,
               **options):
        C = costs.matrix()
        if tie_tolerance:
            band = make_band(minmax_matrix(C, stages), tie_tolerance)
        balance, work = solve_matrix(C, stages, band, progress)
        return Found(balance, work)
