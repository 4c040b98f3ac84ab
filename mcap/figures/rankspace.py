"""The partition space of a sweep of a multi-chunk schedule (interleaved 1F1B, looped BFS,
zero bubble, ZBV, DualPipeV, V > 1), predicted device by device by the schedules' op model
(``mcap.core.schedules.predict``): the fullest device predicted against measured, one point
per measured partitioning, with the op model's pick; and the error of every device.

The data functions take the measured partitionings as records with ``balance``,
``predicted`` and ``measured`` (one peak per device; ``mcap.app.ranks.Measured``)."""
from __future__ import annotations

from typing import Optional, Sequence

import pandas as pd
import plotly.graph_objects as go

from mcap.figures._style import balance_str, finish, scaled, unit_for

POINT_COLUMNS = ["balance", "predicted_peak", "measured_peak", "error", "devices", "pick",
                 "best"]
ERROR_COLUMNS = ["balance", "device", "predicted", "measured", "error_percent"]
PICK_COLOR = "#d62728"
BEST_COLOR = "#2ca02c"


def rank_points(measured: Sequence, pick: Optional[Sequence[int]] = None) -> pd.DataFrame:
    """One row per measured partitioning: its balance, the fullest device's predicted and
    measured peak, their relative error, each device's predicted / measured for the hover,
    whether it is the op model's ``pick`` and whether it has the sweep's lowest measured
    peak (``best``; ties: every one)."""
    unit = unit_for([p for m in measured for p in (*m.predicted, *m.measured)])
    rows = []
    for m in measured:
        pred, meas = max(m.predicted), max(m.measured)
        devices = "<br>".join(
            f"device {d}: {p / unit[1]:.2f} / {q / unit[1]:.2f} {unit[0]}"
            for d, (p, q) in enumerate(zip(m.predicted, m.measured)))
        rows.append((balance_str(m.balance), pred, meas, (pred - meas) / meas, devices,
                     pick is not None and tuple(m.balance) == tuple(pick), False))
    frame = pd.DataFrame(rows, columns=POINT_COLUMNS)
    if len(frame):
        frame["best"] = frame["measured_peak"] == frame["measured_peak"].min()
    return frame


def device_errors(measured: Sequence) -> pd.DataFrame:
    """One row per device of every measured partitioning: predicted, measured and
    100 x (predicted - measured) / measured."""
    rows = [(balance_str(m.balance), d, p, q, 100 * (p - q) / q)
            for m in measured for d, (p, q) in enumerate(zip(m.predicted, m.measured))]
    return pd.DataFrame(rows, columns=ERROR_COLUMNS)


def draw_rank_space(points: pd.DataFrame, pick: Optional[Sequence[int]] = None,
                    pick_predicted: Optional[int] = None, dataset: str = "") -> go.Figure:
    """Scatter of the fullest device, predicted (x) against measured (y), with y = x; the
    lowest measured peak as a diamond, the op model's pick as a star where the sweep measured
    it, else a dotted line at its predicted peak."""
    values = list(points["predicted_peak"]) + list(points["measured_peak"]) + (
        [pick_predicted] if pick_predicted is not None else [])
    unit = unit_for(values)
    fig = go.Figure()
    low, high = (min(scaled(values, unit)), max(scaled(values, unit))) if values else (0, 1)
    room = 0.04 * ((high - low) or abs(high) or 1)
    fig.add_scatter(x=[low - room, high + room], y=[low - room, high + room], mode="lines",
                    name="predicted = measured", line=dict(color="#888", dash="dash"),
                    hoverinfo="skip")
    hover = ("%{customdata[0]}<br>predicted %{x:.2f} · measured %{y:.2f} " + unit[0]
             + " (%{customdata[1]:+.2%})<br>per device, predicted / measured:<br>"
               "%{customdata[2]}<extra></extra>")

    def points_of(rows, name, marker):
        fig.add_scatter(x=scaled(rows["predicted_peak"], unit),
                        y=scaled(rows["measured_peak"], unit), mode="markers", name=name,
                        customdata=rows[["balance", "error", "devices"]].values.tolist(),
                        marker=marker, hovertemplate=hover, cliponaxis=False)
    points_of(points, "measured partitionings",
              dict(size=7, color="#1f77b4", opacity=0.6))
    best = points[points["best"]]
    if len(best):
        points_of(best, "lowest measured peak", dict(size=13, symbol="diamond",
                                                     color=BEST_COLOR,
                                                     line=dict(width=1, color="black")))
    picked = points[points["pick"]]
    if len(picked):
        points_of(picked, f"op model's pick {balance_str(pick)}",
                  dict(size=22, symbol="star", color=PICK_COLOR, line=dict(width=1.5,
                                                                          color="black")))
    elif pick is not None and pick_predicted is not None:
        fig.add_vline(x=pick_predicted / unit[1], line_color=PICK_COLOR, line_dash="dot",
                      annotation_text=f"op model's pick {balance_str(pick)} (predicted; not "
                                      "in this sweep)",
                      annotation_position="top left", annotation_font_color=PICK_COLOR)
    fig.update_layout(xaxis_title=f"predicted peak of the fullest device ({unit[0]})",
                      yaxis_title=f"measured peak of the fullest device ({unit[0]})",
                      xaxis_range=[low - room, high + room],
                      yaxis_range=[low - room, high + room])
    finish(fig, "Predicted vs measured peak of every measured partitioning (op model)",
           dataset, legend=False)
    fig.update_layout(legend=dict(orientation="h", x=0, xanchor="left", y=-0.2,
                                  yanchor="top"), margin=dict(b=70))
    return fig


def draw_device_errors(errors: pd.DataFrame, p50: float, p90: float,
                       dataset: str = "") -> go.Figure:
    """Histogram of every device's relative error (percent), with ±p50 and ±p90 of |error|
    (``mcap.core.schedules.predict.evaluate``'s) as lines."""
    values = list(errors["error_percent"])
    top = max([abs(v) for v in values] + [100 * p90, 0.01])
    fig = go.Figure()
    fig.add_histogram(x=values, nbinsx=40, name="devices",
                      marker=dict(color="#4c78a8", line=dict(color="white", width=0.5)),
                      hovertemplate="%{x}%: %{y} devices<extra></extra>")
    for value, dash, text in ((p50, "dot", "p50"), (p90, "dash", "p90")):
        fig.add_vline(x=-100 * value, line_color="black", line_dash=dash)
        fig.add_vline(x=100 * value, line_color="black", line_dash=dash,
                      annotation_text=f"{text} ±{100 * value:.2g}%",
                      annotation_position="top right" if text == "p90" else "top left")
    fig.update_layout(xaxis_title="relative error of a device's predicted peak (%)",
                      yaxis_title="devices", showlegend=False, bargap=0.05,
                      xaxis_range=[-1.08 * top, 1.08 * top])
    return finish(fig, "Prediction error of every device of every measured partitioning",
                  dataset, legend=False)
