"""How good are the predictor and the recommendations on a measured sweep (paper 4.2).

Pure: no torch, no files. Given a ``Profile`` (the statistics) and a ``Sweep`` (measured
partitionings of the same model under the same setup):

* **Prediction error** (paper Fig. 9): for every ok run, |predicted - measured| / measured
  of the partitioning's peak (its worst stage); the median, 90th and 99th percentile and
  maximum, and the share within 5% (the issue's goal) and within 14% (the paper's claim:
  90% of partitionings).
* **Where each method's pick lands** (paper 4.2: mCAP's pick 3rd lowest, 1.05x the best):
  the pick's measured peak when the sweep measured it, its rank among the ok runs by
  measured peak (1 = lowest; equal peaks share a rank) and its ratio to the lowest.

The picks themselves (``Recommendation``) come from ``mcap.core.recommend.recommend`` (every
registered method; ``time`` needs a model timer in its context); ``pure_picks`` runs the
ones that need no model. Error statistics use one percentile definition,
:func:`percentile` (linear interpolation, numpy's default), in the CLI and the dashboard.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from mcap.core.errors import McapError
from mcap.core.costs import StageCosts
from mcap.core.setup import check_compatible
from mcap.core.types import Profile, Recommendation, Run, Sweep

PAPER_WITHIN = 0.14  # paper 4.2: 90% of partitionings within 14%
GOAL_WITHIN = 0.05  # issue 6, "Better than the paper": 90% within 5%


@dataclass(frozen=True)
class PointError:
    """One measured partitioning: its measured and predicted peak and the signed relative
    error (predicted - measured) / measured (negative: the predictor was too low)."""
    balance: tuple[int, ...]
    measured: int
    predicted: int

    @property
    def error(self) -> float:
        return (self.predicted - self.measured) / self.measured


@dataclass(frozen=True)
class ErrorSummary:
    """The distribution of |predicted - measured| / measured over a sweep's ok runs."""
    predictor: str
    count: int
    median: float
    p90: float
    p99: float
    max: float
    within_goal: float  # share of partitionings within GOAL_WITHIN
    within_paper: float  # share within PAPER_WITHIN
    under: int  # partitionings predicted below their measured peak (risk of running out)


@dataclass(frozen=True)
class MethodPick:
    """A method's pick and where it lands among the measured partitionings.

    ``measured_peak``, ``rank`` and ``ratio`` are None when the sweep did not measure the
    pick ok; ``note`` says why (not in the sweep, oom in the sweep, method unavailable)."""
    method: str
    balance: Optional[tuple[int, ...]]
    predicted_peak: Optional[int]
    measured_peak: Optional[int] = None
    rank: Optional[int] = None
    ratio: Optional[float] = None
    note: str = ""


@dataclass(frozen=True)
class Evaluation:
    spec: str
    stages: int
    runs: int  # runs in the sweep
    ok: int  # ok runs (those the errors and ranks are over)
    best_balance: tuple[int, ...]
    best_peak: int
    errors: ErrorSummary
    picks: tuple[MethodPick, ...]
    points: tuple[PointError, ...]


