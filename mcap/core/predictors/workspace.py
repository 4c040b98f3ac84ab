"""``workspace``: ``perstage`` plus the memory a stage **process** pays once for the libraries
its layers call, with *which* layers call them read from the profile.

Why (measured on one H200, bench/log/2026-11-26-gpu-predictors.md): cuBLAS / cuBLASLt allocate
their workspaces through PyTorch's caching allocator at the first matrix multiply of each
thread (``CublasHandlePool.cpp``: 32 MiB per handle on sm_90, 8 MiB + 128 KiB elsewhere;
cuBLASLt 1 MiB more), so ``max_memory_allocated`` counts them, **once per stage process**:
the forward thread and autograd's backward thread, about 65 MiB on Hopper, whatever number
of Linear layers the stage holds. Convolutions (cuDNN), ReLUs and pools never pay it. A
profiling window pays it if it holds *any* such layer, so Listing 1.1 (3.3) counts it once
per "first matmul of a window": in ``mem_isolated`` of every Linear and in ``mem_added`` of
a Linear read across a pair whose smaller window holds none (VGG11's fc1 after the
convolutions, fc3 after drop2). A classifier stage was predicted at twice its peak.

Model: ``peak(a..z) = perstage(a..z) + W * [a..z holds a layer of U]``, a *presence* term
(``mcap.core.costs``) whose layers ``U`` and bytes ``W`` come from the profile's own windows,
on any device and with no constant of one GPU:

* The residual of every measured window is its peak minus ``W`` if it holds a layer of
  ``U``; mem_isolated / mem_added are read from the residuals (``base.Windows``), so a
  mem_added read across a pair where only the larger window holds a layer of ``U`` loses
  ``W`` and one where both (or neither) hold one loses nothing: *whether a window already
  paid* is known from which layers it holds, never measured separately.
* ``U`` is a set of layer kinds (``Layer.kind``, e.g. "Linear"; a kind is all its layers)
  when every layer with parameters has a kind, else a set of single layers with parameters
  (older files). It is grown greedily: each step adds the unit (or, when no single unit
  will do, the two units) whose best ``W`` lowers the held-out error most, and stops when
  none lowers it by ``KEEP_IF_BETTER_BY`` (perstage's rule against fitting noise). For each candidate ``W`` is searched on a grid over
  ``(0, the smallest peak of a window holding U]`` (above it a residual would be negative)
  and refined by ternary search (the error is piecewise linear in ``W``).
* Then the largest-parameter max term is refitted with the workspace fixed (per kind, per
  layer: ``perstage``), then ``W`` once more, then the middle-stage term (``perstage``).
* The whole is kept only if its held-out error is at least ``KEEP_IF_BETTER_BY`` below
  ``perstage``'s; else this *is* ``perstage``. On the bundled CPU profiles nothing is paid
  once per process, and it is (bench/log/2026-11-26-gpu-predictors.md).

**The optimizer step, on CUDA.** ``torch.optim`` takes its *foreach* path on CUDA, and SGD's
weight decay (Adam's square root) makes one new copy of every parameter of the stage at once
(``mcap.core.forcuda``): at its step a stage holds ``forcuda.step_table`` bytes, 4x its
parameters under SGD, whatever Listing 1.1 of its windows says. A window whose parameters
reach that floor peaks at the step, so a CUDA profile's prediction is ``max(the model
above without the workspace, the step) + W`` (the workspace is still held at the step). Not
fitted; it is kept only if it leaves the held-out error as low or lower. On the H200 VGG11
profile it moves stages heavy in convolution weights up to their step (per-stage p90 4.96%
-> 3.14%). A CPU profile's per-tensor step copy is the max-type term above.

**What else a stage holds at its step: its boundary activations.** A pipeline stage keeps
every micro-batch's received input and sent output until its step (the schedule holds the
receive buffers and the forward sends' work objects), so the step holds ``chunks x
(bytes received + bytes sent)`` more (first stage: nothing received; last: nothing sent).
A profile whose runs record the bytes a stage receives and sends (``StageTimes``, the
alone runner) gives them for every layer boundary; the step is then
``forcuda.step_table + boundary_table``, not fitted, kept only if it lowers the held-out
error (strictly: where the exchange stages through the host, the step holds none of them;
only the alone runner records the bytes, and it keeps them on the device). On the clean
H200 VGG11 profile (``vgg11-h512-b8-h200x4-alone``) a middle stage at its step, e.g.
layers 12..20, reads ``4 x parameters + 4 x (64 + 4) KiB`` to the byte
(bench/log/2026-11-26-h200-predictor-error.md,
which also says what this model
still leaves out there: the allocator's unsplit blocks).

Transient library workspaces (cuDNN's, allocated and freed per call) are a max-type term,
not a presence term: ``perstage``'s largest-parameter term per kind and layer already takes
them where the profile shows them; on the H200 VGG11 profile it shows none.
"""
from __future__ import annotations

