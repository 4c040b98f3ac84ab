"""The predictor registry (ARCHITECTURE.md, "Add a predictor"). Pure: no torch, no files.

A predictor turns a profile into :class:`mcap.core.costs.StageCosts`, the predicted peak of
every possible stage; every search method and every report works on those. One class per
predictor, one file each, registered once with its name, label and help text::

    @register
    class Paper(Predictor):
        name, label, help = "paper", "Listing 1.1", "..."
        def fit(self, profile): ...

The CLI's ``--predictor`` choices, the dashboard's selectors and the evaluation read
:func:`names` / :func:`get`; :data:`DEFAULT` is what they use when nothing is chosen.
"""
from __future__ import annotations

from typing import ClassVar, Optional, Sequence

import numpy as np

from mcap.core.costs import StageCosts, Term
from mcap.core.errors import InvalidStatistics, McapError
from mcap.core.predict import cost_table
from mcap.core.registry import Registry
from mcap.core.profiling.stats import collect, extract, sources_for_windows, stage_windows
from mcap.core.types import LayerStats, Profile, Run


class Predictor:
    """Base class: ``name`` (the CLI word), ``label`` (a few words for selectors), ``help``
    (one or two sentences), and :meth:`fit`."""
    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    help: ClassVar[str] = ""

    def fit(self, profile: Profile) -> StageCosts:
        raise NotImplementedError


REGISTRY: Registry[Predictor] = Registry("predictor")
register, names, get = REGISTRY.register, REGISTRY.names, REGISTRY.get


# --- fitting once-per-stage terms on held-out profiling windows ---------------------------

def ok_runs(runs: Sequence[Run], num_layers: int) -> list[Run]:
    return [r for r in runs if r.status == "ok" and r.peaks and sum(r.balance) == num_layers]


def held_out(runs: Sequence[Run], num_layers: int) -> list[tuple[tuple[int, int], int]]:
    """Measured windows that no statistic is read from (``mcap.core.profiling.stats`` sources): every
    profiling run's other stages, held out for free."""
    wins = collect(runs, num_layers)
    measured = dict(wins.peaks)
    src = sources_for_windows(num_layers, measured, wins.max_stages)
    used = {w for w in src.isolated if w is not None}
    for layer, n in enumerate(src.added):
        if n is not None:
            used |= {(n, layer - 1), (n, layer)}
    return [(w, p) for w, p in sorted(measured.items()) if w not in used]


def terms_of(window_first: np.ndarray, window_last: np.ndarray, terms: Sequence[Term]) -> np.ndarray:
    out = np.zeros(len(window_first), dtype=np.int64)
    for t in terms:
        if t.weight:
            out += t.evaluate(window_first, window_last)
    return out


def residual_runs(runs: Sequence[Run], terms: Sequence[Term]) -> list[Run]:
    """Each run's per-stage peaks minus the terms of its windows."""
    out = []
    for r in runs:
        wins = stage_windows(r.balance)
        first = np.asarray([a for a, _ in wins])
        last = np.asarray([z for _, z in wins])
        extra = terms_of(first, last, terms)
        out.append(Run(r.balance, "ok", tuple(int(p - e) for p, e in zip(r.peaks, extra)),
                       r.seconds))
    return out


class Fit:
    """A candidate model of the profiling windows: residual statistics plus terms."""

    def __init__(self, stats: LayerStats, terms: tuple[Term, ...], error: Optional[float]):
        self.stats, self.terms, self.error = stats, terms, error
        self.details: dict = {}


