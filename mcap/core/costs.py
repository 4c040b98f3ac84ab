"""Stage costs: the predicted peak of every possible stage, what every search method minimises.

Pure: no torch, no files. A predictor (``mcap.core.predictors``) fits a :class:`StageCosts`
to a profile; a search method (``mcap.core.search``) only ever asks it for the cost of
stages ``first..last``, one at a time, vectorised, or as a full (L, L+1) matrix. When the
costs are additive (Listing 1.1's form, ``table`` set) methods may take faster paths.

:class:`TermCosts` adds *once-per-stage* terms to an additive base (mCAP's Listing 1.1
cannot express them, ARCHITECTURE.md, "Predictors"):

* a **max term** ``w * max(values[first..last])``: memory the stage pays once, sized by its
  largest layer (e.g. temporaries the size of the largest parameter tensor);
* a **presence term** ``w * [any values[first..last] > 0]``: memory paid once if the stage
  holds any layer of a kind (e.g. a library workspace the first matmul allocates);
* a **middle-first term** ``w * values[first]`` for a *middle* stage (neither first nor
  last: ``first > 0`` and ``last < L - 1``) of two or more layers, else 0: memory such a
  stage pays by its first layer that Listing 1.1's prefix windows never see (a layer that
  passes its input on in its output, as AmoebaNet's cells pass their skip state: alone on
  a middle stage it forwards the receive buffer itself, behind another layer of the stage
  it forwards a new tensor held per micro-batch; ``mcap.core.predictors.perstage``).

Range maxima come from a sparse table, O(L log L) memory (never an L x L array).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from mcap.core.partition import validate, windows_many
from mcap.core.predict import CostTable

INF = np.iinfo(np.int64).max // 4


class StageCosts:
    """Base: subclasses give :meth:`stage_costs`; everything else follows from it."""
    predictor: str = "paper"
    num_layers: int = 0
    table: Optional[CostTable] = None  # set when the costs are additive (Listing 1.1)
    details: dict = {}  # what the fit chose, for reports (e.g. {"weight": 2.0})

    def stage_costs(self, first: np.ndarray, last: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def stage(self, first: int, last: int) -> int:
        return int(self.stage_costs(np.asarray([first]), np.asarray([last]))[0])

    def peaks_many(self, balances) -> np.ndarray:
        """(m, G) valid balances -> (m, G) int64 per-stage predicted peaks (no validation)."""
        first, last = windows_many(balances)
        return self.stage_costs(first, last)

    def peaks(self, balance: Sequence[int]) -> tuple[int, ...]:
        part = validate(balance, self.num_layers)
        return tuple(int(p) for p in self.peaks_many(np.asarray([part.balance]))[0])

    def peak(self, balance: Sequence[int]) -> int:
        return max(self.peaks(balance))

    def matrix(self) -> np.ndarray:
        """C[i, j] = cost of a stage holding layers i..j-1 (j > i), INF elsewhere; (L, L+1)."""
        L = self.num_layers
        i = np.arange(L)[:, None]
        j = np.arange(L + 1)[None, :]
        first = np.broadcast_to(i, (L, L + 1))
        last = np.broadcast_to(np.clip(j - 1, 0, L - 1), (L, L + 1))
        valid = j > i
        c = np.full((L, L + 1), INF, dtype=np.int64)
        c[valid] = self.stage_costs(first[valid], last[valid])
        return c


class AdditiveCosts(StageCosts):
    """Listing 1.1: ``mem_isolated(a) + sum(mem_added(a+1..z))`` from prefix sums."""

    def __init__(self, table: CostTable, predictor: str = "paper", details: Optional[dict] = None):
        self.table = table
        self.num_layers = table.num_layers
        self.predictor = predictor
        self.details = dict(details or {})

    def stage_costs(self, first, last):
        return self.table.stage_costs(np.asarray(first), np.asarray(last))


@dataclass(frozen=True)
class Term:
    """One once-per-stage term: ``kind`` "max", "presence" or "midfirst" over per-layer
    ``values`` (module docstring)."""
    name: str
    kind: str
    values: tuple[int, ...]
    weight: float
    _index: object = field(default=None, compare=False, repr=False)

    def evaluate(self, first: np.ndarray, last: np.ndarray) -> np.ndarray:
        index = self._index
        if index is None:
            index = _RangeIndex(self.values)
            object.__setattr__(self, "_index", index)
        if self.kind == "max":
            return np.rint(self.weight * index.max(first, last)).astype(np.int64)
        if self.kind == "presence":
            return np.rint(self.weight * index.any(first, last)).astype(np.int64)
        if self.kind == "midfirst":
            first, last = np.asarray(first), np.asarray(last)
            v = np.asarray(self.values, dtype=np.int64)
            middle = (first > 0) & (last > first) & (last < len(v) - 1)
            return np.where(middle, np.rint(self.weight * v[first]), 0).astype(np.int64)
        raise ValueError(f"unknown term kind {self.kind!r}")


class _RangeIndex:
    """Range max by a sparse table and range presence by prefix counts."""

    def __init__(self, values: Sequence[int]):
        v = np.asarray(values, dtype=np.int64)
        self.levels = [v]
        k = 1
        while 2 * k <= len(v):
            prev = self.levels[-1]
            self.levels.append(np.maximum(prev[:-k], prev[k:]))
            k *= 2
        self.count = np.concatenate([[0], np.cumsum(v > 0)])

    def max(self, first, last):
        first, last = np.asarray(first), np.asarray(last)
        length = last - first + 1
        lev = np.floor(np.log2(np.maximum(length, 1))).astype(np.int64)
        out = np.empty(np.shape(first), dtype=np.int64)
        for k in np.unique(lev):
            sel = lev == k
            table = self.levels[int(k)]
            out[sel] = np.maximum(table[first[sel]], table[last[sel] - (1 << int(k)) + 1])
        return out

    def any(self, first, last):
        return (self.count[np.asarray(last) + 1] - self.count[np.asarray(first)]) > 0


class TermCosts(StageCosts):
    """An additive base plus once-per-stage terms (module docstring)."""

    def __init__(self, table: CostTable, terms: Sequence[Term], predictor: str,
                 details: Optional[dict] = None):
        self.base = table
        self.terms = tuple(t for t in terms if t.weight)
        self.num_layers = table.num_layers
        self.predictor = predictor
        self.details = dict(details or {})
        self.table = None if self.terms else table  # additive only without terms

    def stage_costs(self, first, last):
        first, last = np.asarray(first), np.asarray(last)
        out = self.base.stage_costs(first, last)
        for term in self.terms:
            out = out + term.evaluate(first, last)
        return out
