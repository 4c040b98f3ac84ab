"""``perstage`` (``workspace``, the default, builds on it): Listing 1.1 plus the memory a
stage pays **once**, whatever how many layers it holds, each term estimated from the
profiling runs themselves.

What the measurements showed (ARCHITECTURE.md, "Predictors";
bench/log/2026-11-23-truth-predictors-reuse-search.md):

* a **max-type** term: temporaries the size of the stage's largest parameter tensor
  (``maxparam``; on CPU oneDNN's convolution backward workspace is a multiple of the
  weight bytes, on both devices gradient accumulation and the optimizer's temporaries);
* a **presence-type** term: memory paid once if the stage holds any layer with parameters
  at all, e.g. the cuBLAS/cuBLASLt workspaces of a GPU stage process (about 32 MiB per
  thread that runs matmuls), which a fresh process allocates at its first matmul.

* a **middle-stage term** by the stage's first layer (``Term`` kind "midfirst"): memory a
  *middle* stage (not first, not last) of two or more layers pays beyond Listing 1.1. Cause
  (bench/log/2026-11-25-middle-stages-amoebanet.md): a layer whose output carries its input on
  (AmoebaNet-D's cells return ``(state, skip)`` with ``skip`` the cell's input state) sends
  the *receive buffer itself* when it is alone on a middle stage, so its mem_isolated pays
  nothing for it; behind another layer of the stage the forwarded state is a new tensor,
  held for every micro-batch until the step ends (the schedule keeps the forward sends'
  work objects). mem_added(l), read on the first stage's prefix windows (3.1), only sees
  the forwarded tensor change size, never appear, so every multi-layer middle stage
  starting at ``a`` is low by about ``chunks x`` the bytes layer ``a`` forwards.

Model: ``peak(a..z) = Listing 1.1 of the residuals + c * maxparam(a..z) + W * [a..z holds
a layer with parameters] + m(a) * [a..z is a middle stage of 2+ layers]``. No constant belongs to one machine: ``c`` comes from the same
grid as ``maxparam`` and ``W`` from the profile: starting from the median bytes by which the best
``maxparam`` model under-predicts the held-out windows that hold a parameter layer, for
every ``c`` of the grid a ternary search of ``W`` between 0.25x and 2x that median. Both are chosen by the bytes-weighted held-out error
(``base.fit_terms``), and the presence term is kept only if it lowers that error by at least
10% (a design choice against fitting noise; not tuned on any sweep). Without the presence term this *is*
``maxparam``, which is what CPU data needs; the term is there for what GPU stage processes
pay once.

``m(a)`` is read last, from the profiling windows no statistic comes from: a profile's run
``(k, 1, x, y)`` holds the middle window ``k+1 .. k+x``, one per first layer, and ``m(a)``
is what the model so far under-predicts the middle windows of 2+ layers starting at ``a``
by (their median). It is kept only when *every* such window is under-predicted or exact and
one is under-predicted (:func:`middle_term`): what the term stands for is memory Listing 1.1
leaves out, so its residuals are one-sided; residuals of both signs (VGG11 on CPU, the GPU
profiles) are something else, which a per-window offset would only copy. A first layer
with no such window gets 0 (``a = 1`` in the default run set: a middle stage starting at
layer 1 stays as low as before). The threshold is zero, not tuned; its windows are then
fitted, so ``held_out_error`` reports the error before the term.
"""
from __future__ import annotations

import numpy as np

from mcap.core.costs import Term, TermCosts
from mcap.core.predictors.base import Predictor, Windows, held_out, ok_runs, register
from mcap.core.predictors.maxparam import (
    WEIGHTS, costs_of, fit_maxparam, param_term, without_runs,
)
from mcap.core.predict import cost_table
from mcap.core.types import Profile

KEEP_IF_BETTER_BY = 0.10  # the presence term must cut the held-out error by 10%
SCALES = (0.25, 2.0)  # W is searched between these multiples of the median under-prediction
REFINE_STEPS = 30


def presence_term(param_bytes, weight: float) -> Term:
    return Term("once per stage with parameters", "presence",
                tuple(1 if b > 0 else 0 for b in param_bytes), weight)


def _presence_weights(runs, param_bytes, base) -> list[float]:
    """Candidate W: the median under-prediction of held-out windows holding a parameter,
    under Listing 1.1 alone (``base`` without its terms): the largest plausible W, since a
    max term can already absorb part of a workspace."""
    L = len(param_bytes)
    held = held_out(ok_runs(runs, L), L)
    if not held:
        return []
    costs = costs_of(Windows(runs, L).score(()), "paper")
    has = np.concatenate([[0], np.cumsum(np.asarray(param_bytes) > 0)])
    under = [p - costs.stage(a, z) for (a, z), p in held
             if has[z + 1] - has[a] > 0 and p > costs.stage(a, z)]
    if not under:
        return []
    m = float(np.median(under))
    return [s * m for s in SCALES]


