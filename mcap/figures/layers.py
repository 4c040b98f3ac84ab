"""Per-layer statistics (paper 3.1): mem_isolated and mem_added with parameter bytes,
and the weights/gradients/optimizer/activations breakdown where the runner recorded it."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from mcap.core.errors import McapError
from mcap.figures._style import balance_str, finish, scaled, unit_for
from mcap.core.types import LayerStats, ModelInfo, Run

LAYER_COLUMNS = ["layer", "name", "param_bytes", "mem_isolated", "mem_added"]
BREAKDOWN_COLUMNS = ["balance", "stage", "weights", "gradients", "optimizer", "other", "peak"]


def layer_table(model: ModelInfo, stats: LayerStats) -> pd.DataFrame:
    """One row per layer: index, name, parameter bytes, mem_isolated, mem_added (None for layer 0)."""
    if stats.num_layers != model.num_layers:
        raise McapError(f"statistics cover {stats.num_layers} layers but model {model.spec!r} "
                        f"has {model.num_layers}")
    rows = [(i, layer.name, layer.param_bytes, stats.mem_isolated[i], stats.mem_added[i])
            for i, layer in enumerate(model.layers)]
    frame = pd.DataFrame(rows, columns=LAYER_COLUMNS)
    frame["mem_added"] = frame["mem_added"].astype("Int64")  # layer 0 has none (paper 3.1)
    return frame


def breakdown_table(runs: tuple[Run, ...]) -> pd.DataFrame:
    """One row per stage of every ok run that recorded a breakdown of its peak."""
    rows = []
    for run in runs:
        if run.status != "ok" or not run.breakdown or not run.peaks:
            continue
        for stage, (b, peak) in enumerate(zip(run.breakdown, run.peaks)):
            rows.append((balance_str(run.balance), stage, b.weights, b.gradients, b.optimizer,
                         b.other, peak))
    return pd.DataFrame(rows, columns=BREAKDOWN_COLUMNS)


def draw_layers(table: pd.DataFrame, dataset: str = "") -> go.Figure:
    """Grouped bars of mem_isolated and mem_added per layer, parameter bytes as a line;
    layer names on hover."""
    unit = unit_for([*table["mem_isolated"], *table["param_bytes"]])
    fig = go.Figure()
    hover = "%{customdata}<br>%{y:.2f} " + unit[0] + "<extra>%{fullData.name}</extra>"
    names = table["name"].tolist()
    fig.add_bar(x=table["layer"], y=scaled(table["mem_isolated"], unit), name="mem_isolated",
                customdata=names, hovertemplate=hover)
    fig.add_bar(x=table["layer"], y=scaled(table["mem_added"], unit), name="mem_added",
                customdata=names, hovertemplate=hover)
    fig.add_scatter(x=table["layer"], y=scaled(table["param_bytes"], unit), name="parameters",
                    mode="lines+markers", customdata=names, hovertemplate=hover)
    fig.update_layout(barmode="group", xaxis_title="layer", yaxis_title=unit[0])
    return finish(fig, "Per-layer memory statistics (mem_isolated, mem_added) and parameters",
                  dataset)


def draw_breakdown(table: pd.DataFrame, dataset: str = "") -> go.Figure:
    """Stacked bars of where each stage's peak went, per profiled run and stage."""
    x = [f"{b} · s{s}" for b, s in zip(table["balance"], table["stage"])]
    unit = unit_for(table["peak"])
    fig = go.Figure()
    for part in ("weights", "gradients", "optimizer", "other"):
        fig.add_bar(x=x, y=scaled(table[part], unit),
                    name="activations & buffers" if part == "other" else part)
    fig.update_layout(barmode="stack", xaxis_title="run · stage", yaxis_title=unit[0])
    return finish(fig, "Where each profiled stage's peak went", dataset)