import numpy as np

from mcap.core import forcuda
from mcap.core.costs import Term, TermCosts
from mcap.core.predict import CostTable
from mcap.core.predictors import perstage as ps
from mcap.core.predictors.base import Predictor, Windows, ok_runs, register
from mcap.core.predictors.maxparam import costs_of, fit_maxparam, without_runs
from mcap.core.profiling.stats import stage_windows
from mcap.core.types import Profile

LIBRARY = "library workspace, once per stage"
PAID_BY = "library workspace paid by"
STEP = "optimizer step (CUDA), parameter bytes x"
BOUNDARY = "optimizer step (CUDA) also holds boundary activations, micro-batches x"
KEEP_IF_BETTER_BY = ps.KEEP_IF_BETTER_BY
GRID = 48  # W candidates on (0, upper bound], then a ternary refinement around the best
REFINE_STEPS = 30
MAX_UNITS = 32  # single-layer units beyond this many: not searched (a step tries units^2 / 2)


def units_of(layers) -> tuple[bool, list]:
    """(by_kind, units): the kinds of the layers with parameters when all are known, else
    the indices of the layers with parameters."""
    kinds = ps._kinds(layers)
    if kinds:
        return True, kinds
    return False, [i for i, l in enumerate(layers) if l.param_bytes > 0]


def library_values(layers, by_kind: bool, units) -> tuple[int, ...]:
    chosen = set(units)
    return tuple(1 if (l.kind if by_kind else i) in chosen else 0 for i, l in enumerate(layers))


def library_term(values, weight: float) -> Term:
    return Term(LIBRARY, "presence", tuple(values), float(weight))


def best_weight(wins: Windows, fixed: tuple, values):
    """The Fit of ``fixed + (W x presence(values),)`` with the lowest held-out error over W
    (None when no W gives valid statistics)."""
    counts = np.concatenate([[0], np.cumsum(values)])
    holds = counts[wins.last + 1] - counts[wins.first] > 0
    if not holds.any():
        return None
    upper = float(wins.peaks[holds].min())
    best = None

    def at(w: float) -> float:
        nonlocal best
        f = wins.score((*fixed, library_term(values, w)))
        if f is None or f.error is None:
            return np.inf
        if best is None or f.error < best.error - 1e-12:
            best = f
        return f.error

    errors = [at(upper * k / GRID) for k in range(1, GRID + 1)]
    k = int(np.argmin(errors)) + 1
    lo, hi = upper * (k - 1) / GRID, upper * min(k + 1, GRID) / GRID
    for _ in range(REFINE_STEPS):
        m1, m2 = lo + (hi - lo) / 3, hi - (hi - lo) / 3
        if at(m1) <= at(m2):
            hi = m2
        else:
            lo = m1
    return best