class Windows:
    """The measured windows of a profile's ok runs, arranged so that the statistics of
    *any* term set are a few numpy operations: which window each statistic is read from does
    not depend on the terms (``mcap.core.profiling.stats`` sources), only the values do."""

    def __init__(self, runs: Sequence[Run], num_layers: int):
        self.L = num_layers
        self.runs = ok_runs(runs, num_layers)
        self.all_runs = list(runs)  # oom runs carry the over-capacity bounds (mcap.core.profiling.stats)
        wins = collect(self.all_runs, num_layers)
        measured = dict(wins.peaks)
        self.keys = list(measured)
        index = {w: i for i, w in enumerate(self.keys)}
        self.first = np.asarray([a for a, _ in self.keys], dtype=np.int64)
        self.last = np.asarray([z for _, z in self.keys], dtype=np.int64)
        self.peaks = np.asarray([measured[w] for w in self.keys], dtype=np.int64)
        src = sources_for_windows(num_layers, measured, wins.max_stages)
        self.complete = all(w is not None for w in src.isolated) and \
            all(n is not None or l == 0 or (wins.max_stages == 2 and l == num_layers - 1)
                for l, n in enumerate(src.added))
        if not self.complete:
            return
        self.iso_idx = np.asarray([index[w] for w in src.isolated], dtype=np.int64)
        self.iso_end = np.asarray([w[1] for w in src.isolated], dtype=np.int64)
        hi, lo, has = [], [], []
        for l, n in enumerate(src.added):
            ok = l > 0 and n is not None
            hi.append(index[(n, l)] if ok else 0)
            lo.append(index[(n, l - 1)] if ok else 0)
            has.append(ok)
        self.add_hi, self.add_lo = np.asarray(hi), np.asarray(lo)
        self.add_has = np.asarray(has)
        used = {w for w in src.isolated}
        for l, n in enumerate(src.added):
            if l > 0 and n is not None:
                used |= {(n, l - 1), (n, l)}
        self.held = np.asarray([i for i, w in enumerate(self.keys) if w not in used],
                               dtype=np.int64)
        self._features: dict = {}

    def term_values(self, terms: Sequence[Term]) -> np.ndarray:
        out = np.zeros(len(self.keys), dtype=np.int64)
        for t in terms:
            if not t.weight:
                continue
            key = (t.kind, t.values)
            if key not in self._features:
                self._features[key] = Term(t.name, t.kind, t.values, 1.0).evaluate(
                    self.first, self.last)
            out += np.rint(t.weight * self._features[key]).astype(np.int64)
        return out

    def score(self, terms: Sequence[Term]) -> Optional[Fit]:
        """The statistics of the residuals under ``terms`` and the held-out error (None when
        a mem_isolated comes out non-positive: not a model of these runs)."""
        if not self.complete:
            extract(self.all_runs, self.L)  # raises, naming what is missing
        r = self.peaks - self.term_values(terms)
        added = np.where(self.add_has, r[self.add_hi] - r[self.add_lo], 0)
        prefix = np.cumsum(added)
        iso = r[self.iso_idx] - (prefix[self.iso_end] - prefix[np.arange(self.L)])
        if (iso <= 0).any():
            return None
        stats = LayerStats(tuple(int(v) for v in iso),
                           (None,) + tuple(int(v) for v in added[1:]))
        if self.held.size == 0:
            return Fit(stats, tuple(terms), None)
        h = self.held
        pred = iso[self.first[h]] + prefix[self.last[h]] - prefix[self.first[h]] + \
            self.term_values(terms)[h]
        return Fit(stats, tuple(terms), float(np.abs(pred - self.peaks[h]).sum()
                                              / self.peaks[h].sum()))


def score_terms(runs: Sequence[Run], num_layers: int, terms: Sequence[Term],
                held=None) -> Optional[Fit]:
    """:meth:`Windows.score` for one term set (builds the windows: use ``Windows`` to score
    many)."""
    return Windows(runs, num_layers).score(terms)


def fit_terms(runs: Sequence[Run], num_layers: int,
              candidates: Sequence[tuple[Term, ...]], windows: Optional[Windows] = None) -> Fit:
    """The candidate term set whose Listing 1.1-of-residuals model best predicts the
    held-out windows, by ``sum |predicted - measured| / sum measured`` (a window counts by its
    bytes: a partitioning's peak is its largest stage). Candidates are tried in order and a
    later one must be strictly better, so list the simpler ones first. Without held-out
    windows the first candidate is taken (nothing to choose on). The sweep is never seen."""
    wins = windows or Windows(runs, num_layers)
    if not wins.runs:
        raise McapError(f"this predictor needs the profile's measured runs; this profile has "
                        f"{len(runs)} runs and none is ok")
    best: Optional[Fit] = None
    for terms in candidates:
        fit = wins.score(terms)
        if fit is None:
            continue
        if fit.error is None:
            return fit
        if best is None or fit.error < best.error - 1e-12:
            best = fit
    if best is None:
        raise McapError("no candidate term gives valid statistics for these runs")
    return best