@register
class PerStage(Predictor):
    name = "perstage"
    label = "perstage (+ once-per-stage terms)"
    help = ("Listing 1.1 plus memory paid once per stage: c x the largest parameter tensor "
            "and a workspace W for any stage holding parameters, both fitted on the "
            "profile's own held-out windows.")

    def fit(self, profile: Profile) -> TermCosts:
        layers = profile.model.layers
        pb = [l.param_bytes for l in layers]
        if not ok_runs(profile.runs, len(pb)):
            return without_runs(profile, self.name)
        base = fit_maxparam(profile.runs, pb)
        if base.error is None:
            return costs_of(base, self.name)
        wins = Windows(profile.runs, len(pb))
        fit = _once_per_stage(profile, layers, wins, base.terms[0].weight)
        fit = _with_middle(profile, layers, wins, fit)
        costs = costs_of(fit, self.name)
        costs.details.update(fit.details)
        from mcap.core.predictors.positional import with_positions
        return with_positions(costs, profile, wins)


def _once_per_stage(profile: Profile, layers, wins: Windows, start: float):
    """The max and presence terms chosen by the held-out error of ``wins``, the max-term
    weight refined from ``start``."""
    pb = [l.param_bytes for l in layers]
    weights = _per_kind(wins, layers, start)
    fit = _per_layer(wins, layers, _layer_weights(layers, weights))
    fit.details = {"largest parameter tensor": weights,
                   **_layer_details(layers, weights, fit.terms[0])}
    grid = _presence_weights(profile.runs, pb, fit)
    if grid:
        joint = _with_presence(wins, layers, weights, min(grid), max(grid))
        if joint is not None:
            w = joint.terms[1].weight
            kinds = joint.details["largest parameter tensor"]
            refined = _per_layer(wins, layers, _layer_weights(layers, kinds),
                                 (presence_term(pb, w),))
            if refined.error < joint.error:
                refined.details = {**joint.details,
                                   **_layer_details(layers, kinds, refined.terms[0])}
                joint = refined
        if joint is not None and joint.error <= (1 - KEEP_IF_BETTER_BY) * fit.error:
            fit = joint
    return fit


MIDDLE = "middle stage of 2+ layers, by its first layer"


def _with_middle(profile: Profile, layers, wins: Windows, fit):
    """``fit`` plus the middle-stage term where the held-out windows show one (module
    docstring), else ``fit``. The once-per-stage terms are chosen first, on every held-out
    window: with one middle window per first layer a max or presence term and a middle
    term can explain the same bytes, and the once-per-stage terms came first."""
    mid = middle_term(wins, fit)
    if mid is None:
        return fit
    refit = wins.score(fit.terms + (mid,))
    if refit is None:
        return fit
    refit.details = {**fit.details, MIDDLE: {
        layers[a].name: v for a, v in enumerate(mid.values) if v}}
    refit.error = fit.error  # its windows are fitted now: the error before it
    return refit


def _middle(wins: Windows, idx: np.ndarray) -> np.ndarray:
    first, last = wins.first[idx], wins.last[idx]
    return (first > 0) & (last > first) & (last < wins.L - 1)


def middle_term(wins: Windows, fit) -> "Term | None":
    """The middle-stage term (module docstring) from the held-out windows of ``wins`` under
    ``fit``, or None when those windows do not show it (no middle window of 2+ layers held
    out, none under-predicted, or one over-predicted)."""
    if not wins.complete or wins.held.size == 0:
        return None
    h = wins.held[_middle(wins, wins.held)]
    if not h.size:
        return None
    first = wins.first[h]
    resid = wins.peaks[h] - costs_of(fit, "perstage").stage_costs(first, wins.last[h])
    if (resid < 0).any() or not (resid > 0).any():
        return None
    values = [0] * wins.L
    for a in np.unique(first):
        values[int(a)] = int(np.median(resid[first == a]))
    return Term(MIDDLE, "midfirst", tuple(values), 1.0)


def _kinds(layers) -> list[str]:
    """Kinds of the layers that have parameters, when every such layer's kind is known."""
    kinds = [l.kind for l in layers if l.param_bytes > 0]
    return sorted(set(kinds)) if kinds and all(kinds) else []


def _kind_term(layers, weights: dict) -> Term:
    """max over the stage of c_kind * parameter bytes (one c for unknown kinds, key "")."""
    c = [weights.get(l.kind, weights.get("", 0.0)) for l in layers]
    return Term("largest parameter tensor", "max",
                tuple(int(round(ci * l.param_bytes)) for ci, l in zip(c, layers)), 1.0)


