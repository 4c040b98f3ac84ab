"""Hybrid plans on a mesh (CAPTURE III-C): the devices as a grid (one row per node) coloured
by stage and labelled with the stage's layers, parallelism and degree; per-device predicted
bars (measured diamonds once the plan was measured); and one stage's batch-size line
(III-B2). Data functions return frames, draw functions figures (no streamlit)."""
from __future__ import annotations

from typing import Optional, Sequence

import pandas as pd
import plotly.graph_objects as go

from mcap.core.capture.plan import HybridPlan, Mesh
from mcap.core.capture.predict import BatchFit
from mcap.figures._style import device_color, finish, scaled, unit_for


def mesh_frame(plan: HybridPlan, mesh: Mesh, peaks: Sequence[int],
               measured: Optional[Sequence[Optional[int]]] = None) -> pd.DataFrame:
    """One row per device, in device order: its node and slot, its stage, the stage's
    layers, parallelism and degree, its predicted (and measured) peak in bytes."""
    if len(peaks) != plan.devices:
        raise ValueError(f"{len(peaks)} peaks for plan {plan.text} on {plan.devices} devices")
    rows, first, dev = [], 0, 0
    for i, s in enumerate(plan.stages):
        for _ in range(s.degree):
            rows.append({"device": dev, "node": dev // mesh.per_node, "slot": dev % mesh.per_node,
                         "stage": i, "layers": f"{first}-{first + s.layers - 1}",
                         "parallel": s.parallel, "degree": s.degree, "predicted": int(peaks[dev])})
            dev += 1
        first += s.layers
    frame = pd.DataFrame(rows)
    frame["measured"] = pd.array(list(measured) if measured is not None else [None] * dev,
                                 dtype="Int64")
    return frame


def _label(row) -> str:
    kind = "pp" if row.parallel == "pp" else f"{row.parallel}{row.degree}"
    return f"stage {row.stage}<br>layers {row.layers}<br>{kind}"


def draw_mesh(frame: pd.DataFrame, mesh: Mesh, title: str, dataset: str = "") -> go.Figure:
    """The mesh as tiles: node n is row n, device slots are columns, a stage's tiles share its
    colour; a dp/tp stage's tiles carry its kind and degree."""
    fig = go.Figure()
    unit = unit_for(frame["predicted"])
    for stage, part in frame.groupby("stage", sort=True):
        color = device_color(int(stage))
        for row in part.itertuples():
            x0, y0 = row.slot, mesh.nodes - 1 - row.node
            fig.add_shape(type="rect", x0=x0 + 0.04, x1=x0 + 0.96, y0=y0 + 0.06, y1=y0 + 0.94,
                          fillcolor=color, line=dict(color="white", width=2), layer="below")
        fig.add_scatter(
            x=part["slot"] + 0.5, y=mesh.nodes - 1 - part["node"] + 0.5, mode="text",
            text=[f"{_label(r)}<br>{r.predicted / unit[1]:.1f} {unit[0]}" for r in part.itertuples()],
            textfont=dict(color="white", size=12),
            name=f"stage {stage}", showlegend=False,
            customdata=scaled(part["predicted"], unit),
            hovertemplate="%{text}<br>predicted %{customdata:.1f} " + unit[0]
                          + "<extra></extra>")
    fig.update_xaxes(range=[0, mesh.per_node], showgrid=False, zeroline=False,
                     tickvals=[k + 0.5 for k in range(mesh.per_node)],
                     ticktext=[f"device {k}" for k in range(mesh.per_node)])
    fig.update_yaxes(range=[0, mesh.nodes], showgrid=False, zeroline=False,
                     tickvals=[mesh.nodes - 1 - n + 0.5 for n in range(mesh.nodes)],
                     ticktext=[f"node {n}" for n in range(mesh.nodes)], scaleanchor="x")
    fig.update_layout(height=160 + 130 * mesh.nodes)
    return finish(fig, title, dataset, legend=False)


def draw_peaks(frame: pd.DataFrame, title: str, dataset: str = "",
               capacity: Optional[int] = None) -> go.Figure:
    """Per-device predicted bars in their stage's colour, measured peaks as diamonds."""
    devices = [f"device {d}" for d in frame["device"]]
    measured = [None if pd.isna(v) else int(v) for v in frame["measured"]]
    unit = unit_for([*frame["predicted"], *measured, capacity])
    fig = go.Figure()
    fig.add_bar(x=devices, y=scaled(frame["predicted"], unit), name="predicted",
                marker_color=[device_color(int(s)) for s in frame["stage"]],
                customdata=[_label(r).replace("<br>", " · ") for r in frame.itertuples()],
                hovertemplate="%{customdata}<br>predicted %{y:.1f} " + unit[0] + "<extra></extra>")
    if any(v is not None for v in measured):
        fig.add_scatter(x=devices, y=scaled(measured, unit), name="measured", mode="markers",
                        marker=dict(symbol="diamond", size=14, color="black"),
                        hovertemplate="measured %{y:.1f} " + unit[0] + "<extra></extra>")
    if capacity:
        fig.add_hline(y=capacity / unit[1], line_dash="dash", line_color="red",
                      annotation_text=f"capacity {capacity / unit[1]:.1f} {unit[0]}")
    fig.update_layout(yaxis_title=f"peak memory ({unit[0]})")
    return finish(fig, title, dataset)


def batch_frame(fit: BatchFit) -> pd.DataFrame:
    """The two profiled points and the target on the line (bytes)."""
    return pd.DataFrame({"batch size": [*fit.sizes, fit.target],
                         "predicted": [*fit.peaks, fit.at_target],
                         "kind": ["profiled", "profiled", "target (on the line)"]})


def draw_batch_fit(fit: BatchFit, dataset: str = "") -> go.Figure:
    """III-B2: the stage's predicted peaks at the two profiled batch sizes, the straight line
    through them, and where it reaches the target batch size."""
    frame = batch_frame(fit)
    unit = unit_for(frame["predicted"])
    lo = min(0, *fit.sizes)
    xs = [lo, max(fit.target, *fit.sizes)]
    from mcap.core.capture.plan import batch_line
    ys = [batch_line(fit.peaks[0], fit.sizes[0], fit.peaks[1], fit.sizes[1], x) for x in xs]
    fig = go.Figure()
    fig.add_scatter(x=xs, y=scaled(ys, unit), mode="lines", name="line through the two",
                    line=dict(dash="dot", color="#7f7f7f"))
    prof = frame[frame["kind"] == "profiled"]
    fig.add_scatter(x=prof["batch size"], y=scaled(prof["predicted"], unit), mode="markers",
                    name="profiled batch sizes", marker=dict(size=12, color="#4c78a8"))
    fig.add_scatter(x=[fit.target], y=scaled([fit.at_target], unit), mode="markers",
                    name=f"target batch size {fit.target}",
                    marker=dict(size=16, symbol="star", color="#e45756"))
    fig.update_layout(xaxis_title="batch size", yaxis_title=f"predicted stage peak ({unit[0]})")
    return finish(fig, f"Batch-size line of layers {fit.first}-{fit.last} (pipeline stage)",
                  dataset)
