"""The scaling experiment (paper 4.3, Fig. 11): measured peak memory vs model size for each
partitioner, the capacity, and the largest trainable size of each partitioner marked."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from mcap.figures._style import balance_str, finish, method_color, method_label, scaled, unit_for
from mcap.core.scaling import Scaling

POINT_COLUMNS = ["partitioner", "value", "params", "balance", "status", "peak",
                 "predicted_peak", "largest"]
SUMMARY_COLUMNS = ["partitioner", "largest_value", "largest_params", "ratio_to_time",
                   "points", "at_high"]


def scaling_points(s: Scaling) -> pd.DataFrame:
    """One row per measured size and partitioner, sorted by partitioner then size; ``peak``
    is the measured peak (None for an oom/failed/unprofiled run), ``largest`` marks the
    largest size that trained."""
    rows = []
    for r in s.results:
        for p in sorted(r.points, key=lambda p: p.value):
            rows.append((r.partitioner, p.value, p.params,
                         None if p.balance is None else balance_str(p.balance), p.status,
                         p.peak if p.status == "ok" else None, p.predicted_peak,
                         p.value == r.largest_value))
    frame = pd.DataFrame(rows, columns=POINT_COLUMNS)
    for col in ("peak", "predicted_peak"):
        frame[col] = frame[col].astype("Int64")
    return frame


def scaling_summary(s: Scaling) -> pd.DataFrame:
    """Per partitioner: the largest trainable value and parameters, and the ratio to time."""
    rows = [(r.partitioner, r.largest_value, r.largest_params, s.ratio(r.partitioner),
             len(r.points), r.at_high) for r in s.results]
    frame = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    for col in ("largest_value", "largest_params"):
        frame[col] = frame[col].astype("Int64")
    return frame


def draw_scaling(points: pd.DataFrame, capacity: int | None = None, dataset: str = "") -> go.Figure:
    """Peak MiB vs parameters (millions): one line of ok sizes per partitioner, sizes that
    did not train as crosses at the capacity, the largest trainable size as a star."""
    unit = unit_for([*points["peak"], capacity])
    fig = go.Figure()
    for name, group in points.groupby("partitioner", sort=False):
        color = method_color(name)
        ok = group[group["status"] == "ok"]
        fig.add_scatter(x=ok["params"] / 1e6, y=scaled(ok["peak"], unit),
                        mode="lines+markers", name=method_label(name), line=dict(color=color),
                        customdata=ok["balance"],
                        hovertemplate=name + ": %{x:.2f}M params<br>%{y:.1f} " + unit[0]
                                      + "<br>%{customdata}<extra></extra>")
        bad = group[group["status"] != "ok"]
        if len(bad) and capacity:
            fig.add_scatter(x=bad["params"] / 1e6, y=[capacity / unit[1]] * len(bad), mode="markers",
                            name=f"{method_label(name)}: does not train", showlegend=False,
                            marker=dict(symbol="x", size=10, color=color),
                            customdata=bad["status"],
                            hovertemplate="%{x:.2f}M params: %{customdata}")
        top = group[group["largest"]]
        if len(top):
            fig.add_scatter(x=top["params"] / 1e6, y=scaled(top["peak"], unit),
                            mode="markers", name=f"{method_label(name)}: largest trainable",
                            marker=dict(symbol="star", size=16, color=color,
                                        line=dict(width=1, color="black")))
    if capacity:
        fig.add_hline(y=capacity / unit[1], line_dash="dash", line_color="black",
                      annotation_text="capacity", annotation_position="top left")
    fig.update_layout(xaxis_title="model size (million trainable parameters)",
                      yaxis_title=f"measured peak memory ({unit[0]})")
    return finish(fig, "Scaling: measured peak memory vs model size, per partitioner", dataset)
