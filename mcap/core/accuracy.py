"""How good the predictions are on the data a page shows (issue 26, "Say how good the numbers
are"; issue 30 item 4). Pure: no torch, no files.

Wherever a prediction drives a decision the dashboard shows the dataset's error beside it:
the chosen predictor against the chosen sweep, |predicted - measured| / measured of each
measured partitioning's fullest device, its median and 90th percentile. The numbers come
from :mod:`mcap.core.evaluate` (``prediction_errors``, ``summarise``), the one place the CLI's
``evaluate`` takes them from too. Above :data:`mcap.core.evaluate.GOAL_WITHIN` at p90 it warns
in words.

**Which term the error comes from.** A stage's prediction is built on Listing 1.1's terms
(mCAP 3.3): ``mem_isolated`` of its first layer plus ``mem_added`` of each later one. Over the
sweep's measured stages, the term whose presence best explains the difference between
measured and predicted (one correction per term, least squares) is named with the profile's
value for it, the mean difference of the stages that use it, and what the dataset's p90
would be with that one term corrected. Terms that always appear together cannot be told apart
by the sweep; among those the profile says which one is large enough to carry the bytes. It
is named only when it explains at least half the p90 (else the error has no one source the
data can point at).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from mcap.core.errors import McapError
from mcap.core.evaluate import GOAL_WITHIN, percentile, prediction_errors, summarise
from mcap.core.partition import windows
from mcap.core.setup import check_compatible
from mcap.core.types import Profile, Sweep

# Terms whose fit is within this share of the best one are ones the sweep cannot tell apart.
TIED = 0.10


@dataclass(frozen=True)
class TermBlame:
    """The one profile term most of the dataset's error comes from (module docstring)."""
    kind: str            # "mem_isolated" or "mem_added"
    layer: int
    name: str            # the layer's name
    value: int           # the profile's bytes for the term
    stages: int          # measured stages whose prediction uses it
    shift: int           # mean (measured - predicted) of those stages, bytes
    p90_after: float     # the dataset's p90 with the term corrected by ``shift``

    @property
    def label(self) -> str:
        return f"{self.kind} of layer {self.layer} ({self.name})"


@dataclass(frozen=True)
class Accuracy:
    """The dataset's prediction error under one predictor."""
    predictor: str
    count: int           # measured partitionings compared
    p50: float
    p90: float
    under: int           # partitionings predicted below their measured peak
    term: Optional[TermBlame] = None

    @property
    def good(self) -> bool:
        return self.p90 <= GOAL_WITHIN

    def summary(self) -> str:
        return (f"Predictions ({self.predictor}) against this sweep's {self.count:,} measured "
                f"partitionings: p50 {100 * self.p50:.1f}%, p90 {100 * self.p90:.1f}% off "
                "(the fullest device's peak).")

    def warning(self) -> Optional[str]:
        """The words above the goal, or None within it."""
        if self.good:
            return None
        return (f"Predictions on this dataset are off by up to {100 * self.p90:.1f}% (p90, "
                f"{self.predictor}); measure before you commit.")

    def term_sentence(self) -> Optional[str]:
        t = self.term
        if t is None:
            return None
        direction = "lower" if t.shift < 0 else "higher"
        return (f"Most of the error comes from one term: {t.label} is {_mib(t.value)} in the "
                f"profile, and the {t.stages:,} measured stages that use it read "
                f"{_mib(abs(t.shift))} {direction} than predicted on average; with that term "
                f"corrected the p90 would be {100 * t.p90_after:.1f}%.")


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def accuracy(profile: Profile, sweep: Sweep, predictor: Optional[str] = None) -> Accuracy:
    """The error of ``predictor`` (default: the registry's) over ``sweep``'s ok runs; raises
    McapError when the two cannot be compared or the sweep has no ok run."""
    from mcap.core.recommend import costs_of
    check_compatible(profile, sweep)
    costs = costs_of(profile, predictor)
    ok = [r for r in sweep.runs if r.status == "ok" and r.peaks
          and len(r.balance) == len(r.peaks)]
    points = prediction_errors(costs, ok)
    s = summarise(points, costs.predictor)
    term = None if s.p90 <= GOAL_WITHIN else blame(profile, costs, ok, s.p90)
    return Accuracy(costs.predictor, s.count, s.median, s.p90, s.under, term)


