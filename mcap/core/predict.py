"""Peak-memory prediction, mCAP Listing 1.1 (section 3.3). Pure: no torch, no files.

A stage holding layers a..b is predicted to peak at

    mem_isolated(a) + mem_added(a+1) + ... + mem_added(b)

and a partitioning peaks at its worst stage. With the prefix sums
``A[k] = mem_added(1) + ... + mem_added(k)`` (A[0] = 0) a stage costs O(1):
``mem_isolated(a) + A[b] - A[a]``. Nothing here depends on how many stages were
profiled, so a profile taken on G devices predicts partitionings for any G'.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from mcap.core.errors import InvalidPartitioning, InvalidStatistics
from mcap.core.partition import validate, windows
from mcap.core.types import LayerStats, Prediction


def _bad(values, ok) -> list[int]:
    return [i for i, v in enumerate(values) if not ok(v)]


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def check_stats(stats: LayerStats) -> None:
    """Raise InvalidStatistics naming the layers whose statistics cannot be used.

    mem_isolated must be a positive integer for every layer (a device holding a layer
    holds at least its weights). mem_added may be negative (mCAP 3.3, Fig. 7.b: adding a
    layer with smaller activations can lower a recomputing stage's peak) but must be an
    integer for every layer after the first.
    """
    iso, added = stats.mem_isolated, stats.mem_added
    n = len(iso)
    if n == 0:
        raise InvalidStatistics("the statistics have no layers")
    if len(added) != n:
        raise InvalidStatistics(f"mem_isolated has {n} entries but mem_added has {len(added)}")
    missing = [i for i, v in enumerate(iso) if v is None]
    if missing:
        raise InvalidStatistics(f"mem_isolated is missing for layers {_fmt(missing)}")
    nan = [i for i, v in enumerate(iso) if isinstance(v, float) and math.isnan(v)]
    if nan:
        raise InvalidStatistics(f"mem_isolated is NaN for layers {_fmt(nan)}")
    notint = _bad(iso, _is_int)
    if notint:
        raise InvalidStatistics(
            f"mem_isolated must be integer bytes; layers {_fmt(notint)} have {[iso[i] for i in notint[:5]]}")
    neg = [i for i, v in enumerate(iso) if v <= 0]
    if neg:
        raise InvalidStatistics(
            f"mem_isolated must be positive; layers {_fmt(neg)} have {[iso[i] for i in neg[:5]]}")
    missing = [i for i, v in enumerate(added) if i > 0 and v is None]
    if missing:
        raise InvalidStatistics(f"mem_added is missing for layers {_fmt(missing)}")
    nan = [i for i, v in enumerate(added) if i > 0 and isinstance(v, float) and math.isnan(v)]
    if nan:
        raise InvalidStatistics(f"mem_added is NaN for layers {_fmt(nan)}")
    notint = [i for i, v in enumerate(added) if i > 0 and not _is_int(v)]
    if notint:
        raise InvalidStatistics(
            f"mem_added must be integer bytes; layers {_fmt(notint)} have {[added[i] for i in notint[:5]]}")


def _fmt(layers: Sequence[int]) -> str:
    if len(layers) > 12:
        return ", ".join(map(str, layers[:12])) + f", ... ({len(layers)} layers)"
    return ", ".join(map(str, layers))


@dataclass(frozen=True)
class CostTable:
    """Per-layer arrays for O(1) stage costs: ``iso[a] + prefix[b] - prefix[a]``."""
    iso: np.ndarray  # (L,) int64
    prefix: np.ndarray  # (L,) int64, prefix[k] = sum of mem_added(1..k)

    @property
    def num_layers(self) -> int:
        return int(self.iso.shape[0])

    def stage(self, first: int, last: int) -> int:
        return int(self.iso[first] + self.prefix[last] - self.prefix[first])

    def stage_costs(self, first: np.ndarray, last: np.ndarray) -> np.ndarray:
        return self.iso[first] + self.prefix[last] - self.prefix[first]


def cost_table(stats: LayerStats) -> CostTable:
    check_stats(stats)
    iso = np.asarray([int(v) for v in stats.mem_isolated], dtype=np.int64)
    added = np.asarray([0] + [int(v) for v in stats.mem_added[1:]], dtype=np.int64)
    return CostTable(iso=iso, prefix=np.cumsum(added))


def table_from_arrays(iso: Sequence[int], added: Sequence[int]) -> CostTable:
    """A CostTable for any additive per-layer cost (e.g. parameter bytes for the params baseline)."""
    iso_a = np.asarray(iso, dtype=np.int64)
    add_a = np.asarray(added, dtype=np.int64).copy()
    add_a[0] = 0
    return CostTable(iso=iso_a, prefix=np.cumsum(add_a))


def _peaks(table: CostTable, balance: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(table.stage(a, z) for a, z in windows(balance))


def predict(stats: LayerStats, balance: Sequence[int]) -> Prediction:
    """Listing 1.1 for one partitioning: per-stage predicted peaks (bytes)."""
    table = cost_table(stats)
    part = validate(balance, table.num_layers)
    return Prediction(balance=part.balance, peaks=_peaks(table, part.balance))


def predict_with(table: CostTable, balance: Sequence[int]) -> Prediction:
    """Like predict() with a prepared (already validated) CostTable."""
    part = validate(balance, table.num_layers)
    return Prediction(balance=part.balance, peaks=_peaks(table, part.balance))


def peaks_of_balances(table: CostTable, balances: np.ndarray) -> np.ndarray:
    """(m, G) balances -> (m, G) predicted per-stage peaks, no validation."""
    ends = np.cumsum(balances, axis=1) - 1
    starts = ends - balances + 1
    return table.stage_costs(starts, ends)


def predict_many(stats: LayerStats, balances) -> np.ndarray:
    """Vectorised Listing 1.1: (m, G) balances -> (m, G) int64 per-stage peaks.

    Every row must be a valid partitioning of the profiled layers (same G for all rows).
    """
    table = cost_table(stats)
    arr = np.asarray(balances, dtype=np.int64)
    if arr.ndim != 2 or arr.shape[1] < 1:
        raise InvalidPartitioning(f"balances must be a 2-D array (partitionings x stages), got shape {arr.shape}")
    if arr.shape[0] == 0:
        return np.zeros((0, arr.shape[1]), dtype=np.int64)
    bad = np.flatnonzero((arr <= 0).any(axis=1) | (arr.sum(axis=1) != table.num_layers))
    if bad.size:
        validate(tuple(int(x) for x in arr[bad[0]]), table.num_layers)  # raises with the values
    return peaks_of_balances(table, arr)
