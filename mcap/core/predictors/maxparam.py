"""``maxparam``: Listing 1.1 plus a term for the stage's **largest parameter tensor**.

Why (measured on VGG11, 4 CPU stages, bench/log/2026-11-22-evaluation-paper-vs-maxparam.md): a
stage's peak is
weights + gradients + optimizer state (additive) plus "other" bytes, and "other" carries
temporaries the size of the biggest single parameter tensor of the stage (per-tensor
gradients being accumulated, the optimizer's weight-decay temporary, oneDNN's convolution
backward workspace). That term is a *maximum*, not a sum, so Listing 1.1 cannot express
it: mem_added(l) is read from prefix windows 0..l (3.1, "n as small as possible"), where an
earlier large layer already set the maximum, so a stage that starts with a parameter-free
layer (ReLU, pooling) misses it and is predicted low.

Model: ``peak(a..z) = Listing 1.1 of the residuals (a..z) + c * maxparam(a..z)``; the
residual of every measured window is its peak minus ``c * maxparam`` of the window, and the
residual statistics come from ``mcap.core.profiling.stats.extract`` exactly as the paper's do. ``c = 0``
is the paper's predictor. ``c`` is picked from 0, 0.25, ..., 3 by the bytes-weighted error
on the profiling windows no statistic was read from (``base.fit_terms``); ties go to the
smaller ``c``; with no held-out window, ``c = 0``. The sweep is never looked at. (A plain
mean of relative errors was tried first; on both bundled VGG11 profiles the small
classifier windows pulled it to c = 1 where c = 2 fits the large stages.)
"""
from __future__ import annotations

from mcap.core.costs import Term, TermCosts
from mcap.core.predict import cost_table
from mcap.core.costs import AdditiveCosts
from mcap.core.predictors.base import Fit, Predictor, fit_terms, ok_runs, register
from mcap.core.types import Profile

WEIGHTS = tuple(k / 4 for k in range(33))  # candidate c: 0, 0.25, ..., 8


def param_term(param_bytes, weight: float) -> Term:
    return Term("largest parameter tensor", "max", tuple(int(b) for b in param_bytes), weight)


def fit_maxparam(runs, param_bytes) -> Fit:
    L = len(param_bytes)
    return fit_terms(runs, L, [(param_term(param_bytes, c),) for c in WEIGHTS])


def costs_of(fit: Fit, name: str) -> TermCosts:
    details = {t.name: t.weight for t in fit.terms}
    details.update(fit.details)
    details["held_out_error"] = fit.error
    return TermCosts(cost_table(fit.stats), fit.terms, name, details)


def without_runs(profile: Profile, name: str) -> AdditiveCosts:
    """A profile that carries statistics but no ok run (written by hand, or trimmed) has
    nothing to fit a term on: its Listing 1.1 is all there is, and the details say so."""
    return AdditiveCosts(cost_table(profile.stats), name,
                         {"note": "no measured runs in the profile: Listing 1.1 only"})


@register
class MaxParam(Predictor):
    name = "maxparam"
    label = "maxparam (+ largest parameter)"
    help = ("Listing 1.1 plus c x the stage's largest parameter tensor, c fitted on the "
            "profile's own held-out windows.")

    def fit(self, profile: Profile) -> TermCosts:
        if not ok_runs(profile.runs, profile.model.num_layers):
            return without_runs(profile, self.name)
        fit = fit_maxparam(profile.runs, [l.param_bytes for l in profile.model.layers])
        return costs_of(fit, self.name)
