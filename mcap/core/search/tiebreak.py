"""The tie-break shared by every method (mCAP 3.4, CAPTURE).

Partitionings are ordered by the **lexicographically smallest vector of per-stage peaks
sorted high to low**: lowest peak first; on a tie drop the worst device and compare the
rest, again and again. Equal vectors are ordered by the balance itself (lexicographically
smallest first) so every method returns the same partitioning.

Relative tie tolerance ``tol`` (default 0): let M* be the lowest predicted peak over the
space. Every stage peak p with M* <= p <= M* + tol * |M*| is treated as equal to M* before
sorting; peaks outside that band are compared as they are. So with tol = 0.05 a
partitioning peaking 3% above the optimum ties with it on the worst device and wins if its
remaining devices are lower -- the situation in which mCAP picked 3-3-5-19 (4.2). The
returned predicted peaks are always the real ones.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from mcap.core.errors import McapError


@dataclass(frozen=True)
class Band:
    """Peaks in [low, high] compare as ``low`` (the tolerance band above the optimum)."""
    low: int
    high: float

    def apply(self, peaks: np.ndarray) -> np.ndarray:
        out = np.array(peaks, dtype=np.int64, copy=True)
        out[(out >= self.low) & (out <= self.high)] = self.low
        return out


def make_band(optimum: int, tol: float) -> Optional[Band]:
    if tol is None or tol == 0:
        return None
    if not (tol >= 0) or tol != tol:
        raise McapError(f"tie_tolerance must be a fraction >= 0, got {tol!r}")
    return Band(low=int(optimum), high=optimum + tol * abs(optimum))


def key(peaks: Sequence[int], balance: Sequence[int], band: Optional[Band] = None) -> tuple:
    """Sort key: (peaks sorted high to low, after the band; balance)."""
    arr = np.asarray(peaks, dtype=np.int64)
    if band is not None:
        arr = band.apply(arr)
    return (tuple(int(x) for x in np.sort(arr)[::-1]), tuple(int(b) for b in balance))


def best_rows(peaks: np.ndarray, balances: np.ndarray, band: Optional[Band] = None) -> int:
    """Index of the best row of (m, G) peaks under the order above (vectorised)."""
    arr = band.apply(peaks) if band is not None else peaks
    top = arr.max(axis=1)
    rows = np.flatnonzero(top == top.min())
    if rows.size == 1:
        return int(rows[0])
    vec = np.sort(arr[rows], axis=1)[:, ::-1]  # high to low; lexsort ascends
    keys = [balances[rows, c] for c in range(balances.shape[1] - 1, -1, -1)]
    keys += [vec[:, c] for c in range(vec.shape[1] - 1, -1, -1)]
    return int(rows[np.lexsort(keys)[0]])
