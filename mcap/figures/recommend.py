"""Comparing search methods and baselines, and bo's best-so-far curve (paper 3.4)."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from mcap.figures._style import balance_str, mib
from mcap.core.types import Recommendation, Run

COMPARE_COLUMNS = ["method", "balance", "predicted_peak", "measured_peak", "search_seconds",
                   "evaluated"]


def comparison_table(recommendations: tuple[Recommendation, ...], runs: tuple[Run, ...] = ()) -> pd.DataFrame:
    """One row per method or baseline: its balance, predicted peak, the measured peak when an
    ok run of that balance is known, search time and how many partitionings it evaluated."""
    measured = {}
    for run in runs:  # the last ok run of a balance wins: the store lists runs oldest first
        if run.status == "ok" and run.peaks:
            measured[tuple(run.balance)] = run.peak
    rows = [(r.method, balance_str(r.balance), r.predicted_peak, measured.get(tuple(r.balance)),
             r.seconds, r.evaluated) for r in recommendations]
    frame = pd.DataFrame(rows, columns=COMPARE_COLUMNS)
    frame["measured_peak"] = frame["measured_peak"].astype("Int64")
    return frame


def curve_frame(curve: tuple[int, ...]) -> pd.DataFrame:
    """bo's best-so-far predicted peak after each evaluation (1-based)."""
    return pd.DataFrame({"evaluation": range(1, len(curve) + 1), "best_peak": list(curve)})


def draw_curve(frame: pd.DataFrame, optimum: int | None = None) -> go.Figure:
    fig = go.Figure()
    fig.add_scatter(x=frame["evaluation"], y=[mib(v) for v in frame["best_peak"]],
                    mode="lines+markers", name="bo best so far", line_shape="hv")
    if optimum is not None:
        fig.add_hline(y=mib(optimum), line_dash="dash", line_color="green",
                      annotation_text=f"exact optimum {mib(optimum):.1f} MiB")
    fig.update_layout(xaxis_title="evaluation", yaxis_title="best predicted peak (MiB)",
                      margin=dict(t=30), showlegend=False)
    return fig


class _Watch:
    """Collects the stage costs bo's objective asks for, one evaluation of G stages at a time,
    and keeps the lowest fullest-device peak seen so far."""

    def __init__(self, stages: int):
        self.stages = stages
        self.pending: list[int] = []
        self.best: int | None = None

    def add(self, cost: int) -> None:
        self.pending.append(cost)
        if len(self.pending) == self.stages:
            peak = max(self.pending)
            self.best = peak if self.best is None else min(self.best, peak)
            self.pending = []


def live_bo(stats, stages: int, *, seed: int = 0, iterations: int = 75, on_best=None) -> Recommendation:
    """mCAP-BO (``mcap.core.search.bayes``) with its best-so-far peak reported after every
    evaluation: ``on_best(evaluated, best_peak)``, for a curve that grows as bo runs.

    The search's own ``progress`` callback says how many evaluations are done but not the
    best peak, so the cost table is wrapped to see each evaluated partitioning's stage costs
    (a repeated partitioning is answered from bo's cache and cannot lower the best). The
    result is the same Recommendation ``recommend(stats, stages, "bo")`` returns (tested)."""
    import time
    from dataclasses import dataclass

    from mcap.core.partition import count, validate
    from mcap.core.predict import CostTable, cost_table, predict_with
    from mcap.core.search import bayes

    base = cost_table(stats)  # validates the statistics
    count(base.num_layers, stages)  # validates the stage count, naming the values
    watch = _Watch(stages)

    @dataclass(frozen=True)
    class Watched(CostTable):
        def stage(self, first: int, last: int) -> int:
            cost = CostTable.stage(self, first, last)
            watch.add(cost)
            return cost

    def progress(done: int, total: int) -> None:
        if on_best is not None and watch.best is not None:
            on_best(done, watch.best)

    started = time.perf_counter()
    balance, evaluated, curve = bayes.solve(Watched(base.iso, base.prefix), stages, seed=seed,
                                            iterations=iterations, progress=progress)
    seconds = time.perf_counter() - started
    pred = predict_with(base, validate(balance, base.num_layers).balance)
    return Recommendation("bo", pred.balance, pred.peaks, seconds, int(evaluated), tuple(curve))