def _ok_runs(sweep: Sweep) -> list[Run]:
    return [r for r in sweep.runs if r.status == "ok" and r.peaks]


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between closest ranks (numpy's
    default): the one definition every report uses."""
    if len(values) == 0:
        raise McapError("no values to take a percentile of")
    return float(np.percentile(np.asarray(values, dtype=float), q))


def prediction_errors(predictor: StageCosts, runs: Sequence[Run]) -> tuple[PointError, ...]:
    """Predicted vs measured peak of every ok run (the partitioning's worst stage)."""
    ok = [r for r in runs if r.status == "ok" and r.peaks]
    if not ok:
        return ()
    stages = {len(r.balance) for r in ok}
    out = []
    for g in sorted(stages):
        rows = [r for r in ok if len(r.balance) == g]
        pred = predictor.peaks_many(np.asarray([r.balance for r in rows], dtype=np.int64))
        out += [PointError(tuple(r.balance), int(r.peak), int(p.max()))
                for r, p in zip(rows, pred)]
    return tuple(out)


def summarise(points: Sequence[PointError], predictor: str) -> ErrorSummary:
    """Median, p90, p99 and max of |error| (numpy's linear-interpolated percentiles)."""
    if not points:
        raise McapError("the sweep has no ok run to compare the predictions with")
    bad = [p for p in points if p.measured <= 0]
    if bad:
        raise McapError(f"{len(bad)} measured peaks are not positive (e.g. "
                        f"{'-'.join(map(str, bad[0].balance))}: {bad[0].measured} bytes); "
                        "relative errors need positive peaks")
    err = np.abs(np.asarray([p.error for p in points], dtype=float))
    return ErrorSummary(predictor=predictor, count=len(points),
                        median=percentile(err, 50), p90=percentile(err, 90),
                        p99=percentile(err, 99), max=float(err.max()),
                        within_goal=float(np.mean(err <= GOAL_WITHIN)),
                        within_paper=float(np.mean(err <= PAPER_WITHIN)),
                        under=sum(1 for p in points if p.predicted < p.measured))


def place(method: str, balance: Optional[Sequence[int]], predicted_peak: Optional[int],
          runs: Sequence[Run], note: str = "") -> MethodPick:
    """Where ``balance`` lands among ``runs``: rank by measured peak among the ok runs
    (1 + how many ok runs peak strictly lower) and ratio to the lowest ok peak."""
    if balance is None:
        return MethodPick(method, None, predicted_peak, note=note or "no pick")
    balance = tuple(int(n) for n in balance)
    ok = [r for r in runs if r.status == "ok" and r.peaks]
    mine = [r for r in runs if tuple(r.balance) == balance]
    hit = next((r for r in mine if r.status == "ok" and r.peaks), None)
    if hit is None:
        status = mine[-1].status if mine else None
        why = "not measured" if status is None else f"{status} in the sweep"
        return MethodPick(method, balance, predicted_peak, note=note or why)
    best = min(r.peak for r in ok)
    rank = 1 + sum(1 for r in ok if r.peak < hit.peak)
    return MethodPick(method, balance, predicted_peak, measured_peak=int(hit.peak), rank=rank,
                      ratio=hit.peak / best, note=note)


def pure_picks(profile: Profile, stages: int, *, predictor: Optional[str] = None, seed: int = 0,
               methods: Optional[Sequence[str]] = None, bo_iterations: int = 75,
               refused: Optional[list] = None) -> tuple[Recommendation, ...]:
    """The picks of every registered method that needs no model (``needs_model``: not
    ``time``), under ``predictor``. bo uses the paper's 75 evaluations unless told otherwise (4.1).

    A ``partial`` method whose rule does not exist here (Megatron-LM's split of blocks the
    stages do not divide) raises McapError; with a ``refused`` list its (method, why) is
    appended there instead, for ``evaluate(..., unavailable=)`` to report."""
    from mcap.core.recommend import recommend
    from mcap.core.search import choose, names

    methods = names(needs_model=False) if methods is None else methods
    out = []
    for m in methods:
        try:
            out.append(recommend(profile, stages, m, predictor, seed=seed, iterations=bo_iterations))
        except McapError as exc:
            if refused is None or not choose(m)[0].partial:
                raise
            refused.append((m, f"refused: {exc}"))
    return tuple(out)


def evaluate(profile: Profile, sweep: Sweep, picks: Sequence[Recommendation] = (), *,
             predictor: Optional[str] = None,
             unavailable: Sequence[tuple[str, str]] = ()) -> Evaluation:
    """The error distribution of ``predictor`` over ``sweep`` and where each pick lands.

    ``unavailable`` lists (method, why) for methods that could not run here (``time``
    without torch), so the report says so instead of leaving them out silently."""
    check_compatible(profile, sweep)
    ok = check_measured(sweep)
    from mcap.core.recommend import costs_of
    from mcap.core.search import names

    pred = costs_of(profile, predictor)
    points = prediction_errors(pred, ok)
    best = min(ok, key=lambda r: (r.peak, tuple(r.balance)))
    placed = {rec.method: place(rec.method, rec.balance, pred.peak(rec.balance), sweep.runs)
              for rec in picks}
    for method, why in unavailable:
        placed.setdefault(method, MethodPick(method, None, None, note=why))
    order = [m for m in names() if m in placed] + [m for m in placed if m not in names()]
    return Evaluation(spec=sweep.model.spec, stages=sweep.setup.stages, runs=len(sweep.runs),
                      ok=len(ok), best_balance=tuple(best.balance), best_peak=int(best.peak),
                      errors=summarise(points, pred.predictor), picks=tuple(placed[m] for m in order),
                      points=points)


def check_measured(sweep: Sweep) -> list[Run]:
    """The sweep's ok runs; McapError when there is none, or one with a 0-byte peak (the
    error is relative to the measured peak). Callers check this before searching."""
    ok = _ok_runs(sweep)
    if not ok:
        raise McapError(f"the sweep of {sweep.model.spec!r} has no ok run "
                        f"({len(sweep.runs)} runs: {_statuses(sweep.runs)})")
    zero = [r for r in ok if r.peak <= 0]
    if zero:  # the error is relative to the measured peak: a 0-byte peak is no measurement
        raise McapError(f"the sweep of {sweep.model.spec!r} has {len(zero)} ok run(s) with a "
                        f"measured peak of 0 bytes (e.g. balance "
                        f"{','.join(map(str, zero[0].balance))}); a real run holds memory")
    return ok


def _statuses(runs: Sequence[Run]) -> str:
    counts: dict[str, int] = {}
    for r in runs:
        counts[r.status] = counts.get(r.status, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none"


@dataclass(frozen=True)
class RankAgreement:
    """How two sweeps of the same partitionings (say CPU stage processes and a GPU) rank
    them by measured peak (the partitioning's fullest device)."""
    n: int                 # partitionings ok in both
    spearman: float        # rank correlation (ties get their average rank)
    kendall: float         # Kendall's tau-b
    best_ties: int         # partitionings sharing A's lowest peak
    best_ranks: tuple[int, int]        # the best and worst B rank among them (1 = B's lowest)
    best_ratios: tuple[float, float]   # their B peaks over B's lowest, best and worst
    top: int               # the size of the top lists compared
    top_shared: int        # partitionings in both top lists


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x), dtype=float)
    ranks[order] = np.arange(1, len(x) + 1)
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return (sums / counts)[inverse]