def choose_units(wins: Windows, layers, fixed: tuple):
    """U (module docstring), grown greedily by one unit, or two when no single one will do:
    a workspace that several layers pay shows in the held-out windows only once two of them
    are in U (with one, the mem_added of another still carries it, so every window holding
    both is as far off as before: VGG11's fc1, fc2, fc3 on the H200 without kinds). Returns
    (by_kind, units, Fit) or None."""
    by_kind, units = units_of(layers)
    if not units or (not by_kind and len(units) > MAX_UNITS):
        return None
    start = wins.score(fixed)
    if start is None or start.error is None:
        return None
    chosen, fit, error = [], None, start.error
    while True:
        rest = [u for u in units if u not in chosen]
        step = _best_move(wins, fixed, layers, by_kind, chosen, [[u] for u in rest], error)
        if step is None:  # pairs only when no single unit will do (they cost units^2 / 2)
            pairs = [[u, v] for i, u in enumerate(rest) for v in rest[i + 1:]]
            step = _best_move(wins, fixed, layers, by_kind, chosen, pairs, error)
        if step is None:
            break
        chosen += step[0]
        fit, error = step[1], step[1].error
    return (by_kind, chosen, fit) if fit is not None else None


def _best_move(wins, fixed, layers, by_kind, chosen, moves, error):
    """The move whose best W lowers the held-out error most, if by KEEP_IF_BETTER_BY."""
    step = None
    for move in moves:
        f = best_weight(wins, fixed, library_values(layers, by_kind, chosen + move))
        if f is not None and (step is None or f.error < step[1].error - 1e-12):
            step = (move, f)
    if step is None or not step[1].error < (1 - KEEP_IF_BETTER_BY) * error:
        return None
    return step


def fit_workspace(profile: Profile, wins: Windows, start: float):
    """The max + library-workspace Fit (module docstring), or None when the windows show no
    workspace. U is grown twice, with no max term and with perstage's, since a max term
    fitted first absorbs part of a workspace (a Linear's c went to 8 on the H200 profile);
    the max term is then refitted with the workspace fixed, and W once more."""
    layers = profile.model.layers
    kinds = ps._per_kind(wins, layers, start)
    plain = ps._per_layer(wins, layers, ps._layer_weights(layers, kinds))
    best = None
    for fixed in ((), plain.terms if plain is not None else None):
        found = choose_units(wins, layers, fixed) if fixed is not None else None
        if found is None:
            continue
        by_kind, units, fit = found
        values = library_values(layers, by_kind, units)
        lib = fit.terms[-1]
        c = ps._per_kind(wins, layers, start, (lib,))
        refit = ps._per_layer(wins, layers, ps._layer_weights(layers, c), (lib,))
        again = best_weight(wins, refit.terms[:1], values) if refit is not None else None
        if again is not None and again.error < fit.error:
            fit = again
        else:
            c = kinds if fixed else {"": 0.0}
        if best is None or fit.error < best[0].error - 1e-12:
            best = (fit, c, by_kind, units)
    if best is None:
        return None
    fit, c, by_kind, units = best
    lib = fit.terms[-1]
    fit.details = {"largest parameter tensor": c,
                   **(ps._layer_details(layers, c, fit.terms[0]) if len(fit.terms) > 1 else {}),
                   LIBRARY: int(round(lib.weight)),
                   PAID_BY: sorted(units) if by_kind else [layers[i].name for i in sorted(units)]}
    return fit