def _per_kind(wins, layers, start: float, extra: tuple = ()) -> dict:
    """c per layer kind by coordinate descent over the grid (a convolution's temporaries are
    not a linear layer's: oneDNN's and cuDNN's workspaces differ from a GEMM's), starting
    from ``start``; without kinds, that single c (key ""). ``extra`` terms stay fixed."""
    kinds = _kinds(layers)
    if len(kinds) < 2:
        return {"": start}
    weights = {k: start for k in kinds}
    best = wins.score((_kind_term(layers, weights), *extra))
    for _ in range(4):
        improved = False
        for k in kinds:
            for c in WEIGHTS:
                trial = dict(weights, **{k: c})
                f = wins.score((_kind_term(layers, trial), *extra))
                if f is not None and (best is None or f.error < best.error - 1e-12):
                    best, weights, improved = f, trial, True
        if not improved:
            break
    return weights


# Per-layer refinement: at most this many layers with parameters (each move is a few
# hundred microseconds of numpy; a 64-layer model refines in well under a second).
MAX_REFINED_LAYERS = 64
REFINE_ROUNDS = 4


def _layer_weights(layers, weights: dict) -> list[float]:
    return [weights.get(l.kind, weights.get("", 0.0)) if l.param_bytes > 0 else 0.0
            for l in layers]


def _layer_term(layers, c) -> Term:
    return Term("largest parameter tensor", "max",
                tuple(int(round(ci * l.param_bytes)) for ci, l in zip(c, layers)), 1.0)


def _layer_details(layers, kinds: dict, term: Term) -> dict:
    """The layers whose refined c differs from their kind's (reported, never hidden)."""
    out = {}
    for l, v in zip(layers, term.values):
        if l.param_bytes > 0:
            c = v / l.param_bytes
            k = kinds.get(l.kind, kinds.get("", 0.0))
            if abs(c - k) > 1e-6:
                out[l.name] = round(c, 2)
    return {"largest parameter tensor, per layer": out} if out else {}


def _per_layer(wins, layers, c: list[float], extra: tuple = ()):
    """c per layer, refined from the per-kind c by coordinate descent over the grid with
    single moves and *joint* moves of two layers of the same kind and parameter bytes.

    Why: on CPU, oneDNN picks a convolution's backward algorithm by its shape, not only its
    weight size, so two equal-weight convolutions can need different workspaces (VGG11 at
    32x32: conv4_2 about 2x its weight bytes, conv5_1 and conv5_2 about 5x;
    bench/log/2026-11-23-perstage-per-layer-cpu-vs-gpu.md).
    The held-out windows that show it hold *both* conv5 layers, so moving one at a time
    never lowers the error: the joint move is what finds it. Every move must strictly lower
    the held-out error (the sweep is never seen); models with more than
    ``MAX_REFINED_LAYERS`` layers with parameters keep the per-kind c."""
    best = wins.score((_layer_term(layers, c), *extra))
    idx = [i for i, l in enumerate(layers) if l.param_bytes > 0]
    if best is None or best.error is None or len(idx) > MAX_REFINED_LAYERS:
        return best
    moves = [(i,) for i in idx] + [
        (i, j) for n, i in enumerate(idx) for j in idx[n + 1:]
        if layers[i].param_bytes == layers[j].param_bytes and layers[i].kind == layers[j].kind]
    c = list(c)
    for _ in range(REFINE_ROUNDS):
        improved = False
        for move in moves:
            for v in WEIGHTS:
                if all(c[i] == v for i in move):
                    continue
                trial = list(c)
                for i in move:
                    trial[i] = v
                f = wins.score((_layer_term(layers, trial), *extra))
                if f is not None and f.error < best.error - 1e-12:
                    best, c, improved = f, trial, True
        if not improved:
            break
    return best


def _with_presence(wins, layers, weights, lo, hi):
    """The best (c per kind, W) with a presence term: for every common c of the grid the
    best W, then c per kind with that W fixed, then W again."""
    pb = [l.param_bytes for l in layers]
    best = None
    for c in WEIGHTS:
        f = _best_w(wins, layers, {k: c for k in weights}, lo, hi)
        if f is not None and (best is None or f.error < best.error - 1e-12):
            best, common = f, c
    if best is None:
        return None
    w = best.terms[1].weight
    weights = _per_kind(wins, layers, common, (presence_term(pb, w),))
    final = _best_w(wins, layers, weights, w / 2 ** 0.5, w * 2 ** 0.5)
    if final is None or final.error > best.error:
        final, weights = best, {k: common for k in weights}
    final.details = {"largest parameter tensor": weights,
                     "once per stage with parameters": final.terms[1].weight}
    return final


def _best_w(wins, layers, weights, lo, hi):
    """The presence weight in [lo, hi] with the lowest held-out error (ternary search: the
    error is piecewise linear in W and, on the data seen, unimodal)."""
    best = None
    pb = [l.param_bytes for l in layers]
    kind = _kind_term(layers, weights)

    def at(x):
        nonlocal best
        f = wins.score((kind, presence_term(pb, x)))
        if f is not None and (best is None or f.error < best.error - 1e-12):
            best = f
        return f.error if f is not None else np.inf

    for _ in range(REFINE_STEPS):
        m1, m2 = lo + (hi - lo) / 3, hi - (hi - lo) / 3
        if at(m1) <= at(m2):
            hi = m2
        else:
            lo = m1
    return best
