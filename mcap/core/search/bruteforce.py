"""mCAP-BF (3.4): predict every one of the C(L-1, G-1) partitionings and keep the best.

Vectorised and streaming: ``mcap.core.partition.iter_cut_chunks`` yields the cut points a
chunk at a time (never a list of all candidates); a chunk's stage costs are gathered from
the prefix sums in a few numpy operations, and only rows tying on the lowest peak are
sorted for the tie-break. Refuses more than ``MAX_PARTITIONINGS`` (10^9, about a minute
and a half at the measured ~10-20 M/s on one core) with the count in the message; pass
``max_partitionings=`` to raise it.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from mcap.core.errors import SearchTooLarge
from mcap.core.partition import count, cuts_to_balances, iter_cut_chunks
from mcap.core.predict import CostTable
from mcap.core.search.tiebreak import Band, key

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


def _ends(table: CostTable) -> tuple[np.ndarray, np.ndarray]:
    """u[c] = iso[c] - prefix[c], v[c] = prefix[c-1]: a stage from cut a to cut b costs
    u[a] + v[b] (Listing 1.1 with prefix sums), so a partitioning needs two gathers per cut."""
    L = table.num_layers
    u = table.iso - table.prefix
    v = np.empty(L + 1, dtype=np.int64)
    v[0] = 0
    v[1:] = table.prefix
    return u, v


def _row_max(u: np.ndarray, v: np.ndarray, cuts: np.ndarray, L: int) -> np.ndarray:
    """Highest stage cost of each row, column by column (no (m, G) temporaries)."""
    if cuts.shape[1] == 0:
        return np.array([u[0] + v[L]], dtype=np.int64)
    cols = np.ascontiguousarray(cuts.T)
    U = u[cols]
    V = v[cols]
    top = V[0] + u[0]
    for k in range(1, cols.shape[0]):
        np.maximum(top, U[k - 1] + V[k], out=top)
    np.maximum(top, U[-1] + v[L], out=top)
    return top


def check_size(L: int, G: int, cap: int) -> int:
    n = count(L, G)
    if n > cap:
        raise SearchTooLarge(f"brute force over {n:,} partitionings of {L} layers on {G} stages exceeds "
                             f"the cap of {cap:,}; use method 'exact' (same answer) or 'bo'")
    return n


def lowest_peak(table: CostTable, G: int) -> int:
    L = table.num_layers
    u, v = _ends(table)
    best = None
    for cuts in iter_cut_chunks(L, G):
        m = int(_row_max(u, v, cuts, L).min())
        best = m if best is None else min(best, m)
    return int(best)


def solve(table: CostTable, G: int, band: Optional[Band] = None,
          progress: Optional[Callable[[int, int], None]] = None,
          max_partitionings: int = MAX_PARTITIONINGS) -> tuple[tuple[int, ...], int]:
    L = table.num_layers
    total = check_size(L, G, max_partitionings)
    u, v = _ends(table)
    best_key, best_top, done = None, None, 0
    for cuts in iter_cut_chunks(L, G):
        done += len(cuts)
        if band is None:
            top = _row_max(u, v, cuts, L)
            m = int(top.min())
            rows = np.flatnonzero(top == m) if best_top is None or m <= best_top else None
            costs = _costs(table, cuts[rows], L) if rows is not None else None
        else:
            costs = band.apply(_costs(table, cuts, L))
            top = costs.max(axis=1)
            m = int(top.min())
            rows = np.flatnonzero(top == m) if best_top is None or m <= best_top else None
            costs = costs[rows] if rows is not None else None
        if rows is not None:
            bals = cuts_to_balances(cuts[rows], L)
            sub = np.sort(costs, axis=1)[:, ::-1]
            for r in range(len(rows)):
                k = (tuple(sub[r].tolist()), tuple(bals[r].tolist()))
                if best_key is None or k < best_key:
                    best_key = k
            best_top = m if best_top is None else min(best_top, m)
        if progress is not None:
            progress(done, total)
    return best_key[1], done


def solve_costs(costs, G: int, band: Optional[Band] = None,
                progress: Optional[Callable[[int, int], None]] = None,
                max_partitionings: int = MAX_PARTITIONINGS) -> tuple[tuple[int, ...], int]:
    """:func:`solve` for any stage costs (``mcap.core.costs``): the same enumeration, each
    chunk's stage costs asked of the predictor instead of gathered from prefix sums."""
    from mcap.core.search.tiebreak import best_rows

    if costs.table is not None:
        return solve(costs.table, G, band, progress, max_partitionings)
    L = costs.num_layers
    total = check_size(L, G, max_partitionings)
    best_key, done = None, 0
    for cuts in iter_cut_chunks(L, G):
        done += len(cuts)
        bals = cuts_to_balances(cuts, L)
        peaks = costs.peaks_many(bals)
        i = best_rows(peaks, bals, band)
        k = key(peaks[i], bals[i], band)
        if best_key is None or k < best_key:
            best_key = k
        if progress is not None:
            progress(done, total)
    return best_key[1], done


def lowest_peak_costs(costs, G: int) -> int:
    if costs.table is not None:
        return lowest_peak(costs.table, G)
    L = costs.num_layers
    return int(min(costs.peaks_many(cuts_to_balances(c, L)).max(axis=1).min()
                   for c in iter_cut_chunks(L, G)))


# --- registration ----------------------------------------------------------------------

from mcap.core.search.base import Found, Method, register  # noqa: E402


@register
class BruteForce(Method):
    name = "bf"
    label = "mCAP (brute force)"
    help = ("mCAP-BF: predict all C(L-1, G-1) partitionings and keep the best (refuses more "
            f"than {MAX_PARTITIONINGS:,} unless max_partitionings is raised)")
    tolerance = True
    color = "#17becf"
    enumerates = True

    def search(self, costs, stages, context, *, band=None, progress=None, tie_tolerance=0.0,
               max_partitionings=MAX_PARTITIONINGS, **options):
        from mcap.core.search.tiebreak import make_band
        check_size(costs.num_layers, stages, max_partitionings)
        if tie_tolerance:
            band = make_band(lowest_peak_costs(costs, stages), tie_tolerance)
        balance, done = solve_costs(costs, stages, band, progress, max_partitionings)
        return Found(balance, done)