@register
class Workspace(Predictor):
    name = "workspace"
    label = "workspace (+ per-process library memory)"
    help = ("perstage plus a library workspace a stage process pays once if it holds a layer "
            "of the kinds that call it (cuBLAS on a GPU); which kinds, and the bytes, fitted "
            "on the profile's own held-out windows.")

    def fit(self, profile: Profile):
        layers = profile.model.layers
        pb = [l.param_bytes for l in layers]
        if not ok_runs(profile.runs, len(pb)):
            return without_runs(profile, self.name)
        base = fit_maxparam(profile.runs, pb)
        if base.error is None:
            return costs_of(base, self.name)
        wins = Windows(profile.runs, len(pb))
        fit = ps._once_per_stage(profile, layers, wins, base.terms[0].weight)
        lib = fit_workspace(profile, wins, base.terms[0].weight)
        if lib is not None and lib.error < (1 - KEEP_IF_BETTER_BY) * fit.error:
            fit = lib
        fit = ps._with_middle(profile, layers, wins, fit)
        costs = costs_of(fit, self.name)
        costs.details.update(fit.details)
        from mcap.core.predictors.positional import with_positions
        return with_positions(with_step(costs, profile, wins), profile, wins)


def with_step(costs: TermCosts, profile: Profile, wins: Windows):
    """``costs`` floored by a CUDA stage's optimizer step (module docstring), or ``costs``
    (not CUDA, another optimizer, or a worse held-out error)."""
    setup = profile.setup
    if setup.device != "cuda" or setup.optimizer not in forcuda.FOREACH_COPIES or \
            not wins.complete or wins.held.size == 0:
        return costs
    lib = tuple(t for t in costs.terms if t.name == LIBRARY)
    backward = TermCosts(costs.base, tuple(t for t in costs.terms if t.name != LIBRARY),
                         costs.predictor)
    step = forcuda.step_table([l.param_bytes for l in profile.model.layers], setup.optimizer)
    details = {**costs.details, STEP: forcuda.STATE_COPIES[setup.optimizer]
               + forcuda.FOREACH_COPIES[setup.optimizer]}
    floored = forcuda.CudaCosts(backward, step, lib, costs.predictor, details)
    h, peaks = wins.held, wins.peaks[wins.held]

    def error(c):
        return float(np.abs(c.stage_costs(wins.first[h], wins.last[h]) - peaks).sum() / peaks.sum())

    best = floored if error(floored) <= error(costs) else costs
    edges = boundary_table(profile)
    if edges is not None:
        held = forcuda.CudaCosts(backward, CostTable(iso=step.iso + edges.iso,
                                                     prefix=step.prefix + edges.prefix),
                                 lib, costs.predictor, {**details, BOUNDARY: setup.chunks})
        if error(held) < error(best):  # bytes added must earn their place: a tie is not
            best = held                 # evidence (host-staged exchanges hold none of them)
    return best


def boundary_bytes(profile: Profile):
    """``out[l]``: the bytes of one micro-batch of layer l's output (what a stage ending at
    l sends, one starting at l + 1 receives), for every l < L - 1, as the profile's ok runs
    recorded them (``StageTimes``); None when a boundary is unrecorded (older files, runs
    whose stages ran together) or two records disagree."""
    L = len(profile.model.layers)
    out: dict[int, int] = {}
    for run in ok_runs(profile.runs, L):
        for (a, z), t in zip(stage_windows(run.balance), run.times or ()):
            if t is None:
                continue
            for l, b in ((z, t.send_bytes), (a - 1, t.recv_bytes)):
                if 0 <= l < L - 1 and b > 0:
                    if out.setdefault(l, int(b)) != int(b):
                        return None
    if len(out) < L - 1:
        return None
    return np.asarray([out[l] for l in range(L - 1)] + [0], dtype=np.int64)


def boundary_table(profile: Profile):
    """What a stage a..z holds of its boundary activations at its step (module docstring):
    ``chunks x (in(a) + out(z))``, one allocator block per micro-batch (a lower bound when
    a layer passes a tuple), as a Listing 1.1 table; None without :func:`boundary_bytes`."""
    out = boundary_bytes(profile)
    if out is None:
        return None
    out = profile.setup.chunks * forcuda.round_block(out)
    into = np.concatenate([[0], out[:-1]])  # what stage a receives: layer a - 1's output
    added = np.concatenate([[0], np.diff(out)])
    return CostTable(iso=into + out, prefix=np.cumsum(added))