def blame(profile: Profile, costs, runs: Sequence, p90: float) -> Optional[TermBlame]:
    """The term most of the error comes from, or None (module docstring)."""
    L = profile.model.num_layers
    runs = [r for r in runs if sum(r.balance) == L and r.peak and r.peak > 0]
    if not runs:
        return None
    groups = {}  # stage count -> (run indices, their predicted per-stage peaks)
    for g in sorted({len(r.balance) for r in runs}):
        rows = [i for i, r in enumerate(runs) if len(r.balance) == g]
        groups[g] = (rows, costs.peaks_many(np.asarray([runs[i].balance for i in rows],
                                                       dtype=np.int64)))
    # one row per measured stage: its run, first and last layer, residual measured - predicted
    run_of, first, last, resid, pred = [], [], [], [], []
    for rows, peaks in groups.values():
        for i, row in zip(rows, peaks):
            for (a, z), p, m in zip(windows(runs[i].balance), row, runs[i].peaks):
                run_of.append(i), first.append(a), last.append(z)
                resid.append(float(m) - float(p)), pred.append(float(p))
    run_of, first, last = map(np.asarray, (run_of, first, last))
    resid, pred = np.asarray(resid), np.asarray(pred)
    # term t < L: mem_isolated(t) (stages starting at t); t >= L: mem_added(t - L) (stages
    # holding t - L after their first layer)
    n = np.zeros(2 * L)
    total = np.zeros(2 * L)
    np.add.at(n, first, 1)
    np.add.at(total, first, resid)
    diff_n, diff_sum = np.zeros(L + 1), np.zeros(L + 1)
    np.add.at(diff_n, first + 1, 1)
    np.add.at(diff_n, last + 1, -1)
    np.add.at(diff_sum, first + 1, resid)
    np.add.at(diff_sum, last + 1, -resid)
    n[L:] = np.cumsum(diff_n)[:L]
    total[L:] = np.cumsum(diff_sum)[:L]
    gain = np.where(n > 0, total ** 2 / np.maximum(n, 1), 0.0)  # the SSE one correction removes
    if gain.max() <= 0:
        return None
    tied = np.flatnonzero(gain >= (1 - TIED) * gain.max())
    values = [_term_value(profile, int(t), L) for t in tied]
    t = int(tied[int(np.argmax(np.abs(values)))])
    shift = total[t] / n[t]
    uses = (first == t) if t < L else ((first < t - L) & (last >= t - L))
    corrected = pred + np.where(uses, shift, 0.0)
    errors = []
    for i, r in enumerate(runs):
        errors.append(abs(corrected[run_of == i].max() - r.peak) / r.peak)
    after = percentile(errors, 90)
    if after > p90 / 2:
        return None
    layer = t % L
    return TermBlame("mem_isolated" if t < L else "mem_added", layer,
                     profile.model.layers[layer].name, _term_value(profile, t, L), int(n[t]),
                     int(round(shift)), after)


def _term_value(profile: Profile, t: int, L: int) -> int:
    stats = profile.stats
    value = stats.mem_isolated[t] if t < L else stats.mem_added[t - L]
    return int(value or 0)


def stage_terms(profile: Profile, costs, balance: Sequence[int]) -> tuple[tuple[tuple[str, int], ...], ...]:
    """Per device: the terms its predicted peak is built from, largest first: Listing 1.1's
    ``mem_isolated`` of the first layer and ``mem_added`` of the others, and what the
    predictor adds to them (its once-per-stage terms), as (what, bytes) pairs that sum to the
    predicted peak."""
    if sum(balance) != profile.model.num_layers:
        raise McapError(f"balance sums to {sum(balance)} but the model has "
                        f"{profile.model.num_layers} layers")
    names = [l.name for l in profile.model.layers]
    stats = profile.stats
    out = []
    for (a, z), peak in zip(windows(balance), costs.peaks(balance)):
        terms = [(f"mem_isolated of layer {a} ({names[a]})", int(stats.mem_isolated[a]))]
        terms += [(f"mem_added of layer {l} ({names[l]})", int(stats.mem_added[l] or 0))
                  for l in range(a + 1, z + 1)]
        rest = int(peak) - sum(v for _, v in terms)
        if rest:
            terms.append((f"{costs.predictor}'s own terms", rest))
        out.append(tuple(sorted(terms, key=lambda t: -abs(t[1]))))
    return tuple(out)


@dataclass(frozen=True)
class StageMeasured:
    """What the measured runs say about one stage of a partitioning: how many ok runs held
    the same stage (``mcap.core.profiling.cover.stage_keys``: same layers, same place in the pipeline)
    and the highest peak they read there (memory is a limit: on a GPU a stage's peak varies
    from run to run)."""
    count: int
    peak: Optional[int]


def stage_measurements(runs: Sequence, balance: Sequence[int], schedule: str
                       ) -> tuple[StageMeasured, ...]:
    """Per stage of ``balance``: its measurements in any ok run of ``runs`` (same setup)."""
    from mcap.core.profiling.cover import stage_keys
    keys = stage_keys(balance, schedule)
    seen: dict = {k: [] for k in keys}
    for r in runs:
        if r.status != "ok" or not r.peaks or len(r.balance) != len(keys):
            continue
        for k, p in zip(stage_keys(r.balance, schedule), r.peaks):
            if k in seen:
                seen[k].append(int(p))
    return tuple(StageMeasured(len(seen[k]), max(seen[k]) if seen[k] else None) for k in keys)


def terms_sentence(predicted: Sequence[int], measured: Sequence[StageMeasured],
                   terms: Sequence[Sequence[tuple[str, int]]], shown: int = 2) -> str:
    """What one device's prediction is built from, in words: the device furthest from its
    measured peak (the fullest predicted one when no stage was measured), its largest terms
    (``stage_terms``) and the rest summed, and what the runs measured on that stage."""
    known = [i for i, m in enumerate(measured) if m.peak]
    if known:
        d = max(known, key=lambda i: abs(predicted[i] - measured[i].peak) / measured[i].peak)
    else:
        d = max(range(len(predicted)), key=lambda i: predicted[i])
    parts = [f"{what} {_mib(v)}" for what, v in terms[d][:shown]]
    rest = terms[d][shown:]
    if rest:
        parts.append(f"{_mib(sum(v for _, v in rest))} in {len(rest)} more term"
                     f"{'s' if len(rest) > 1 else ''}")
    text = f"Device {d}'s predicted {_mib(predicted[d])} = " + " + ".join(parts)
    m = measured[d]
    if m.peak:
        off = (predicted[d] - m.peak) / m.peak
        text += (f"; this stage measured {_mib(m.peak)}"
                 + (f" (the highest of {m.count} runs that held it)" if m.count > 1 else "")
                 + f", {100 * off:+.1f}% predicted")
    return text + "."
