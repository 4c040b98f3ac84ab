"""mCAP-BO (3.4, settings of 4.1): Bayesian optimisation with scikit-optimize.

Settings as in the paper: 75 evaluations, ``acq_func="gp_hedge"``,
``acq_optimizer="sampling"``, ``xi = kappa = 1000`` (exploration), the default Matern
kernel of ``gp_minimize``, seeded by ``seed`` (reproducible).

Encoding, so that every point is a valid partitioning: G-1 integer dimensions y_i in
[1, L-G+1]; sorted, they become strictly increasing cut points ``c_i = y_(i) + i`` in
1..L-1 (stars and bars), i.e. stage sizes ``1 + (y_(i+1) - y_(i))``. Every point is a valid
balance and every balance is reachable (the paper's one-dimension-per-GPU encoding lets
points sum to the wrong layer count). The objective is the predicted peak (Listing 1.1);
the answer is the best evaluated point under the shared tie-break, and ``curve`` is the
best-so-far peak after each evaluation.
"""
from __future__ import annotations

import warnings
from typing import Callable, Optional

import numpy as np

from mcap.core.partition import windows
from mcap.core.predict import CostTable
from mcap.core.search.tiebreak import key

ITERATIONS = 75


def decode(point, L: int) -> tuple[int, ...]:
    ys = sorted(int(v) for v in point)
    cuts = [y + i for i, y in enumerate(ys)]
    edges = [0] + cuts + [L]
    return tuple(b - a for a, b in zip(edges, edges[1:]))


def _peaks(table, bal: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(table.stage(a, z) for a, z in windows(bal))


def solve(table: CostTable, G: int, seed: int = 0, iterations: int = ITERATIONS,
          progress: Optional[Callable[[int, int], None]] = None, band=None,
          on_best: Optional[Callable[[int, int], None]] = None,
          **opts) -> tuple[tuple[int, ...], int, tuple[int, ...]]:
    """bo's pick, evaluations and best-so-far curve; ``on_best(evaluations, best_peak)`` is
    called after every evaluation (for a live curve)."""
    L = table.num_layers
    if G == 1 or L == G:  # one partitioning only; nothing to search
        bal = (L,) if G == 1 else (1,) * L
        return bal, 1, (max(_peaks(table, bal)),)
    from skopt import gp_minimize
    from skopt.space import Integer

    space = [Integer(1, L - G + 1, name=f"y{i}") for i in range(G - 1)]
    seen: dict[tuple[int, ...], tuple[int, ...]] = {}
    curve: list[int] = []

    def objective(point):
        bal = decode(point, L)
        peaks = seen.get(bal) or _peaks(table, bal)
        seen[bal] = peaks
        curve.append(min(max(peaks), curve[-1]) if curve else max(peaks))
        if on_best is not None:
            on_best(len(curve), curve[-1])
        return float(max(peaks))

    def callback(res):
        if progress is not None:
            progress(len(res.func_vals), iterations)

    settings = dict(n_calls=iterations, acq_func="gp_hedge", acq_optimizer="sampling",
                    xi=1000.0, kappa=1000.0, random_state=seed,
                    n_initial_points=min(10, iterations))
    settings.update(opts)
    from threadpoolctl import threadpool_limits

    # One BLAS thread: the GP's matrices are tiny (<= 75 points), and on a busy machine a
    # BLAS thread pool made each L-BFGS step ~10x slower (measured: 3.4 s vs 30 s for 25
    # iterations on the 2-core VM).
    with warnings.catch_warnings(), threadpool_limits(limits=1):
        warnings.simplefilter("ignore")  # skopt warns when a point repeats; harmless here
        gp_minimize(objective, space, callback=[callback], **settings)
    best = min(seen.items(), key=lambda kv: key(kv[1], kv[0], band))
    return best[0], len(curve), tuple(curve)


# --- registration ----------------------------------------------------------------------

from mcap.core.search.base import Found, Method, register  # noqa: E402


@register
class Bayes(Method):
    name = "bo"
    label = "bo (Bayesian optimisation)"
    help = ("mCAP-BO: scikit-optimize's gp_minimize over the cut points, the paper's "
            "settings (75 evaluations, gp_hedge, xi = kappa = 1000), seeded")
    defaults = {"iterations": ITERATIONS, "seed": 0}
    on_demand = True
    tolerance = True

    def search(self, costs, stages, context, *, band=None, progress=None, tie_tolerance=0.0,
               seed=0, iterations=ITERATIONS, on_best=None, **opts):
        from mcap.core.search.tiebreak import make_band
        from mcap.core.errors import McapError
        if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
            raise McapError(f"bo needs iterations >= 1, got {iterations!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise McapError(f"bo's seed must be an integer >= 0, got {seed!r}")
        balance, evaluated, curve = solve(costs, stages, seed=seed, iterations=iterations,
                                          progress=progress, on_best=on_best, **opts)
        if tie_tolerance:
            band = make_band(min(curve), tie_tolerance)
            balance, evaluated, curve = solve(costs, stages, seed=seed, iterations=iterations,
                                              band=band, **opts)
        return Found(balance, evaluated, curve)
