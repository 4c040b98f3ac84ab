"""Recommendation (mCAP 3.4): one signature and one result type for every method.

``recommend(stats, stages, method)`` returns a ``Recommendation`` with the balance, its
predicted per-stage peaks (Listing 1.1), the wall seconds the search took, how many
candidates it evaluated, and (bo) the best-so-far curve. Methods:

* ``exact``  -- min-max DP over prefix sums with the sorted-vector tie-break (exact.py);
  ``evaluated`` counts DP transitions (stage placements), not partitionings.
* ``bf``     -- the paper's brute force over all C(L-1, G-1) partitionings (bruteforce.py).
* ``bo``     -- scikit-optimize with the paper's settings (bayes.py).
* ``uniform``, ``params`` -- baselines (baselines.py).

``time`` (torchgpipe's balance_by_time) needs torch and a model; it lives in
``mcap.runner.timebalance`` and is not part of this pure package. The tie-break and the
tolerance are documented in ``tiebreak.py``; exact and bf apply the band around the true
optimum, bo around the best peak it evaluated.
"""
from __future__ import annotations

import time
from typing import Callable, Optional, Sequence

from mcap.core.errors import McapError
from mcap.core.partition import validate
from mcap.core.predict import cost_table, predict_with
from mcap.core.search import baselines, bayes, bruteforce, exact
from mcap.core.search.tiebreak import key, make_band
from mcap.core.types import LayerStats, Recommendation

METHODS = ("exact", "bf", "bo", "uniform", "params")


def _check_stages(stages, L: int) -> None:
    if isinstance(stages, bool) or not isinstance(stages, int) or stages < 1:
        raise McapError(f"stages must be an integer >= 1, got {stages!r}")
    if stages > L:
        raise McapError(f"{stages} stages but the model has only {L} layers; every stage needs at least one")


def recommend(stats: LayerStats, stages: int, method: str = "exact", *,
              layer_params: Optional[Sequence[int]] = None, tie_tolerance: float = 0.0,
              seed: int = 0, iterations: int = bayes.ITERATIONS,
              progress: Optional[Callable[[int, int], None]] = None, **opts) -> Recommendation:
    """The partitioning of ``stats``' layers over ``stages`` devices that ``method`` picks."""
    if method not in METHODS:
        raise McapError(f"unknown method {method!r}; expected one of {', '.join(METHODS)}")
    table = cost_table(stats)  # validates the statistics, naming bad layers
    L = table.num_layers
    _check_stages(stages, L)
    if tie_tolerance is None or not (tie_tolerance >= 0):
        raise McapError(f"tie_tolerance must be a fraction >= 0, got {tie_tolerance!r}")
    t0 = time.perf_counter()
    curve: tuple[int, ...] = ()
    if method == "exact":
        band = make_band(exact.minmax(table, stages), tie_tolerance) if tie_tolerance else None
        balance, evaluated = exact.solve(table, stages, band, progress)
    elif method == "bf":
        cap = opts.pop("max_partitionings", bruteforce.MAX_PARTITIONINGS)
        bruteforce.check_size(L, stages, cap)
        band = make_band(bruteforce.lowest_peak(table, stages), tie_tolerance) if tie_tolerance else None
        balance, evaluated = bruteforce.solve(table, stages, band, progress, cap)
    elif method == "bo":
        balance, evaluated, curve = bayes.solve(table, stages, seed=seed, iterations=iterations,
                                                progress=progress, **opts)
        if tie_tolerance:
            band = make_band(min(curve), tie_tolerance)
            balance, evaluated, curve = bayes.solve(table, stages, seed=seed, iterations=iterations,
                                                    band=band, **opts)
    elif method == "uniform":
        balance, evaluated = baselines.uniform(L, stages), 1
    else:
        balance, evaluated = baselines.params(layer_params, L, stages, progress)
    seconds = time.perf_counter() - t0
    validate(balance, L)
    pred = predict_with(table, balance)
    return Recommendation(method=method, balance=pred.balance, predicted_peaks=pred.peaks,
                          seconds=seconds, evaluated=int(evaluated), curve=curve)


__all__ = ["METHODS", "recommend", "key"]
