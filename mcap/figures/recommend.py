"""Comparing search methods and baselines, and bo's best-so-far curve (paper 3.4)."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from mcap.figures._style import balance_str, finish, method_color, method_label, scaled, unit_for
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


def draw_curve(frame: pd.DataFrame, optimum: int | None = None, dataset: str = "",
               method: str = "bo") -> go.Figure:
    """An on-demand method's (bo's) best-so-far against the exact optimum, both to the byte
    in the hover and the optimum's label (a flat curve above the line is then visibly not
    the optimum), in the method's colour."""
    unit = unit_for([*frame["best_peak"], optimum])
    fig = go.Figure()
    fig.add_scatter(x=frame["evaluation"], y=scaled(frame["best_peak"], unit),
                    customdata=frame["best_peak"], mode="lines+markers", name=f"{method_label(method)} best so far",
                    line=dict(color=method_color(method)), line_shape="hv", hovertemplate="evaluation %{x}: %{customdata:,} bytes"
                                                   "<extra></extra>")
    if optimum is not None:
        fig.add_hline(y=optimum / unit[1], line_dash="dash", line_color="green",
                      annotation_text=f"exact optimum {optimum / unit[1]:.2f} {unit[0]} "
                                      f"({optimum:,} bytes)")
    fig.update_layout(xaxis_title="evaluation", yaxis_title=f"best predicted peak ({unit[0]})",
                      showlegend=False)
    return finish(fig, f"{method_label(method)}: best predicted peak found so far vs the "
                       "exact optimum", dataset,
                  legend=False)