def _kendall_b(x: np.ndarray, y: np.ndarray, chunk: int = 512) -> float:
    """tau-b = (concordant - discordant) / sqrt((n0 - ties_x)(n0 - ties_y)), over all pairs."""
    conc = ties_x = ties_y = 0
    n = len(x)
    for s in range(0, n, chunk):
        dx = np.sign(x[s:s + chunk, None] - x[None, :])
        dy = np.sign(y[s:s + chunk, None] - y[None, :])
        upper = np.arange(s, min(s + chunk, n))[:, None] < np.arange(n)[None, :]
        conc += int((dx * dy)[upper].sum())
        ties_x += int((dx == 0)[upper].sum())
        ties_y += int((dy == 0)[upper].sum())
    n0 = n * (n - 1) // 2
    den = ((n0 - ties_x) * (n0 - ties_y)) ** 0.5
    return float(conc / den) if den else float("nan")


def rank_agreement(a: Sequence[Run], b: Sequence[Run], top: int = 36) -> RankAgreement:
    """Rank agreement of two sweeps over the partitionings both measured ok (mCAP ranks
    partitionings by peak; a stand-in device is only as good as the order it gives)."""
    pa = {tuple(r.balance): max(r.peaks) for r in a if r.status == "ok" and r.peaks}
    pb = {tuple(r.balance): max(r.peaks) for r in b if r.status == "ok" and r.peaks}
    common = sorted(set(pa) & set(pb))
    if len(common) < 3:
        raise McapError(f"the two sweeps share {len(common)} ok partitionings; rank agreement "
                        "needs at least 3")
    x = np.asarray([pa[k] for k in common], dtype=float)
    y = np.asarray([pb[k] for k in common], dtype=float)
    rx, ry = _ranks(x), _ranks(y)
    spearman = float(np.corrcoef(rx, ry)[0, 1])
    tied = y[x == x.min()]  # A cannot tell these apart: report the range B gives them
    ranks = [int((y < v).sum()) + 1 for v in (tied.min(), tied.max())]
    top = min(top, len(common))
    shared = len(set(np.argsort(x, kind="stable")[:top]) & set(np.argsort(y, kind="stable")[:top]))
    return RankAgreement(len(common), spearman, _kendall_b(x, y), len(tied), tuple(ranks),
                         (float(tied.min() / y.min()), float(tied.max() / y.min())), top, shared)
