"""Selectable peak-memory predictors over one profile. Pure: no torch, no files.

* ``paper`` — mCAP's Listing 1.1 (section 3.3) over the profile's own statistics
  (``mcap.stats.extract``: every window combined by its maximum, wherever it was measured).
* ``position`` — the same Listing 1.1 form over statistics re-extracted from the same
  profiling runs with each window kept apart by the stage position it was measured at
  (``mcap.predict_position``), see that module for why and what was measured.

Both reduce to a ``CostTable`` (a stage costs ``iso[a] + prefix[b] - prefix[a]``), so every
search method (exact, bf, bo, params) works unchanged with either: ``Predictor.stats`` is a
``LayerStats`` that ``mcap.search.recommend`` takes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from mcap.errors import McapError
from mcap.partition import validate
from mcap.predict import CostTable, cost_table, peaks_of_balances
from mcap.types import LayerStats, Profile

PREDICTORS = ("paper", "position")
DEFAULT = "paper"


@dataclass(frozen=True)
class Predictor:
    name: str
    stats: LayerStats
    table: CostTable

    def peaks(self, balance: Sequence[int]) -> tuple[int, ...]:
        """Per-stage predicted peaks of one partitioning (validated)."""
        part = validate(balance, self.table.num_layers)
        return tuple(int(p) for p in peaks_of_balances(self.table, np.asarray([part.balance]))[0])

    def peak(self, balance: Sequence[int]) -> int:
        return max(self.peaks(balance))

    def peaks_many(self, balances: np.ndarray) -> np.ndarray:
        """(m, G) valid balances -> (m, G) per-stage predicted peaks."""
        return peaks_of_balances(self.table, np.asarray(balances, dtype=np.int64))


def make_predictor(profile: Profile, name: str = DEFAULT) -> Predictor:
    """The named predictor for ``profile``; McapError naming the choices for another name."""
    if name == "paper":
        stats = profile.stats
    elif name == "position":
        from mcap.predict_position import position_stats
        stats = position_stats(profile.runs, profile.model.num_layers)
    else:
        raise McapError(f"unknown predictor {name!r}; expected one of {', '.join(PREDICTORS)}")
    return Predictor(name=name, stats=stats, table=cost_table(stats))
