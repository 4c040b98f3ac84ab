"""Selectable peak-memory predictors over one profile. Pure: no torch, no files.

* ``paper`` — mCAP's Listing 1.1 (section 3.3) over the profile's statistics.
* ``maxparam`` — Listing 1.1 plus a term for the stage's **largest parameter tensor**,
  with its weight chosen from the same profiling runs. Why (measured on VGG11, 4 CPU
  stages, BENCHMARKS.md "Evaluation"): a stage's peak is weights + gradients + optimizer
  state (additive) plus "other" bytes, and "other" carries temporaries the size of the
  biggest single parameter tensor of the stage (per-tensor gradients being accumulated,
  the optimizer's weight-decay temporary). That term is a *maximum*, not a sum, so
  Listing 1.1 cannot express it: mem_added(l) is read from prefix windows 0..l (3.1, "n as
  small as possible"), where an earlier large layer already set the maximum, so a stage
  that starts with a parameter-free layer (ReLU, pooling) misses it. The paper predictor
  then under-predicts, e.g. VGG11 last stages 17..29 by 17.6 MiB (5.7%).

  Model: ``peak(a..z) = Listing 1.1 of the residuals (a..z) + c * maxparam(a..z)``, where
  the residual of every measured window is its peak minus ``c * maxparam`` of the window,
  and the residual statistics come from ``mcap.core.stats.extract`` exactly as the paper's do.
  ``c = 0`` is the paper's predictor. ``c`` is picked from 0, 0.25, ..., 3 by the error on
  the profiling windows that no statistic was read from (every profiling run's other
  stages: held out for free), measured as sum |predicted - measured| / sum measured, so a
  window counts by its bytes: a partitioning's peak is its largest stage, and a 1 MiB
  window missing by 25% matters less than a 300 MiB one missing by 5%. (A plain mean of
  relative errors was tried first; on both bundled VGG11 profiles the small classifier
  windows, which carry the maximum term only once, pulled it to c = 1 where c = 2 fits the
  large stages; BENCHMARKS.md gives both.) Ties go to the smaller ``c``; with no held-out
  window, ``c = 0``. The sweep is never looked at.

The paper's predictor is a ``CostTable`` (every search works on it); ``maxparam`` is not
additive, so ``search`` enumerates for exact/bf (refusing above ``MAX_ENUMERATE``) and runs
mCAP-BO's optimiser (``mcap.core.search.bayes``) on its stage costs.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from mcap.core.errors import InvalidStatistics, McapError, SearchTooLarge
from mcap.core.partition import count, enumerate_all, validate
from mcap.core.predict import CostTable, cost_table, peaks_of_balances
from mcap.core.stats import collect, extract, sources_for_windows, stage_windows
from mcap.core.types import LayerStats, Profile, Recommendation, Run

PREDICTORS = ("paper", "maxparam")
DEFAULT = "paper"
WEIGHTS = tuple(k / 4 for k in range(13))  # candidate c: 0, 0.25, ..., 3
MAX_ENUMERATE = 20_000_000


@dataclass(frozen=True)
class Predictor:
    """Stage cost ``table.stage(a, z) + weight * maxparam(a, z)`` (weight 0: Listing 1.1)."""
    name: str
    stats: LayerStats  # the Listing 1.1 statistics (of the residuals for maxparam)
    table: CostTable
    weight: float = 0.0
    param_bytes: tuple[int, ...] = ()
    held_out_error: Optional[float] = None  # sum |error| / sum measured, held-out windows

    @property
    def num_layers(self) -> int:
        return self.table.num_layers

    @property
    def additive(self) -> bool:
        return self.weight == 0

    def _extra(self, first: np.ndarray, last: np.ndarray) -> np.ndarray:
        if self.additive:
            return np.zeros(np.shape(first), dtype=np.int64)
        return np.rint(self.weight * _range_max(self.param_bytes)[first, last]).astype(np.int64)

    def stage(self, first: int, last: int) -> int:
        return int(self.table.stage(first, last) + self._extra(np.array(first), np.array(last)))

    def peaks_many(self, balances: np.ndarray) -> np.ndarray:
        """(m, G) valid balances -> (m, G) per-stage predicted peaks."""
        arr = np.asarray(balances, dtype=np.int64)
        ends = np.cumsum(arr, axis=1) - 1
        starts = ends - arr + 1
        return peaks_of_balances(self.table, arr) + self._extra(starts, ends)

    def peaks(self, balance: Sequence[int]) -> tuple[int, ...]:
        part = validate(balance, self.num_layers)
        return tuple(int(p) for p in self.peaks_many(np.asarray([part.balance]))[0])

    def peak(self, balance: Sequence[int]) -> int:
        return max(self.peaks(balance))


_MAX_CACHE: dict[tuple[int, ...], np.ndarray] = {}


def _range_max(values: tuple[int, ...]) -> np.ndarray:
    """M[a, z] = max(values[a..z]) for a <= z (L x L, O(L^2) once per model)."""
    got = _MAX_CACHE.get(values)
    if got is None:
        v = np.asarray(values, dtype=np.int64)
        got = np.zeros((len(v), len(v)), dtype=np.int64)
        for a in range(len(v)):
            got[a, a:] = np.maximum.accumulate(v[a:])
        _MAX_CACHE.clear()
        _MAX_CACHE[values] = got
    return got


def make_predictor(profile: Profile, name: str = DEFAULT) -> Predictor:
    """The named predictor for ``profile``; McapError naming the choices for another name."""
    if name == "paper":
        return Predictor("paper", profile.stats, cost_table(profile.stats))
    if name == "maxparam":
        return fit_maxparam(profile.runs, tuple(l.param_bytes for l in profile.model.layers))
    raise McapError(f"unknown predictor {name!r}; expected one of {', '.join(PREDICTORS)}")


def _residual_runs(runs: Sequence[Run], pmax: np.ndarray, weight: float) -> list[Run]:
    out = []
    for r in runs:
        peaks = tuple(int(p - round(weight * pmax[a, z]))
                      for (a, z), p in zip(stage_windows(r.balance), r.peaks))
        out.append(Run(r.balance, "ok", peaks, r.seconds))
    return out


def _held_out(runs: Sequence[Run], num_layers: int) -> list[tuple[tuple[int, int], int]]:
    """Measured windows that no statistic is read from (see mcap.core.stats: sources)."""
    wins = collect(runs, num_layers)
    measured = dict(wins.peaks)
    src = sources_for_windows(num_layers, measured, wins.max_stages)
    used = {w for w in src.isolated if w is not None}
    for layer, n in enumerate(src.added):
        if n is not None:
            used |= {(n, layer - 1), (n, layer)}
    return [(w, p) for w, p in sorted(measured.items()) if w not in used]


def fit_maxparam(runs: Sequence[Run], param_bytes: Sequence[int]) -> Predictor:
    """The ``maxparam`` predictor from a profile's runs (module docstring)."""
    pb = tuple(int(b) for b in param_bytes)
    L = len(pb)
    ok = [r for r in runs if r.status == "ok" and r.peaks and sum(r.balance) == L]
    if not ok:
        raise McapError("predictor maxparam needs the profile's measured runs; this profile "
                        f"has {len(runs)} runs and none is ok")
    pmax = _range_max(pb)
    held = _held_out(ok, L)
    best: Optional[Predictor] = None
    best_err = np.inf
    for weight in WEIGHTS if held else (0.0,):
        try:
            stats = extract(_residual_runs(ok, pmax, weight), L)
        except InvalidStatistics:
            continue  # this weight leaves a non-positive mem_isolated: not a model of the data
        cand = Predictor("maxparam", stats, cost_table(stats), weight, pb)
        if not held:
            best = cand
            break
        err = (sum(abs(cand.stage(a, z) - p) for (a, z), p in held)
               / sum(p for _, p in held))
        if best is None or err < best_err - 1e-12:  # ties keep the smaller weight
            best_err = err
            best = Predictor("maxparam", stats, cand.table, weight, pb, err)
    if best is None:
        raise McapError("predictor maxparam: no weight gives valid statistics for these runs")
    return best


# --- search ------------------------------------------------------------------------------

def search(predictor: Predictor, stages: int, method: str, *,
           layer_params: Optional[Sequence[int]] = None, seed: int = 0,
           iterations: int = 75) -> Recommendation:
    """``method``'s pick under ``predictor``. Additive predictors use mcap.core.search as is;
    maxparam enumerates every partitioning for exact and bf (the lowest predicted peak with
    the shared tie-break, so both are exact) and runs mCAP-BO on its stage costs."""
    from mcap.core.search import bayes, recommend
    from mcap.core.search.tiebreak import best_rows, key

    if predictor.additive or method in ("uniform", "params"):
        rec = recommend(predictor.stats, stages, method, layer_params=layer_params, seed=seed,
                        iterations=iterations)
        if predictor.additive:
            return rec
        return Recommendation(rec.method, rec.balance, predictor.peaks(rec.balance), rec.seconds,
                              rec.evaluated)
    L = predictor.num_layers
    if not isinstance(stages, int) or not 1 <= stages <= L:
        raise McapError(f"stages must be an integer in 1..{L}, got {stages!r}")
    t0 = time.perf_counter()
    if method == "bo":
        balance, evaluated, curve = bayes.solve(predictor, stages, seed=seed, iterations=iterations)
        return Recommendation("bo", balance, predictor.peaks(balance), time.perf_counter() - t0,
                              evaluated, curve)
    if method not in ("exact", "bf"):
        raise McapError(f"unknown method {method!r}")
    total = count(L, stages)
    if total > MAX_ENUMERATE:
        raise SearchTooLarge(f"predictor {predictor.name} searches by enumeration: "
                             f"{total:,} partitionings of {L} layers on {stages} stages exceed "
                             f"{MAX_ENUMERATE:,}")
    best_key, best_bal = None, None
    for chunk in enumerate_all(L, stages):
        peaks = predictor.peaks_many(chunk)
        i = best_rows(peaks, chunk)
        k = key(peaks[i], chunk[i])
        if best_key is None or k < best_key:
            best_key, best_bal = k, tuple(int(n) for n in chunk[i])
    return Recommendation(method, best_bal, predictor.peaks(best_bal), time.perf_counter() - t0,
                          total)
